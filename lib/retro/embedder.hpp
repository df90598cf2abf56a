// Chunk embedders: a vector per chunk of tokens, for the nearest-neighbour search. Megatron's
// RETRO embeds chunks with BERT; meg embeds them with a meg checkpoint of its own decoder
// (GPT-2 or Llama): the mean, over the chunk's real tokens (not its padding), of the final norm's
// output. The decoder is causal, so the padding after the real tokens changes none of their
// hidden states and a chunk's embedding does not depend on the pad token.
//
// Two embedders take batches of chunks: the CPU one (fp32, the reference) and the CUDA one
// (retro/cuda_embedder_cuda.cpp: the GPU inference transformer in fp32, bf16 or fp16, the mean
// taken in fp32 on the device; CUDA builds only). A chunk's vector depends on its own tokens only,
// not on the rest of its batch (to the last bits a GEMM's blocking may move).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/precision.hpp"
#include "infer/checkpoint_model.hpp"
#include "model/gpt.hpp"

namespace meg {

class ChunkEmbedder {
 public:
  virtual ~ChunkEmbedder() = default;
  virtual size_t dim() const = 0;
  // Chunks that one embed() call takes at most.
  virtual size_t batch() const = 0;
  // N chunks (N <= batch()): TOKENS [N, CHUNK_LENGTH], the first LENGTHS[i] (1 or more) of row i
  // real, the rest padding; writes their vectors to OUT [N, dim()].
  virtual void embed(const int32_t* tokens, const uint32_t* lengths, size_t n, size_t chunk_length, float* out) = 0;
};

// Where chunks come from: READ(FIRST, N, TOKENS, LENGTHS) writes chunks [FIRST, FIRST + N) of
// its source into TOKENS [N, chunk length], their real token counts (1 or more) into LENGTHS.
using ChunkReader = std::function<void(uint64_t first, size_t n, int32_t* tokens, uint32_t* lengths)>;

// Chunks [FIRST, FIRST + N) of READ's source, CHUNK_LENGTH tokens each, through EMBEDDER a batch
// at a time, into OUT [N, dim()]: the database's chunks (embed stage) and the training samples'
// chunks (query stage) are embedded by this one path, so that equal tokens give equal vectors.
void embed_chunks(ChunkEmbedder& embedder, const ChunkReader& read, size_t chunk_length, uint64_t first, size_t n,
                  float* out);

// The CPU embedder: GptModel<float> (fp32) over the checkpoint's parameters, in evaluation mode,
// BATCH chunks a forward.
class CpuEmbedder final : public ChunkEmbedder {
 public:
  CpuEmbedder(CheckpointModel checkpoint, size_t batch);
  size_t dim() const override { return size_t(params_.config.hidden_size); }
  size_t batch() const override { return batch_; }
  void embed(const int32_t* tokens, const uint32_t* lengths, size_t n, size_t chunk_length, float* out) override;

 private:
  CheckpointModel params_;  // the model reads its parameters from here
  GptModel<float> model_;
  size_t batch_;
};

// The embedder of CHECKPOINT on DEVICE ("cpu" or "cuda"; PRECISION is the CUDA path's, the CPU
// computing in fp32 only) for up to BATCH chunks of up to CHUNK_LENGTH tokens a call. InputError
// on another device, a precision the device lacks, --device cuda without CUDA or a GPU, or chunks
// longer than a GPT-2 embedder's positions (the CPU's at its first forward).
std::unique_ptr<ChunkEmbedder> make_chunk_embedder(CheckpointModel checkpoint, const std::string& device,
                                                   Precision precision, size_t batch, size_t chunk_length);

#if MEG_CUDA
std::unique_ptr<ChunkEmbedder> make_cuda_embedder(const CheckpointModel& checkpoint, Precision precision, size_t batch,
                                                  size_t chunk_length);
#endif

}  // namespace meg
