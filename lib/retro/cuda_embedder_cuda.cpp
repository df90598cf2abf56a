// The CUDA chunk embedder (retro/embedder.hpp): a batch of chunks through the transformer of the
// GPU inference paths (infer/cuda_transformer.hpp) as the CUDA scorer runs whole sequences (the
// embedding, then the blocks with rope_forward and the causal flash attention_forward over the
// B x T batch), then the final norm and each chunk's mean over its real tokens, in fp32; only the
// [N, C] means come back to the host. Everything is queued on the transformer's stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstring>
#include <stdexcept>

#include "core/error.hpp"
#include "infer/cuda_transformer.hpp"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"
#include "retro/cuda_kernels.hpp"
#include "retro/embedder.hpp"

namespace meg {

namespace {

template <typename X>
class CudaEmbedder final : public ChunkEmbedder {
 public:
  CudaEmbedder(const CheckpointModel& checkpoint, size_t batch, size_t chunk_length);

  size_t dim() const override { return size_t(net_.dims().C); }
  size_t batch() const override { return batch_; }
  void embed(const int32_t* tokens, const uint32_t* lengths, size_t n, size_t chunk_length, float* out) override;

 private:
  void check(const int32_t* tokens, const uint32_t* lengths, size_t n, size_t chunk_length) const;

  size_t batch_, chunk_length_;
  CudaTransformer<X> net_;  // before the arrays: they go back to its allocator
  cuda::DeviceArray<X> x_, normed_;
  cuda::DeviceArray<float> lse_, pooled_;
  cuda::DeviceArray<int32_t> ints_;  // a batch's tokens, then its lengths
  PinnedArray<int32_t> staging_;
  PinnedArray<float> pooled_host_;
};

// BATCH chunks of CHUNK_LENGTH tokens a forward, as rows of the transformer: positive, within its
// rows' int, and within the learned positions of GPT-2.
int checked_rows(const ModelConfig& config, size_t batch, size_t chunk_length) {
  if (batch == 0 || chunk_length == 0) input_error("--batch and --chunk-length must be positive");
  if (config.learned_positions() && chunk_length > size_t(config.seq_length))
    input_error("--chunk-length {}: longer than the embedder's {} positions", chunk_length, config.seq_length);
  if (batch > size_t(INT_MAX) / chunk_length)
    input_error("--batch {}: {} chunks of {} tokens are too many rows for one forward", batch, batch, chunk_length);
  return int(batch * chunk_length);
}

template <typename X>
CudaEmbedder<X>::CudaEmbedder(const CheckpointModel& checkpoint, size_t batch, size_t chunk_length)
    : batch_(batch),
      chunk_length_(chunk_length),
      net_(checkpoint.config, checkpoint.params, checked_rows(checkpoint.config, batch, chunk_length),
           int(chunk_length)) {
  const auto& d = net_.dims();
  auto& alloc = net_.allocator();
  const size_t N = size_t(net_.max_rows());
  x_ = cuda::DeviceArray<X>(alloc, N * d.C);
  normed_ = cuda::DeviceArray<X>(alloc, N * d.C);
  lse_ = cuda::DeviceArray<float>(alloc, N * d.NH);
  pooled_ = cuda::DeviceArray<float>(alloc, batch * d.C);
  ints_ = cuda::DeviceArray<int32_t>(alloc, N + batch);
  staging_.grow(N + batch);
  pooled_host_.grow(batch * d.C);
}

template <typename X>
void CudaEmbedder<X>::check(const int32_t* tokens, const uint32_t* lengths, size_t n, size_t chunk_length) const {
  if (n > batch_ || chunk_length > chunk_length_)
    input_error("embed: {} chunks of {} tokens; at most {} of {}", n, chunk_length, batch_, chunk_length_);
  const int32_t V = int32_t(net_.config().vocab_size);
  for (size_t i = 0; i < n * chunk_length; ++i)
    if (tokens[i] < 0 || tokens[i] >= V) input_error("embed: token {} outside the vocabulary of {}", tokens[i], V);
  for (size_t i = 0; i < n; ++i)
    if (lengths[i] < 1 || lengths[i] > chunk_length)
      input_error("embed: a chunk of {} real tokens; 1 to {}", lengths[i], chunk_length);
}

template <typename X>
void CudaEmbedder<X>::embed(const int32_t* tokens, const uint32_t* lengths, size_t n, size_t chunk_length,
                            float* out) {
  if (n == 0) return;
  check(tokens, lengths, n, chunk_length);
  const auto& d = net_.dims();
  const cudaStream_t s = net_.stream();
  const int B = int(n), T = int(chunk_length), N = B * T;

  int32_t* host = staging_.get();
  std::memcpy(host, tokens, size_t(N) * sizeof(int32_t));
  for (size_t i = 0; i < n; ++i) host[N + i] = int32_t(lengths[i]);
  MEG_CUDA_CHECK(cudaMemcpyAsync(ints_.get(), host, (size_t(N) + n) * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  const int32_t *d_tokens = ints_.get(), *d_lengths = d_tokens + N;

  X* x = x_.get();
  cuda::embedding_forward(x, d_tokens, net_.wte(), net_.wpe(), B, T, d.C, 0, d.Vp, s);
  net_.blocks(x, N, [&](size_t, X* qkv, X* att) {
    if (net_.rope_table()) cuda::rope_forward(qkv, net_.rope_table(), B, T, d.NH, d.NKV, d.HS, s);
    cuda::attention_forward(att, lse_.get(), qkv, B, T, d.NH, d.NKV, d.HS, s, 0, 0, net_.config().attention_window());
  });
  net_.final_norm(normed_.get(), x, N);
  cuda::mean_over_lengths(pooled_.get(), normed_.get(), d_lengths, B, T, d.C, s);
  MEG_CUDA_CHECK(
      cudaMemcpyAsync(pooled_host_.get(), pooled_.get(), n * d.C * sizeof(float), cudaMemcpyDeviceToHost, s));
  MEG_CUDA_CHECK(cudaStreamSynchronize(s));
  std::memcpy(out, pooled_host_.get(), n * d.C * sizeof(float));
}

}  // namespace

std::unique_ptr<ChunkEmbedder> make_cuda_embedder(const CheckpointModel& checkpoint, Precision precision,
                                                  size_t batch, size_t chunk_length) {
  switch (precision) {
    case Precision::fp32: return std::make_unique<CudaEmbedder<float>>(checkpoint, batch, chunk_length);
    case Precision::bf16: return std::make_unique<CudaEmbedder<__nv_bfloat16>>(checkpoint, batch, chunk_length);
    case Precision::fp16: return std::make_unique<CudaEmbedder<__half>>(checkpoint, batch, chunk_length);
  }
  throw std::invalid_argument("make_cuda_embedder: unknown precision");
}

}  // namespace meg
