// The query set of a blend: the chunks of its train samples, as Megatron's RETRO preprocessing
// queries them (its GPTChunkDataset). Sample i of the train split (in the blend's order, the one
// meg-pretrain reads) gives C = seq_length / chunk_length query rows, i * C + j holding tokens
// [j * chunk_length, (j + 1) * chunk_length) of the sample; the sample's extra token (its last
// target) is in no chunk. Each row is embedded as the database's chunks are (the same embedder,
// rounded through float16 as embeddings.mat stores them), and leaves out the chunks of every
// document the sample's tokens come from, not only its own chunk's: a RETRO model's chunk j is
// helped by the neighbours of chunk j - 1, which must not hold the sample's own text.
#pragma once

#include <cstdint>
#include <vector>

#include "data/gpt_dataset.hpp"
#include "retro/chunk_db.hpp"
#include "retro/embedder.hpp"
#include "retro/query_stage.hpp"

namespace meg {

class SampleChunkQueries final : public QuerySet {
 public:
  // The first SAMPLES train samples of DATA (whose inputs are DB's, in order), through EMBEDDER.
  // InputError unless DB's chunk length divides the blend's sequence length.
  SampleChunkQueries(const GptDataset& data, const ChunkDb& db, ChunkEmbedder& embedder, uint64_t samples);
  uint64_t rows() const override { return samples_ * per_sample_; }
  uint64_t chunks_per_sample() const { return per_sample_; }
  void block(uint64_t first, size_t n, float* vectors, std::vector<std::vector<IdRange>>& exclude) override;

 private:
  const int32_t* sample_tokens(uint64_t sample);  // the tokens of SAMPLE, read once in a row

  const GptDataset& data_;
  const ChunkDb& db_;
  ChunkEmbedder& embedder_;
  uint64_t samples_, per_sample_;
  uint64_t cached_ = UINT64_MAX;
  std::vector<int32_t> tokens_;
};

// InputError unless CHUNK_LENGTH divides DATA's sequence length.
void check_sample_chunking(const GptDataset& data, uint64_t chunk_length);

}  // namespace meg
