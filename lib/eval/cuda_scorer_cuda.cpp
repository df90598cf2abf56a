// The CUDA scorer (eval/scorer.hpp): whole sequences through the transformer of the GPU inference
// paths (infer/cuda_transformer.hpp), with the training's causal attention (rope_forward and the
// flash attention_forward over the B x T batch), then log-probabilities and greedy flags of the
// targets computed on the device:
//   - only the rows with a target go on past the blocks: gathered, then through the final norm and
//     the output layer in chunks of rows whose logits fit kLogitsBytes;
//   - cross_entropy_fused (with no gradient) gives each row's loss, -log p(target), and
//     argmax_rows its greedy token; only those two numbers per row come back to the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/error.hpp"
#include "eval/scorer.hpp"
#include "infer/cuda_transformer.hpp"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg {

namespace {

constexpr size_t kLogitsBytes = size_t(256) << 20;  // a chunk of rows' logits

template <typename X>
class CudaScorer final : public Scorer {
 public:
  CudaScorer(const CheckpointModel& checkpoint, int max_batch);

  const ModelConfig& config() const override { return net_.config(); }
  int max_length() const override { return int(net_.config().seq_length); }
  int max_batch() const override { return max_batch_; }
  void score(const int32_t* tokens, const int32_t* targets, int B, int T, TokenScore* out) override;

 private:
  void check(const int32_t* tokens, const int32_t* targets, int B, int T) const;

  int max_batch_;
  CudaTransformer<X> net_;  // before the arrays: they go back to its allocator
  int chunk_rows_;          // rows of logits per chunk
  cuda::DeviceArray<X> x_, rows_, logits_;
  cuda::DeviceArray<float> lse_, losses_;
  cuda::DeviceArray<int32_t> ints_, argmax_;
  PinnedArray<int32_t> staging_, argmax_host_;
  PinnedArray<float> losses_host_;
};

int checked_batch(int max_batch) {
  if (max_batch < 1) input_error("--batch must be at least 1, got {}", max_batch);
  return max_batch;
}

template <typename X>
CudaScorer<X>::CudaScorer(const CheckpointModel& checkpoint, int max_batch)
    : max_batch_(checked_batch(max_batch)),
      net_(checkpoint.config, checkpoint.params, max_batch * int(checkpoint.config.seq_length),
           int(checkpoint.config.seq_length)) {
  const auto& d = net_.dims();
  auto& alloc = net_.allocator();
  const size_t N = size_t(net_.max_rows());
  chunk_rows_ = int(std::clamp<size_t>(kLogitsBytes / (size_t(d.Vp) * sizeof(X)), 1, N));
  x_ = cuda::DeviceArray<X>(alloc, N * d.C);
  rows_ = cuda::DeviceArray<X>(alloc, size_t(chunk_rows_) * d.C);
  logits_ = cuda::DeviceArray<X>(alloc, size_t(chunk_rows_) * d.Vp);
  lse_ = cuda::DeviceArray<float>(alloc, N * d.NH);
  losses_ = cuda::DeviceArray<float>(alloc, N);
  ints_ = cuda::DeviceArray<int32_t>(alloc, 3 * N);
  argmax_ = cuda::DeviceArray<int32_t>(alloc, N);
  staging_.grow(3 * N);
  argmax_host_.grow(N);
  losses_host_.grow(N);
}

template <typename X>
void CudaScorer<X>::check(const int32_t* tokens, const int32_t* targets, int B, int T) const {
  if (B < 1 || B > max_batch_ || T < 1 || T > max_length())
    input_error("score: a batch of {} x {} tokens; at most {} x {}", B, T, max_batch_, max_length());
  const int V = int(config().vocab_size);
  for (size_t i = 0; i < size_t(B) * T; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V)
      input_error("score: token {} outside the vocabulary of {}", tokens[i], V);
    if (targets[i] < -1 || targets[i] >= V)
      input_error("score: target {} outside the vocabulary of {}", targets[i], V);
  }
}

template <typename X>
void CudaScorer<X>::score(const int32_t* tokens, const int32_t* targets, int B, int T, TokenScore* out) {
  check(tokens, targets, B, T);
  const int N = B * T;
  const auto& d = net_.dims();
  const cudaStream_t s = net_.stream();

  // Staged: tokens [N], then the M scored rows' numbers and their targets.
  const int M = int(std::count_if(targets, targets + N, [](int32_t t) { return t != -1; }));
  if (M == 0) return;
  int32_t* host = staging_.get();
  std::memcpy(host, tokens, size_t(N) * sizeof(int32_t));
  int32_t *scored = host + N, *scored_targets = scored + M;
  for (int i = 0, k = 0; i < N; ++i) {
    if (targets[i] == -1) continue;
    scored[k] = i;
    scored_targets[k++] = targets[i];
  }
  MEG_CUDA_CHECK(cudaMemcpyAsync(ints_.get(), host, (size_t(N) + 2 * size_t(M)) * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, s));
  const int32_t *d_tokens = ints_.get(), *d_scored = d_tokens + N, *d_targets = d_scored + M;

  X* x = x_.get();
  cuda::embedding_forward(x, d_tokens, net_.wte(), net_.wpe(), B, T, d.C, 0, d.Vp, s);
  net_.blocks(x, N, [&](size_t, X* qkv, X* att) {
    if (net_.rope_table()) cuda::rope_forward(qkv, net_.rope_table(), B, T, d.NH, d.NKV, d.HS, s);
    cuda::attention_forward(att, lse_.get(), qkv, B, T, d.NH, d.NKV, d.HS, s, 0, 0, net_.config().attention_window());
  });
  for (int r0 = 0; r0 < M; r0 += chunk_rows_) {
    const int R = std::min(chunk_rows_, M - r0);
    // The chunk's rows of x, gathered (a lookup of x's rows by row number).
    cuda::embedding_forward<X>(rows_.get(), d_scored + r0, x, nullptr, 1, R, d.C, 0, N, s);
    net_.logits(logits_.get(), rows_.get(), R);
    cuda::cross_entropy_fused(logits_.get(), losses_.get() + r0, d_targets + r0, R, d.V, d.Vp, 0.0f, s);
    cuda::argmax_rows(argmax_.get() + r0, logits_.get(), R, d.V, d.Vp, s);
  }
  MEG_CUDA_CHECK(cudaMemcpyAsync(losses_host_.get(), losses_.get(), size_t(M) * sizeof(float),
                                 cudaMemcpyDeviceToHost, s));
  MEG_CUDA_CHECK(cudaMemcpyAsync(argmax_host_.get(), argmax_.get(), size_t(M) * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, s));
  MEG_CUDA_CHECK(cudaStreamSynchronize(s));
  for (int k = 0; k < M; ++k) {
    const int i = scored[k];
    out[i].logprob = -double(losses_host_.get()[k]);
    out[i].greedy = argmax_host_.get()[k] == targets[i];
  }
}

}  // namespace

std::unique_ptr<Scorer> make_cuda_scorer(const CheckpointModel& checkpoint, Precision precision, int max_batch) {
  switch (precision) {
    case Precision::fp32: return std::make_unique<CudaScorer<float>>(checkpoint, max_batch);
    case Precision::bf16: return std::make_unique<CudaScorer<__nv_bfloat16>>(checkpoint, max_batch);
    case Precision::fp16: return std::make_unique<CudaScorer<__half>>(checkpoint, max_batch);
  }
  throw std::invalid_argument("make_cuda_scorer: unknown precision");
}

}  // namespace meg
