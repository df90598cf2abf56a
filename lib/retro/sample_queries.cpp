#include "retro/sample_queries.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/float16.hpp"

namespace meg {

void check_sample_chunking(const GptDataset& data, uint64_t chunk_length) {
  if (data.seq_length() % chunk_length != 0)
    input_error("--chunk-length {}: does not divide the sequence length {} of {}: a RETRO sample must be whole chunks",
                chunk_length, data.seq_length(), data.blend().path());
}

SampleChunkQueries::SampleChunkQueries(const GptDataset& data, const ChunkDb& db, ChunkEmbedder& embedder,
                                       uint64_t samples)
    : data_(data), db_(db), embedder_(embedder), samples_(samples), tokens_(data.seq_length() + 1) {
  check_sample_chunking(data, db.chunk_length());
  per_sample_ = data.seq_length() / db.chunk_length();
}

const int32_t* SampleChunkQueries::sample_tokens(uint64_t sample) {
  if (sample != cached_) data_.sample(Split::kTrain, sample, tokens_.data());
  cached_ = sample;
  return tokens_.data();
}

void SampleChunkQueries::block(uint64_t first, size_t n, float* vectors, std::vector<std::vector<IdRange>>& exclude) {
  const size_t length = db_.chunk_length();
  const ChunkReader read = [&](uint64_t row, size_t m, int32_t* tokens, uint32_t* lengths) {
    for (size_t i = 0; i < m; ++i) {
      const int32_t* sample = sample_tokens((row + i) / per_sample_);
      std::copy_n(sample + (row + i) % per_sample_ * length, length, tokens + i * length);
      lengths[i] = uint32_t(length);
    }
  };
  embed_chunks(embedder_, read, length, first, n, vectors);
  // As the database's vectors are stored: a query chunk equal to a database chunk is then at
  // distance 0 from it.
  for (size_t i = 0; i < n * embedder_.dim(); ++i) vectors[i] = fp16_to_float(float_to_fp16(vectors[i]));

  for (size_t i = 0; i < n; ++i) {
    const uint64_t sample = (first + i) / per_sample_;
    if (i > 0 && sample == (first + i - 1) / per_sample_) {
      exclude[i] = exclude[i - 1];
      continue;
    }
    const GptDataset::SampleDocuments where = data_.sample_documents(Split::kTrain, sample);
    exclude[i].clear();
    for (int32_t doc : where.documents) exclude[i].push_back(db_.document_chunks(int64_t(where.input), doc));
  }
}

}  // namespace meg
