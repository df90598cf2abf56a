#include "infer/cuda_transformer.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "core/error.hpp"
#include "model/layer_spec.hpp"
#include "model/tensor_parallel.hpp"
#include "model/tensor_parallel_shard.hpp"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"
#include "parallel/nccl_comm.hpp"
#include "parallel/peer_sums.hpp"

namespace meg {

template <typename T>
PinnedArray<T>::~PinnedArray() {
  cudaFreeHost(p_);
}

template <typename T>
void PinnedArray<T>::grow(size_t n) {
  if (n <= n_) return;
  MEG_CUDA_CHECK(cudaFreeHost(p_));
  p_ = nullptr;
  n_ = 0;
  MEG_CUDA_CHECK(cudaMallocHost(&p_, n * sizeof(T)));
  n_ = n;
}

template class PinnedArray<int32_t>;
template class PinnedArray<float>;
template class PinnedArray<cuda::RowDraw>;

namespace {

// The members of the tensor-parallel group TP (null: one, the whole model).
int size_of(const NcclComm* tp) { return tp ? tp->size() : 1; }

template <typename X>
typename CudaTransformer<X>::Dims dims_of(const ModelConfig& c, const NcclComm* group) {
  const int tp = size_of(group);
  typename CudaTransformer<X>::Dims d;
  d.C = int(c.hidden_size);
  d.NH = int(c.num_heads) / tp;
  d.NKV = int(c.num_kv_heads) / tp;
  d.HS = int(c.head_size());
  d.CQ = d.NH * d.HS;
  d.QKV = d.CQ + 2 * d.NKV * d.HS;
  d.Fh = int(c.ffn_hidden_size) / tp;
  d.FC = (c.activation == Activation::swiglu ? 2 : 1) * d.Fh;
  d.V = int(c.vocab_size);
  d.Vp = int(c.padded_vocab_size) / tp;
  d.V0 = group ? d.Vp * group->rank() : 0;
  return d;
}

}  // namespace

template <typename X>
CudaTransformer<X>::CudaTransformer(const ModelConfig& config, const std::vector<float>& params, int max_rows,
                                    int positions, NcclComm* tp)
    : tp_(tp != nullptr && tp->size() > 1 ? tp : nullptr),
      config_(tensor_parallel_config(config, params.size(), size_of(tp_))),
      dims_(dims_of<X>(config_, tp_)),
      max_rows_(max_rows),
      gemm_(stream_.get()) {
  specs_ = config_.layers();
  layers_ = make_cuda_layers<X>(config_, size_of(tp_), 0, int64_t(specs_.size()));
  for (const LayerSpec& l : specs_) {
    attention_layer_.push_back(attention_layers_);
    attention_layers_ += l.kind == LayerKind::attention;
  }
  offsets_ = TensorIndex(config_, gpt_parameter_table(config_, size_of(tp_)));
  const cudaStream_t s = stream_.get();
  std::vector<float> shard;
  const bool whole = holds_whole_model(config, params.size());
  if (tp_ && whole) shard = tensor_parallel_shard(config, params, config_, tp_->size(), tp_->rank());
  const std::vector<float>& local = tp_ && whole ? shard : params;

  // The weights, through a bounded fp32 staging array when X is narrower: loading never holds a
  // whole fp32 copy on the device.
  const size_t n = local.size();
  weights_ = cuda::DeviceArray<X>(alloc_, n);
  if constexpr (std::is_same_v<X, float>) {
    MEG_CUDA_CHECK(cudaMemcpyAsync(weights_.get(), local.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
  } else {
    constexpr size_t kChunk = size_t(16) << 20;
    cuda::DeviceArray<float> staging(alloc_, std::min(kChunk, n));
    for (size_t at = 0; at < n; at += kChunk) {
      const size_t m = std::min(kChunk, n - at);
      MEG_CUDA_CHECK(cudaMemcpyAsync(staging.get(), local.data() + at, m * sizeof(float), cudaMemcpyHostToDevice, s));
      cuda::cast_from_float(weights_.get() + at, staging.get(), m, s);
    }
    MEG_CUDA_CHECK(cudaStreamSynchronize(s));  // before the staging array goes back to the cache
  }
  if (config_.uses_rope()) {
    const auto table = cuda::rope_table(positions, config_.rope_inv_freq());
    rope_table_ = cuda::DeviceArray<float>(alloc_, table.size());
    MEG_CUDA_CHECK(cudaMemcpyAsync(rope_table_.get(), table.data(), table.size() * sizeof(float),
                                   cudaMemcpyHostToDevice, s));
  }
  const size_t N = size_t(max_rows);
  ln_ = cuda::DeviceArray<X>(alloc_, N * dims_.C);
  branch_ = cuda::DeviceArray<X>(alloc_, N * dims_.C);
  // One set of activations, as large as the largest layer's, from whose start each layer carves
  // its arrays.
  const CudaRows rows{max_rows, 0, 0, max_rows};
  std::vector<std::vector<CudaActArray>> arrays;
  size_t bytes = 0;
  for (const auto& layer : layers_) {
    arrays.push_back(layer->activations(rows));
    CudaCarver c(nullptr);
    for (const CudaActArray& a : arrays.back()) c.take<char>(a.bytes);
    bytes = std::max(bytes, c.used());
  }
  acts_ = cuda::DeviceArray<char>(alloc_, bytes);
  for (const auto& layer_arrays : arrays) {
    CudaCarver c(acts_.get());
    layer_acts_.emplace_back();
    for (const CudaActArray& a : layer_arrays) layer_acts_.back().push_back(c.take<char>(a.bytes));
  }
  MEG_CUDA_CHECK(cudaStreamSynchronize(s));  // the host's params and table may go once we return
}

template <typename X>
CudaTransformer<X>::~CudaTransformer() {
  cudaStreamSynchronize(stream_.get());
}

template <typename X>
void CudaTransformer<X>::norm(X* out, const X* inp, size_t w, size_t b, int N) {
  const float eps = float(config_.norm_eps);
  if (config_.norm == NormKind::layernorm)
    cuda::layernorm_forward(out, nullptr, nullptr, inp, p(w), p(b), N, dims_.C, eps, stream());
  else
    cuda::rmsnorm_forward(out, nullptr, inp, p(w), N, dims_.C, eps, stream());
}

template <typename X>
void CudaTransformer<X>::add_norm(X* out, X* x, const X* part, size_t w, size_t b, int N) {
  const float eps = float(config_.norm_eps);
  if (config_.norm == NormKind::layernorm)
    cuda::add_layernorm_forward(out, x, part, p(w), p(b), N, dims_.C, eps, stream());
  else
    cuda::add_rmsnorm_forward(out, x, part, p(w), N, dims_.C, eps, stream());
}

template <typename X>
void CudaTransformer<X>::blocks(X* x, int N, const Attention& attention, const KvCache* cache) {
  if (N > max_rows_) throw std::invalid_argument("CudaTransformer: more rows than allocated");
  // Whether a branch may leave its part in branch_ for the next norm to add into x: only where
  // that norm is a launch of its own (too many rows for small_linear, or small_linear off).
  defer_adds_ = !small_linear_ || N > cuda::kSmallLinearMaxRows;
  pending_ = nullptr;
  core_.attention = &attention;
  cache_ = cache;
  const CudaRows rows{N, 0, 0, N};
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerPlace at{offsets_.layer(int64_t(l)), int64_t(l), specs_[l].block};
    layers_[l]->forward(*this, at, rows, layer_acts_[l], x, x);
  }
  core_.attention = nullptr;
  cache_ = nullptr;
}

template <typename X>
CudaAttentionCore<X>& CudaTransformer<X>::attention_core(const LayerPlace& at) {
  core_.layer = attention_layer_[size_t(at.layer)];
  core_.cached = cache_ != nullptr;
  if (cache_) {
    const auto [k, v] = cache_->arrays(core_.layer);
    core_.append = {k, v, cache_->slots, cache_->positions, rope_table(), dims_.NH, dims_.NKV, dims_.HS,
                    cache_->max_length};
  }
  return core_;
}

template <typename X>
void CudaTransformer<X>::norm_linear(const CudaNormLinear<X>& op) {
  X* residual = std::exchange(pending_, nullptr);
  if (residual && residual != op.x) throw std::logic_error("CudaTransformer: a pending add to another stream");
  fused_norm_linear(op, residual);
}

template <typename X>
void CudaTransformer<X>::residual_linear(const LayerPlace& at, const X* inp, size_t w, size_t b, int N, int in,
                                         uint64_t, const X* x, X* out) {
  if (out != x) throw std::logic_error("CudaTransformer: a residual add out of place");
  // The last layer's add is never left pending: the stream is the caller's after it.
  if (residual_add(out, inp, w, b, N, in, defer_adds_ && size_t(at.layer) + 1 < layers_.size())) pending_ = out;
}

// A few rows take one small_linear launch; more take the norm kernel (which adds a pending part of
// the residual stream first), the cuBLASLt product and the activation's kernel (GELU in cuBLASLt's
// epilogue where it has one).
template <typename X>
bool CudaTransformer<X>::fused_norm_linear(const CudaNormLinear<X>& op, X* residual,
                                           const cuda::SmallLinearArgmax* argmax) {
  const cuda::SmallLinearNorm<X> n{p(op.norm_w), p(op.norm_b), float(config_.norm_eps),
                                   config_.norm == NormKind::rmsnorm};
  if (!residual && small_linear_ &&
      cuda::small_linear(op.out, op.x, p(op.w), p(op.b), op.N, op.C, op.OC, n, op.epilogue, stream(), op.kv_append,
                         argmax))
    return true;
  if (residual) add_norm(op.ln, residual, branch_.get(), op.norm_w, op.norm_b, op.N);
  else norm(op.ln, op.x, op.norm_w, op.norm_b, op.N);
  linear_epilogue_forward<X>(*this, op);
  return false;
}

// With tensor parallelism the product is a part of the sum, and the residual add waits for the
// sum over the group (the peer sum's kernel adds it); without, a few rows add it in small_linear's
// epilogue. Otherwise the add is its own launch, or with DEFER_ADD the next norm's.
template <typename X>
bool CudaTransformer<X>::residual_add(X* x, const X* inp, size_t w, size_t b, int N, int in, bool defer_add) {
  using E = cuda::SmallLinearEpilogue;
  if (!tp_ && small_linear_ && cuda::small_linear(x, inp, p(w), p(b), N, in, dims_.C, {}, E::residual, stream()))
    return false;
  // Each member's input columns times its weight columns is a part of the output; rank 0's part
  // carries the (replicated) bias, so that the sum adds it once.
  const X* bias = !tp_ || tp_->rank() == 0 ? p(b) : nullptr;
  X* part = branch_.get();
  const size_t n = size_t(N) * dims_.C;
  if (!(tp_ && small_linear_ && cuda::small_linear(part, inp, p(w), bias, N, in, dims_.C, {}, E::store, stream())))
    gemm_.linear_forward(part, inp, p(w), bias, N, in, dims_.C);
  if (tp_) {
    if (peer_sums_ && peer_sums_->add_sum(x, part, n, stream())) return false;
    tp_->all_reduce_sum(part, n, stream());
  }
  if (defer_add) return true;
  cuda::add(x, x, part, n, stream());
  return false;
}

template <typename X>
bool CudaTransformer<X>::logits(X* out, const X* x, int N, const cuda::SmallLinearArgmax* argmax) {
  if (N > max_rows_) throw std::invalid_argument("CudaTransformer: more rows than allocated");
  if (argmax && tp_) throw std::invalid_argument("CudaTransformer: an argmax of a vocabulary shard");
  using E = cuda::SmallLinearEpilogue;
  const CudaNormLinear<X> op{.out = out,
                             .ln = ln_.get(),
                             .x = x,
                             .norm_w = offsets_.at(kNoLayer, TensorRole::final_norm_weight),
                             .norm_b = offsets_.at(kNoLayer, TensorRole::final_norm_bias),
                             .w = offsets_.output_weight(),
                             .N = N,
                             .C = dims_.C,
                             .OC = dims_.Vp,
                             .epilogue = argmax ? E::argmax : E::store};
  const bool one_launch = fused_norm_linear(op, nullptr, argmax);
  return argmax && one_launch;
}

template class CudaTransformer<float>;
template class CudaTransformer<__nv_bfloat16>;
template class CudaTransformer<__half>;

}  // namespace meg
