#include "retro/chunk_db.hpp"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/error.hpp"
#include "core/progress.hpp"

namespace meg {
namespace {

// The largest token id DTYPE holds; InputError for the float dtypes, which hold no token ids.
int64_t max_token(TokenDtype dtype, const std::string& prefix) {
  switch (dtype) {
    case TokenDtype::kUint8: return std::numeric_limits<uint8_t>::max();
    case TokenDtype::kInt8: return std::numeric_limits<int8_t>::max();
    case TokenDtype::kInt16: return std::numeric_limits<int16_t>::max();
    case TokenDtype::kUint16: return std::numeric_limits<uint16_t>::max();
    case TokenDtype::kInt32: return std::numeric_limits<int32_t>::max();
    case TokenDtype::kInt64: return std::numeric_limits<int32_t>::max();  // meg's tokens are int32
    case TokenDtype::kFloat32:
    case TokenDtype::kFloat64: break;
  }
  input_error("{}.idx: dtype {} holds no token ids", prefix, dtype_name(dtype));
}

}  // namespace

ChunkDbStats build_chunk_db(const std::vector<const IndexedDataset*>& inputs, uint32_t chunk_length, int64_t pad_id,
                            const std::string& dir, uint64_t fingerprint) {
  const TokenDtype dtype = inputs.at(0)->dtype();
  const int64_t largest = max_token(dtype, inputs[0]->prefix());
  if (pad_id < 0 || pad_id > largest)
    input_error("--pad-id {}: not a token of the inputs' dtype {} (0 to {})", pad_id, dtype_name(dtype), largest);
  uint64_t total = 0;
  for (const IndexedDataset* in : inputs) total += in->num_tokens();

  IndexedDatasetWriter writer(dir + "/chunks", dtype);
  std::vector<int64_t> table;
  std::vector<int32_t> chunk(chunk_length);
  ChunkDbStats stats;
  Progress progress("db", total, "tokens");
  for (size_t k = 0; k < inputs.size(); ++k) {
    const IndexedDataset& in = *inputs[k];
    for (size_t s = 0; s < in.num_sequences(); ++s) {
      const TokenView doc = in.sequence(s);
      for (size_t begin = 0; begin < doc.size; begin += chunk_length) {
        const size_t n = std::min<size_t>(chunk_length, doc.size - begin);
        doc.copy_to(chunk.data(), begin, n);
        std::fill(chunk.begin() + ptrdiff_t(n), chunk.end(), int32_t(pad_id));
        writer.add_document(std::span<const int32_t>(chunk));
        table.insert(table.end(), {int64_t(k), int64_t(s), int64_t(begin), int64_t(begin + n)});
      }
      stats.tokens += doc.size;
      progress.add(doc.size);
    }
    stats.documents += in.num_sequences();
  }
  progress.finish();
  writer.finish();
  stats.chunks = table.size() / 4;
  write_matrix<int64_t>(dir + "/chunks.mat", stats.chunks, 4, table, fingerprint);
  return stats;
}

ChunkDb::ChunkDb(const std::string& dir) : data_(dir + "/chunks"), table_(dir + "/chunks.mat", MatrixDtype::kI64) {
  check_matrix_shape(table_, data_.num_sequences(), 4, "the chunk table");
  if (size() == 0) input_error("{}: no chunks", table_.path());
  chunk_length_ = uint32_t(data_.sequence_length(0));
  if (chunk_length_ == 0 || data_.num_tokens() != size() * chunk_length_)
    input_error("{}.bin: the chunks are not all {} tokens long", data_.prefix(), chunk_length_);
  // Every chunk is the next piece of its document, or the first of a document after the last.
  document_end_.resize(size());
  for (uint64_t i = 0; i < size(); ++i) {
    const ChunkInfo c = info(i), prev = i > 0 ? info(i - 1) : ChunkInfo{-1, -1, 0, 0};
    const bool first = c.begin == 0 && std::pair(c.input, c.document) > std::pair(prev.input, prev.document);
    const bool follows = prev.input == c.input && prev.document == c.document && prev.end == c.begin &&
                         prev.end - prev.begin == chunk_length_;
    if (data_.sequence_length(i) != int32_t(chunk_length_) || c.end <= c.begin ||
        c.end - c.begin > chunk_length_ || !(first || follows))
      input_error("{}: row {} ({}, {}, {}, {}) is not the next chunk of a document", table_.path(), i, c.input,
                  c.document, c.begin, c.end);
  }
  for (uint64_t i = size(); i-- > 0;) {
    const bool last = i + 1 == size() || info(i + 1).begin == 0;
    document_end_[i] = last ? int64_t(i + 1) : document_end_[i + 1];
  }
}

IdRange ChunkDb::document_chunks(int64_t input, int64_t document) const {
  // The table is sorted by (input, document): the document's chunks are one run of it.
  const auto key = std::pair(input, document);
  const auto before = [&](int64_t i, bool upper) {
    const ChunkInfo c = info(uint64_t(i));
    return upper ? std::pair(c.input, c.document) <= key : std::pair(c.input, c.document) < key;
  };
  const auto first = [&](bool upper) {
    int64_t lo = 0, hi = int64_t(size());
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (before(mid, upper)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  return {first(false), first(true)};
}

void ChunkDb::read(uint64_t first, size_t n, int32_t* out, uint32_t* lengths) const {
  for (size_t i = 0; i < n; ++i) {
    data_.sequence(first + i).copy_to(out + i * chunk_length_, 0, chunk_length_);
    lengths[i] = length(first + i);
  }
}

}  // namespace meg
