#include "data/indexed_dataset.hpp"

#include <unistd.h>

#include <cerrno>
#include <limits>

#include "core/bytes.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"

namespace meg {
namespace {
constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
constexpr size_t kHeaderSize = 9 + 8 + 1 + 8 + 8;
}  // namespace

size_t dtype_size(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kUint8: case TokenDtype::kInt8: return 1;
    case TokenDtype::kInt16: case TokenDtype::kUint16: return 2;
    case TokenDtype::kInt32: case TokenDtype::kFloat32: return 4;
    case TokenDtype::kInt64: case TokenDtype::kFloat64: return 8;
  }
  return 0;
}

const char* dtype_name(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kUint8: return "uint8";
    case TokenDtype::kInt8: return "int8";
    case TokenDtype::kInt16: return "int16";
    case TokenDtype::kInt32: return "int32";
    case TokenDtype::kInt64: return "int64";
    case TokenDtype::kFloat64: return "float64";
    case TokenDtype::kFloat32: return "float32";
    case TokenDtype::kUint16: return "uint16";
  }
  return "unknown";
}

bool dtype_is_integer(TokenDtype dtype) { return dtype != TokenDtype::kFloat32 && dtype != TokenDtype::kFloat64; }

TokenDtype dtype_for_vocab(uint64_t vocab_size) {
  return vocab_size < 65500 ? TokenDtype::kUint16 : TokenDtype::kInt32;
}

// ---------------------------------------------------------------------------------------------
// TokenView

int64_t TokenView::operator[](size_t i) const {
  const uint8_t* p = data + i * dtype_size(dtype);
  switch (dtype) {
    case TokenDtype::kUint8: return *p;
    case TokenDtype::kInt8: return static_cast<int8_t>(*p);
    case TokenDtype::kInt16: return load_unaligned<int16_t>(p);
    case TokenDtype::kUint16: return load_unaligned<uint16_t>(p);
    case TokenDtype::kInt32: return load_unaligned<int32_t>(p);
    case TokenDtype::kInt64: return load_unaligned<int64_t>(p);
    case TokenDtype::kFloat32: return static_cast<int64_t>(load_unaligned<float>(p));
    case TokenDtype::kFloat64: return static_cast<int64_t>(load_unaligned<double>(p));
  }
  return 0;
}

void TokenView::copy_to(int32_t* out, size_t from, size_t n) const {
  if (n == 0) return;  // an empty document's view may have no data at all: memcpy(nullptr) is UB
  // The two dtypes meg writes get tight loops; the rest go through operator[].
  if (dtype == TokenDtype::kUint16) {
    const uint8_t* p = data + 2 * from;
    for (size_t i = 0; i < n; ++i) out[i] = load_unaligned<uint16_t>(p + 2 * i);
  } else if (dtype == TokenDtype::kInt32) {
    std::memcpy(out, data + 4 * from, 4 * n);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>((*this)[from + i]);
  }
}

std::vector<int32_t> TokenView::to_vector() const {
  std::vector<int32_t> v(size);
  copy_to(v.data(), 0, size);
  return v;
}

// ---------------------------------------------------------------------------------------------
// IndexedDataset

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx_path = prefix + ".idx";
  const std::string bin_path = prefix + ".bin";
  idx_ = MappedFile(idx_path);
  const uint8_t* p = idx_.data();
  if (idx_.size() < kHeaderSize) {
    if (idx_.size() >= 9 && std::memcmp(p, kMagic, 9) != 0)
      input_error("{}: offset 0: not a Megatron indexed dataset index (bad magic)", idx_path);
    input_error("{}: truncated: {} bytes, shorter than the {}-byte header", idx_path, idx_.size(), kHeaderSize);
  }
  if (std::memcmp(p, kMagic, 9) != 0)
    input_error("{}: offset 0: not a Megatron indexed dataset index (bad magic)", idx_path);
  const uint64_t version = load_unaligned<uint64_t>(p + 9);
  if (version != kVersion)
    input_error("{}: offset 9: index version {} is not supported (only version 1)", idx_path, version);
  const uint8_t code = p[17];
  if (code < 1 || code > 8) input_error("{}: offset 17: unknown dtype code {}", idx_path, code);
  dtype_ = static_cast<TokenDtype>(code);
  const uint64_t seqs = load_unaligned<uint64_t>(p + 18);
  const uint64_t docs = load_unaligned<uint64_t>(p + 26);
  // Sizes are checked in 128-bit-safe steps so a corrupt count cannot overflow the arithmetic.
  const uint64_t max_entries = idx_.size() / 4;
  if (seqs > max_entries || docs > max_entries || docs == 0)
    input_error("{}: offset 18: implausible counts ({} sequences, {} document indices) for a {}-byte index",
                idx_path, seqs, docs, idx_.size());
  const uint64_t expected = kHeaderSize + seqs * 4 + seqs * 8 + docs * 8;
  if (idx_.size() != expected)
    input_error("{}: size is {} bytes but its header ({} sequences, {} document indices) needs {}{}", idx_path,
                idx_.size(), seqs, docs, expected, idx_.size() < expected ? " (truncated)" : "");
  num_sequences_ = seqs;
  num_doc_indices_ = docs;
  lengths_ = p + kHeaderSize;
  pointers_ = lengths_ + seqs * 4;
  doc_indices_ = pointers_ + seqs * 8;

  bin_ = MappedFile(bin_path);
  const size_t item = dtype_size(dtype_);
  if (bin_.size() % item != 0)
    input_error("{}: size {} is not a multiple of the {}-byte {} tokens", bin_path, bin_.size(), item,
                dtype_name(dtype_));
  // The end of the last sequence against the .bin size first, so that the usual mismatch (a
  // truncated or replaced .bin) is named as such; negative entries are check_structure()'s to name.
  const int64_t last_ptr = seqs > 0 ? sequence_pointer(seqs - 1) : 0;
  const int32_t last_len = seqs > 0 ? sequence_length(seqs - 1) : 0;
  const uint64_t end = uint64_t(last_ptr) + uint64_t(last_len) * item;
  if (last_ptr >= 0 && last_len >= 0 && end != bin_.size())
    input_error("{}: size is {} bytes but {} says its sequences end at byte {}{}", bin_path, bin_.size(), idx_path,
                end, bin_.size() < end ? " (truncated .bin)" : " (index and data do not match)");
  check_structure();
}

void IndexedDataset::check_structure() const {
  // Every reader trusts these arrays to stay inside both maps, so they are checked whole here: one
  // pass over the sequences and one over the document indices, a few milliseconds per million.
  const std::string idx_path = prefix_ + ".idx";
  const size_t item = dtype_size(dtype_);
  const uint64_t S = num_sequences_;
  const auto length_at = [&](size_t i) { return kHeaderSize + 4 * i; };
  const auto pointer_at = [&](size_t i) { return kHeaderSize + 4 * S + 8 * i; };
  const auto doc_index_at = [&](size_t d) { return kHeaderSize + 12 * S + 8 * d; };
  uint64_t offset = 0;
  for (size_t i = 0; i < S; ++i) {
    const int32_t len = sequence_length(i);
    if (len < 0) input_error("{}: offset {}: sequence {}: negative length {}", idx_path, length_at(i), i, len);
    if (uint64_t(sequence_pointer(i)) != offset) {
      if (i == 0)
        input_error("{}: offset {}: sequence 0 starts at byte {}, not 0", idx_path, pointer_at(0), sequence_pointer(0));
      input_error("{}: offset {}: sequence {} starts at byte {} but sequence {} ends at byte {} (lengths and offsets "
                  "disagree)", idx_path, pointer_at(i), i, sequence_pointer(i), i - 1, offset);
    }
    offset += uint64_t(len) * item;
    if (offset > bin_.size())
      input_error("{}: offset {}: sequence {}: length {} runs to byte {}, past the end of {}.bin ({} bytes)", idx_path,
                  length_at(i), i, len, offset, prefix_, bin_.size());
  }
  if (offset != bin_.size())
    input_error("{}: its sequences cover {} bytes but {}.bin has {}", idx_path, offset, prefix_, bin_.size());
  if (document_index(0) != 0)
    input_error("{}: offset {}: document index 0 is {}, not 0", idx_path, doc_index_at(0), document_index(0));
  for (size_t d = 1; d < num_doc_indices_; ++d) {
    const int64_t v = document_index(d), prev = document_index(d - 1);
    if (v < prev)
      input_error("{}: offset {}: document index {} is {}, below the one before it ({})", idx_path, doc_index_at(d),
                  d, v, prev);
    if (uint64_t(v) > S)
      input_error("{}: offset {}: document index {} is {}, past the sequence count {}", idx_path, doc_index_at(d), d,
                  v, S);
  }
  if (uint64_t(document_index(num_doc_indices_ - 1)) != S)
    input_error("{}: offset {}: the last document index is {} but there are {} sequences", idx_path,
                doc_index_at(num_doc_indices_ - 1), document_index(num_doc_indices_ - 1), S);
}

TokenView IndexedDataset::sequence(size_t i) const {
  return {bin_.data() + sequence_pointer(i), size_t(sequence_length(i)), dtype_};
}

TokenView IndexedDataset::document(size_t i) const {
  const int64_t first = document_index(i), last = document_index(i + 1);
  if (first == last) return {bin_.data(), 0, dtype_};
  const int64_t begin = sequence_pointer(first);
  const size_t bytes = sequence_pointer(last - 1) + size_t(sequence_length(last - 1)) * dtype_size(dtype_) - begin;
  return {bin_.data() + begin, bytes / dtype_size(dtype_), dtype_};
}

size_t IndexedDataset::document_length(size_t i) const {
  size_t n = 0;
  for (int64_t s = document_index(i); s < document_index(i + 1); ++s) n += sequence_length(s);
  return n;
}

void IndexedDataset::verify(uint64_t vocab_size) const {
  // The structure was checked on opening; what is left is every token.
  const size_t item = dtype_size(dtype_);
  if (!dtype_is_integer(dtype_)) input_error("{}.idx: {} tokens are not token ids", prefix_, dtype_name(dtype_));
  const TokenView all{bin_.data(), bin_.size() / item, dtype_};
  for (size_t i = 0; i < all.size; ++i) {
    const int64_t t = all[i];
    if (t < 0) input_error("{}.bin: offset {}: negative token {}", prefix_, i * item, t);
    if (vocab_size > 0 && uint64_t(t) >= vocab_size)
      input_error("{}.bin: offset {}: token {} is outside the vocabulary of {}", prefix_, i * item, t, vocab_size);
  }
}

uint64_t IndexedDataset::idx_fingerprint() const { return xxh64(idx_.data(), idx_.size()); }

// ---------------------------------------------------------------------------------------------
// IndexedDatasetWriter

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenDtype dtype)
    : prefix_(prefix), dtype_(dtype), bin_(prefix + ".bin") {
  if (dtype != TokenDtype::kUint16 && dtype != TokenDtype::kInt32)
    throw std::invalid_argument("meg writes uint16 or int32 tokens");
}

void IndexedDatasetWriter::add_document(const TokenView& tokens) {
  if (tokens.size > 0) {
    if (tokens.size > size_t(std::numeric_limits<int32_t>::max()))
      input_error("{}.bin: a document of {} tokens is longer than the format allows", prefix_, tokens.size);
    if (tokens.dtype == dtype_) {
      bin_.write(tokens.data, tokens.bytes());  // the common case: the bytes are already right
    } else {
      buf_.resize(tokens.size * dtype_size(dtype_));
      for (size_t i = 0; i < tokens.size; ++i) {
        const int64_t t = tokens[i];
        if (dtype_ == TokenDtype::kUint16) {
          const auto v = static_cast<uint16_t>(t);
          std::memcpy(buf_.data() + 2 * i, &v, 2);
        } else {
          const auto v = static_cast<int32_t>(t);
          std::memcpy(buf_.data() + 4 * i, &v, 4);
        }
      }
      bin_.write(buf_.data(), buf_.size());
    }
    lengths_.push_back(static_cast<int32_t>(tokens.size));
    tokens_ += tokens.size;
  }
  doc_indices_.push_back(static_cast<int64_t>(lengths_.size()));
}

void IndexedDatasetWriter::append(const IndexedDataset& other) {
  if (other.dtype() != dtype_)
    input_error("{}: tokens are {} but the output is {}: merge datasets of one dtype", other.prefix(),
                dtype_name(other.dtype()), dtype_name(dtype_));
  const int64_t base = static_cast<int64_t>(lengths_.size());
  for (size_t i = 0; i < other.num_sequences(); ++i) lengths_.push_back(other.sequence_length(i));
  for (size_t d = 1; d <= other.num_documents(); ++d) doc_indices_.push_back(base + other.document_index(d));
  // The .bin is the sequences back to back, so the whole file copies over as one block.
  if (other.num_sequences() > 0) {
    const TokenView first = other.sequence(0);
    bin_.write(first.data, other.bin_bytes());
  }
  tokens_ += other.num_tokens();
}

void IndexedDatasetWriter::finish() {
  ByteWriter idx(prefix_ + ".idx");
  const uint64_t version = kVersion, seqs = lengths_.size(), docs = doc_indices_.size();
  const uint8_t code = static_cast<uint8_t>(dtype_);
  idx.write(kMagic, sizeof(kMagic));
  idx.write(&version, 8);
  idx.write(&code, 1);
  idx.write(&seqs, 8);
  idx.write(&docs, 8);
  idx.write(lengths_.data(), lengths_.size() * 4);
  std::vector<int64_t> pointers(lengths_.size());
  int64_t offset = 0;
  for (size_t i = 0; i < lengths_.size(); ++i) {
    pointers[i] = offset;
    offset += int64_t(lengths_[i]) * int64_t(dtype_size(dtype_));
  }
  idx.write(pointers.data(), pointers.size() * 8);
  idx.write(doc_indices_.data(), doc_indices_.size() * 8);
  // The .idx is the commit point of the pair. Both are on disk under temporary names first; the
  // old .idx goes before the new .bin takes its name, and the new .idx comes last. A crash at any
  // moment leaves the old pair, the new pair, or a .bin without an .idx (no dataset), never a .bin
  // beside an .idx that does not describe it.
  bin_.sync();
  idx.sync();
  const std::string idx_path = prefix_ + ".idx", dir = directory_of(idx_path);
  if (::unlink(idx_path.c_str()) == 0)
    sync_directory(dir);  // the removal is durable before the rename that needs it
  else if (errno != ENOENT)
    system_error(idx_path, "cannot remove the old index to replace it");
  bin_.commit();
  idx.commit();
  sync_directory(dir);
}

}  // namespace meg
