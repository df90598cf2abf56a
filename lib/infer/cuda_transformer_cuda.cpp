#include "infer/cuda_transformer.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>
#include <type_traits>

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
  if (config_.layer_pattern() != default_layer_pattern(config_.num_layers))
    input_error("model config: hybrid-layer-pattern \"{}\": the CUDA transformer runs \"*-\" blocks only",
                config_.layer_pattern());
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
    const auto table = cuda::rope_table(positions, dims_.HS, config_.rope_theta);
    rope_table_ = cuda::DeviceArray<float>(alloc_, table.size());
    MEG_CUDA_CHECK(cudaMemcpyAsync(rope_table_.get(), table.data(), table.size() * sizeof(float),
                                   cudaMemcpyHostToDevice, s));
  }
  const size_t N = size_t(max_rows);
  ln_ = cuda::DeviceArray<X>(alloc_, N * dims_.C);
  qkv_ = cuda::DeviceArray<X>(alloc_, N * dims_.QKV);
  atty_ = cuda::DeviceArray<X>(alloc_, N * dims_.CQ);
  branch_ = cuda::DeviceArray<X>(alloc_, N * dims_.C);
  fc1_ = cuda::DeviceArray<X>(alloc_, N * dims_.FC);
  act_ = cuda::DeviceArray<X>(alloc_, N * dims_.Fh);
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
    cuda::layernorm_forward(out, nullptr, nullptr, inp, px(w), px(b), N, dims_.C, eps, stream());
  else
    cuda::rmsnorm_forward(out, nullptr, inp, px(w), N, dims_.C, eps, stream());
}

template <typename X>
void CudaTransformer<X>::add_norm(X* out, X* x, const X* part, size_t w, size_t b, int N) {
  const float eps = float(config_.norm_eps);
  if (config_.norm == NormKind::layernorm)
    cuda::add_layernorm_forward(out, x, part, px(w), px(b), N, dims_.C, eps, stream());
  else
    cuda::add_rmsnorm_forward(out, x, part, px(w), N, dims_.C, eps, stream());
}

template <typename X>
void CudaTransformer<X>::blocks(X* x, int N, const Attention& attention, const KvCache* cache) {
  if (N > max_rows_) throw std::invalid_argument("CudaTransformer: more rows than allocated");
  const auto [C, NH, NKV, HS, CQ, QKV, Fh, FC, V, Vp, V0] = dims_;
  const auto activation =
      config_.activation == Activation::swiglu ? cuda::SmallLinearEpilogue::swiglu : cuda::SmallLinearEpilogue::gelu;
  // Whether branch_ holds a part residual_linear() left for the next norm to add into x: only
  // where that norm is a launch of its own (too many rows for small_linear, or small_linear off).
  const bool unfused = !small_linear_ || N > cuda::kSmallLinearMaxRows;
  bool pending = false;
  using enum TensorRole;
  const size_t L = size_t(config_.num_layers);
  for (size_t l = 0; l < L; ++l) {
    const LayerTensors& attn = offsets_.layer(int64_t(2 * l));
    const LayerTensors& mlp = offsets_.layer(int64_t(2 * l + 1));
    // Attention: x = x + proj(attention(qkv(norm1(x)))), the keys and values cached first.
    if (cache) {
      const auto [k, v] = cache->arrays(l);
      const cuda::SmallLinearKvAppend<X> append{k,  v,  cache->slots, cache->positions, rope_table(),
                                                NH, NKV, HS, cache->max_length};
      norm_linear(qkv_.get(), x, attn[norm_weight], attn[norm_bias], attn[qkv_weight], attn[qkv_bias], N, QKV,
                  cuda::SmallLinearEpilogue::kv_append, &append, pending ? x : nullptr);
    } else {
      norm_linear(qkv_.get(), x, attn[norm_weight], attn[norm_bias], attn[qkv_weight], attn[qkv_bias], N, QKV,
                  cuda::SmallLinearEpilogue::store, nullptr, pending ? x : nullptr);
    }
    attention(l, qkv_.get(), atty_.get());
    pending = residual_linear(x, atty_.get(), attn[proj_weight], attn[proj_bias], N, CQ, unfused);
    // MLP: x = x + fc2(act(fc1(norm2(x)))).
    norm_linear(act_.get(), x, mlp[norm_weight], mlp[norm_bias], mlp[fc1_weight], mlp[fc1_bias], N, FC, activation,
                nullptr, pending ? x : nullptr);
    pending = residual_linear(x, act_.get(), mlp[fc2_weight], mlp[fc2_bias], N, Fh, unfused && l + 1 < L);
  }
}

// A few rows take one small_linear launch; more take the norm kernel (which adds a pending part of
// the residual stream first), the cuBLASLt product and the activation's kernel (GELU in cuBLASLt's
// epilogue where it has one).
template <typename X>
bool CudaTransformer<X>::norm_linear(X* out, const X* x, size_t norm_w, size_t norm_b, size_t w, size_t b, int N,
                                     int OC, cuda::SmallLinearEpilogue epilogue,
                                     const cuda::SmallLinearKvAppend<X>* kv_append, X* residual,
                                     const cuda::SmallLinearArgmax* argmax) {
  using E = cuda::SmallLinearEpilogue;
  const int C = dims_.C;
  const cuda::SmallLinearNorm<X> n{px(norm_w), px(norm_b), float(config_.norm_eps), config_.norm == NormKind::rmsnorm};
  if (!residual && small_linear_ &&
      cuda::small_linear(out, x, px(w), px(b), N, C, OC, n, epilogue, stream(), kv_append, argmax))
    return true;
  if (residual) add_norm(ln_.get(), residual, branch_.get(), norm_w, norm_b, N);
  else norm(ln_.get(), x, norm_w, norm_b, N);
  if (epilogue == E::store || epilogue == E::kv_append || epilogue == E::argmax) {
    gemm_.linear_forward(out, ln_.get(), px(w), px(b), N, C, OC);
    if (kv_append)
      cuda::kv_cache_append(out, kv_append->k_cache, kv_append->v_cache, kv_append->slots, kv_append->positions,
                            kv_append->rope_table, N, kv_append->NH, kv_append->NKV, kv_append->HS,
                            kv_append->max_length, stream());
  } else if (epilogue == E::swiglu) {
    gemm_.linear_forward(fc1_.get(), ln_.get(), px(w), px(b), N, C, OC);
    cuda::swiglu_forward(out, fc1_.get(), N, OC / 2, stream());
  } else if (!gemm_.linear_gelu_forward(out, fc1_.get(), ln_.get(), px(w), px(b), N, C, OC)) {
    gemm_.linear_forward(fc1_.get(), ln_.get(), px(w), px(b), N, C, OC);
    cuda::gelu_forward(out, fc1_.get(), size_t(N) * OC, stream());
  }
  return false;
}

// With tensor parallelism the product is a part of the sum, and the residual add waits for the
// sum over the group (the peer sum's kernel adds it); without, a few rows add it in small_linear's
// epilogue. Otherwise the add is its own launch, or with DEFER_ADD the next norm's.
template <typename X>
bool CudaTransformer<X>::residual_linear(X* x, const X* inp, size_t w, size_t b, int N, int in, bool defer_add) {
  using E = cuda::SmallLinearEpilogue;
  if (!tp_ && small_linear_ && cuda::small_linear(x, inp, px(w), px(b), N, in, dims_.C, {}, E::residual, stream()))
    return false;
  // Each member's input columns times its weight columns is a part of the output; rank 0's part
  // carries the (replicated) bias, so that the sum adds it once.
  const X* bias = !tp_ || tp_->rank() == 0 ? px(b) : nullptr;
  X* part = branch_.get();
  const size_t n = size_t(N) * dims_.C;
  if (!(tp_ && small_linear_ && cuda::small_linear(part, inp, px(w), bias, N, in, dims_.C, {}, E::store, stream())))
    gemm_.linear_forward(part, inp, px(w), bias, N, in, dims_.C);
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
  const bool one_launch = norm_linear(out, x, offsets_.at(kNoLayer, TensorRole::final_norm_weight),
                                     offsets_.at(kNoLayer, TensorRole::final_norm_bias), offsets_.output_weight(),
                                     kAbsentTensor, N, dims_.Vp, argmax ? E::argmax : E::store, nullptr, nullptr, argmax);
  return argmax && one_launch;
}

template class CudaTransformer<float>;
template class CudaTransformer<__nv_bfloat16>;
template class CudaTransformer<__half>;

}  // namespace meg
