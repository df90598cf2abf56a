// GptCudaModel: the decoder-only language model on the GPU (see gpt_cuda.hpp and gpt.hpp).
#include "model/gpt_cuda.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/error.hpp"
#include "model/layer_spec.hpp"
#include "model/tensor_parallel.hpp"
#include "ops/cpu/ops.hpp"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg {

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::none;
  if (name == "selective") return Recompute::selective;
  if (name == "full") return Recompute::full;
  input_error("--recompute '{}': expected none, selective or full", name);
}

// Activations and backward buffers of one (B, T), carved out of one device allocation.
template <typename X>
struct GptCudaModel<X>::Acts {
  int B = 0, T = 0;
  cuda::DeviceArray<char> store;
  X* embedded = nullptr;  // the input of layer 0: the embedding's output, or the previous stage's
  int groups = 0;         // distinct tokens of the batch (the embedding backward's groups)
  // The dropout of the forward, for its backward.
  double hidden_p = 0, attn_p = 0;
  uint64_t drop_seed = 0, drop_step = 0, drop_micro = 0;
  // By layer: its activation arrays (CudaLayer::activations, aliased under recomputation) and its
  // output, the next layer's input (R x C).
  std::vector<std::vector<void*>> layer_acts;
  std::vector<X*> outs;
  X *lnf = nullptr, *logits = nullptr;
  float *lnf_mean = nullptr, *lnf_rstd = nullptr, *losses = nullptr;
  // Vocabulary-parallel cross-entropy: this rank's row partials, and all ranks' gathered.
  float *partial = nullptr, *partials = nullptr;
  // Backward: the stream's gradient, the output layer's input gradient, the layers' scratch (each
  // layer's in turn), a branch's gradient or partial output, the reductions' scratch.
  X *dres = nullptr, *dln = nullptr, *branch = nullptr;
  void* layer_scratch = nullptr;
  float* scratch = nullptr;
  // Device copies of the batch: tokens, targets, and the token groups of the embedding backward.
  int32_t *tokens = nullptr, *targets = nullptr, *unique = nullptr, *starts = nullptr, *positions = nullptr;
};

// Pinned host staging for the batch's integers: a pool of buffers, each with an event that says
// when the device has finished copying out of it, so the host never overwrites one a copy still
// reads. The host never waits for that event: under a pipeline schedule the stream may be held by
// a receive whose sender's host is itself waiting on us, so a busy pool grows instead (to the
// uploads in flight, reached in the first step) and buffers are never freed while the model runs.
// Loss rows come back through pinned memory too.
template <typename X>
struct GptCudaModel<X>::Staging {
  struct Slot {
    int32_t* host = nullptr;
    size_t capacity = 0;
    cudaEvent_t done = nullptr;
  };
  std::vector<Slot> slots;
  std::vector<cuda::DeviceArray<float>> losses;  // one per pending micro-batch
  float* host_losses = nullptr;
  size_t host_losses_capacity = 0;

  ~Staging() {
    for (auto& s : slots) {
      cudaEventDestroy(s.done);
      cudaFreeHost(s.host);
    }
    if (host_losses) cudaFreeHost(host_losses);
  }
  // A buffer of at least N integers that no copy reads; record its event after queueing the copies.
  Slot& acquire(size_t n) {
    for (auto& s : slots)
      if (s.capacity >= n && cudaEventQuery(s.done) == cudaSuccess) return s;
    Slot s;
    s.capacity = std::max<size_t>(n, 4096);
    MEG_CUDA_CHECK(cudaMallocHost(&s.host, s.capacity * sizeof(int32_t)));
    MEG_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    slots.push_back(s);
    return slots.back();
  }
  float* host_loss_buffer(size_t n) {
    if (host_losses_capacity < n) {
      if (host_losses) MEG_CUDA_CHECK(cudaFreeHost(host_losses));
      MEG_CUDA_CHECK(cudaMallocHost(&host_losses, n * sizeof(float)));
      host_losses_capacity = n;
    }
    return host_losses;
  }
};

template <typename X>
GptCudaModel<X>::GptCudaModel(const ModelConfig& config, cuda::DeviceAllocator& alloc, cudaStream_t stream,
                              NcclComm* tp, PipelineStage stage, bool sequence_parallel,
                              Storage storage)
    : config_(config),
      tp_(tp && tp->size() > 1 ? tp : nullptr),
      stage_(stage),
      sp_(sequence_parallel && tp_),
      alloc_(alloc),
      stream_(stream),
      gemm_(stream) {
  config_.validate();
  if (tp_) check_tensor_parallel(config_, tp_->size());
  check_pipeline_parallel(config_, stage_.stages);
  tensors_ = stage_table(config_, stage_, tp_ ? gpt_parameter_table(config_, tp_->size()) : gpt_parameter_table(config_));
  num_params_ = tensors_.empty() ? 0 : tensors_.back().offset + tensors_.back().numel;

  const TensorIndex index(config_, tensors_);
  wte_ = index.at(kNoLayer, TensorRole::word_embeddings);
  wpe_ = index.at(kNoLayer, TensorRole::position_embeddings);
  lnf_w_ = index.at(kNoLayer, TensorRole::final_norm_weight);
  lnf_b_ = index.at(kNoLayer, TensorRole::final_norm_bias);
  out_w_ = index.output_weight();
  const auto [first_layer, end_layer] = stage_layers(config_, stage_);
  first_layer_ = first_layer;
  layers_ = make_cuda_layers<X>(config_, tp_size(), first_layer, end_layer);
  const std::vector<LayerSpec> specs = config_.layers();
  specs_.assign(specs.begin() + first_layer, specs.begin() + end_layer);
  for (size_t l = 0; l < specs_.size(); ++l) {
    layer_tensors_.push_back(index.layer(first_layer + int64_t(l)));
    size_t first = 0;
    while (specs_[first].kind != specs_[l].kind) ++first;
    first_of_kind_.push_back(first);
    ends_block_.push_back(l + 1 == specs_.size() || specs_[l + 1].block != specs_[l].block);
  }

  if (storage.params_x) {
    params_x_ = storage.params_x;
    grads_ = storage.grads;
  } else {
    own_params_x_ = cuda::DeviceArray<X>(alloc_, num_params_);
    own_grads_ = cuda::DeviceArray<float>(alloc_, num_params_);
    params_x_ = own_params_x_.get();
    grads_ = own_grads_.get();
  }
  MEG_CUDA_CHECK(cudaMemsetAsync(params_x_, 0, num_params_ * sizeof(X), stream_));
  zero_grad();
  if (config_.qk_layernorm) head_norm_grad_ = cuda::DeviceArray<float>(alloc_, size_t(config_.head_size()));
  if (config_.uses_rope()) {
    const auto table = cuda::rope_table(static_cast<int>(config_.seq_length), config_.rope_inv_freq());
    rope_table_ = cuda::DeviceArray<float>(alloc_, table.size());
    MEG_CUDA_CHECK(cudaMemcpy(rope_table_.get(), table.data(), table.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  use_slot(0);
  staging_ = std::make_unique<Staging>();
}

template <typename X>
GptCudaModel<X>::~GptCudaModel() {
  cudaStreamSynchronize(stream_);  // nothing queued may outlive the buffers
}

template <typename X>
const X* GptCudaModel<X>::p(size_t offset) const {
  return offset == kAbsentTensor ? nullptr : params_x_ + offset;
}

template <typename X>
float* GptCudaModel<X>::g(size_t offset) const {
  return offset == kAbsentTensor ? nullptr : grads_ + offset;
}

template <typename X>
void GptCudaModel<X>::set_params(const float* host) {
  if constexpr (std::is_same_v<X, float>) {
    MEG_CUDA_CHECK(cudaMemcpyAsync(params_x_, host, num_params_ * sizeof(float), cudaMemcpyHostToDevice, stream_));
  } else {
    // Through a bounded fp32 staging array, so that loading never needs a whole fp32 copy on the
    // device (with the distributed optimizer nobody keeps one).
    constexpr size_t kChunk = size_t(16) << 20;
    cuda::DeviceArray<float> staging(alloc_, std::min(kChunk, std::max<size_t>(num_params_, 1)));
    for (size_t at = 0; at < num_params_; at += kChunk) {
      const size_t n = std::min(kChunk, num_params_ - at);
      MEG_CUDA_CHECK(cudaMemcpyAsync(staging.get(), host + at, n * sizeof(float), cudaMemcpyHostToDevice, stream_));
      cuda::cast_from_float(params_x_ + at, staging.get(), n, stream_);
    }
  }
  MEG_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

template <typename X>
void GptCudaModel<X>::get_grads(float* host) const {
  MEG_CUDA_CHECK(cudaMemcpyAsync(host, grads_, num_params_ * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  MEG_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

template <typename X>
void GptCudaModel<X>::zero_grad() {
  MEG_CUDA_CHECK(cudaMemsetAsync(grads_, 0, num_params_ * sizeof(float), stream_));
}

template <typename X>
void GptCudaModel<X>::set_recompute(Recompute mode) {
  if (mode == recompute_) return;
  recompute_ = mode;
  for (auto& slot : slots_) slot->B = slot->T = 0;  // carve again at the next forward
}

template <typename X>
void GptCudaModel<X>::allocate_activations(int B, int T) {
  Acts& a = *acts_;
  if (a.B == B && a.T == T) return;
  const Dims d = dims(B, T);
  const size_t N = size_t(d.N), C = size_t(d.C), Vp = size_t(d.Vp), L = layers_.size();
  const size_t R = rows(d.N);  // the residual stream's rows on this rank
  const CudaRows lr = layer_rows(B, T);
  // One backward scratch and one reduction scratch serve every layer in turn (and the final norm).
  size_t layer_scratch = 0;
  size_t scratch = std::max(cuda::layernorm_backward_scratch(d.N, d.C), cuda::rmsnorm_backward_scratch(d.N, d.C));
  std::vector<std::vector<CudaActArray>> arrays;
  for (const auto& layer : layers_) {
    layer_scratch = std::max(layer_scratch, layer->scratch_bytes(lr));
    scratch = std::max(scratch, layer->reduction_floats(lr));
    arrays.push_back(layer->activations(lr));
  }

  // With recomputation, what a layer recomputes lives in arrays shared by all layers of its kind
  // (taken by the stage's first, aliased by the others): under selective recomputation the
  // recomputed arrays, under full all, and the outputs of layers that do not end a block.
  auto shared = [&](size_t l, bool recomputed) {
    return first_of_kind_[l] != l &&
           (recompute_ == Recompute::full || (recompute_ == Recompute::selective && recomputed));
  };
  auto carve = [&](char* base) {
    CudaCarver c(base);
    a.layer_acts.assign(L, {});
    a.outs.assign(L, nullptr);
    a.embedded = c.take<X>(R * C);
    for (size_t l = 0; l < L; ++l) {
      const size_t first = first_of_kind_[l];
      for (size_t i = 0; i < arrays[l].size(); ++i)
        a.layer_acts[l].push_back(shared(l, arrays[l][i].recomputed) ? a.layer_acts[first][i]
                                                                     : c.take<char>(arrays[l][i].bytes));
      a.outs[l] = shared(l, false) && !ends_block_[l] ? a.outs[first] : c.take<X>(R * C);
    }
    if (stage_.last()) {
      a.lnf = c.take<X>(N * C);
      a.lnf_mean = c.take<float>(R);
      a.lnf_rstd = c.take<float>(R);
      a.logits = c.take<X>(N * Vp);
    }
    a.dres = c.take<X>(R * C);
    a.dln = c.take<X>(N * C);
    a.layer_scratch = c.take<char>(layer_scratch);
    a.branch = c.take<X>(N * C);
    a.scratch = c.take<float>(scratch);
    a.tokens = c.take<int32_t>(N);
    a.targets = c.take<int32_t>(N);
    a.unique = c.take<int32_t>(N);
    a.starts = c.take<int32_t>(N + 1);
    a.positions = c.take<int32_t>(N);
    if (tp_ && stage_.last()) {
      a.partial = c.take<float>(3 * N);
      a.partials = c.take<float>(3 * N * size_t(tp_->size()));
    }
    return c.used();
  };
  a.store.reset();  // give the old block back first, so a larger batch can reuse its memory
  a.store = cuda::DeviceArray<char>(alloc_, carve(nullptr));
  carve(a.store.get());
  a.B = B;
  a.T = T;
}

template <typename X>
void GptCudaModel<X>::prepare_batch(const int32_t* tokens, const int32_t* targets, int B, int T) {
  if (B <= 0 || T <= 0) input_error("model forward: batch {} x sequence {} must be positive", B, T);
  if (config_.learned_positions() && T > config_.seq_length)
    input_error("model forward: sequence length {} exceeds the {} learned positions", T, config_.seq_length);
  if (config_.uses_rope() && T > config_.seq_length)
    input_error("model forward: sequence length {} exceeds the model's {}", T, config_.seq_length);
  const int N = B * T;
  const int V = static_cast<int>(config_.vocab_size);
  for (int i = 0; i < N; ++i)
    if (tokens[i] < 0 || tokens[i] >= V)
      input_error("embedding: token {} at position {} is outside the vocabulary [0,{})", tokens[i], i, V);
  if (targets)
    for (int i = 0; i < N; ++i)
      if (targets[i] < -1 || targets[i] >= V)
        input_error("cross entropy: target {} at position {} is outside the vocabulary [0,{})", targets[i], i, V);
  allocate_activations(B, T);

  auto& slot = staging_->acquire(2 * size_t(N));
  int32_t* h = slot.host;
  std::memcpy(h, tokens, N * sizeof(int32_t));
  if (targets) std::memcpy(h + N, targets, N * sizeof(int32_t));
  else std::fill(h + N, h + 2 * N, -1);
  upload(acts_->tokens, h, N);
  upload(acts_->targets, h + N, N);
  MEG_CUDA_CHECK(cudaEventRecord(slot.done, stream_));
}

// Called after the forward is queued, so the host sorts while the device runs the forward.
template <typename X>
void GptCudaModel<X>::stage_token_groups(const int32_t* tokens, int N) {
  const Dims d = dims(N, 1);
  const cuda::TokenGroups tg = cuda::group_positions_by_token(tokens, N, d.V0, d.Vp);
  const size_t U = tg.unique.size();
  const size_t P = tg.positions.size();
  auto& slot = staging_->acquire(2 * U + 1 + P);
  int32_t* p = slot.host;
  std::memcpy(p, tg.unique.data(), U * sizeof(int32_t));
  std::memcpy(p + U, tg.starts.data(), (U + 1) * sizeof(int32_t));
  std::memcpy(p + 2 * U + 1, tg.positions.data(), P * sizeof(int32_t));
  upload(acts_->unique, p, U);
  upload(acts_->starts, p + U, U + 1);
  upload(acts_->positions, p + 2 * U + 1, P);
  MEG_CUDA_CHECK(cudaEventRecord(slot.done, stream_));
  acts_->groups = static_cast<int>(U);
}

template <typename X>
void GptCudaModel<X>::upload(int32_t* dst, const int32_t* pinned, size_t count) {
  MEG_CUDA_CHECK(cudaMemcpyAsync(dst, pinned, count * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
}

template <typename X>
void GptCudaModel<X>::norm_forward(X* out, float* mean, float* rstd, const X* inp, size_t w, size_t b, int N) {
  const int C = static_cast<int>(config_.hidden_size);
  const float eps = static_cast<float>(config_.norm_eps);
  if (config_.norm == NormKind::layernorm)
    cuda::layernorm_forward(out, mean, rstd, inp, p(w), p(b), N, C, eps, stream_);
  else
    cuda::rmsnorm_forward(out, rstd, inp, p(w), N, C, eps, stream_);
}

template <typename X>
void GptCudaModel<X>::norm_backward(X* dinp, const X* dout, const X* inp, size_t w, size_t b, const float* mean,
                                    const float* rstd, int R) {
  const int C = static_cast<int>(config_.hidden_size);
  if (config_.norm == NormKind::layernorm)
    cuda::layernorm_backward(dinp, g(w), g(b), dout, inp, p(w), mean, rstd, R, C, acts_->scratch, stream_);
  else
    cuda::rmsnorm_backward(dinp, g(w), dout, inp, p(w), rstd, R, C, acts_->scratch, stream_);
}

template <typename X>
void GptCudaModel<X>::head_norm_backward(X* dinp, const X* dout, const X* inp, size_t w, const float* rstd,
                                         int rows) {
  const int HS = static_cast<int>(config_.head_size());
  float* part = head_norm_grad_.get();
  MEG_CUDA_CHECK(cudaMemsetAsync(part, 0, size_t(HS) * sizeof(float), stream_));
  cuda::rmsnorm_backward(dinp, part, dout, inp, p(w), rstd, rows, HS, acts_->scratch, stream_);
  if (tp_) tp_->all_reduce_sum(part, size_t(HS), stream_);
  cuda::add(g(w), g(w), part, size_t(HS), stream_);
}

template <typename X>
uint64_t GptCudaModel<X>::dropout_key(uint64_t site) const {
  return cpu::dropout_stream({acts_->drop_seed, acts_->drop_step, acts_->drop_micro, site});
}

template <typename X>
void GptCudaModel<X>::dropout(X* out, const X* inp, size_t n, double p, uint64_t site, uint64_t first) {
  const uint64_t key = dropout_key(site);
  cuda::dropout_apply(out, inp, n, p, key, stream_, first);
}

template <typename X>
typename GptCudaModel<X>::Dims GptCudaModel<X>::dims(int B, int T) const {
  Dims d;
  d.N = B * T;
  d.C = static_cast<int>(config_.hidden_size);
  d.Vp = static_cast<int>(config_.padded_vocab_size) / tp_size();
  d.V0 = tp_ ? d.Vp * tp_->rank() : 0;
  d.V = std::clamp(static_cast<int>(config_.vocab_size) - d.V0, 0, d.Vp);
  d.NC = static_cast<size_t>(d.N) * static_cast<size_t>(d.C);
  return d;
}

template <typename X>
CudaRows GptCudaModel<X>::layer_rows(int B, int T) const {
  return {B * T, B, T, static_cast<int>(rows(B * T)), recompute_};
}

template <typename X>
LayerPlace GptCudaModel<X>::place(size_t l) const {
  return {layer_tensors_[l], first_layer_ + int64_t(l), specs_[l].block};
}

template <typename X>
const X* GptCudaModel<X>::layer_input(size_t l) const {
  return l > 0 ? acts_->outs[l - 1] : acts_->embedded;
}

// The forward of the whole model on the batch staged by prepare_batch; the loss (and, when DLOSS
// is not 0, its gradient in place of the logits) at the end.
template <typename X>
void GptCudaModel<X>::run_forward(int B, int T, float dloss) {
  Acts& a = *acts_;
  const auto [N, C, V, Vp, V0, NC] = dims(B, T);
  // What the backward (perhaps after other micro-batches' forwards) must drop the same way.
  a.hidden_p = training_ ? config_.hidden_dropout : 0.0;
  a.attn_p = training_ ? config_.attention_dropout : 0.0;
  a.drop_seed = drop_seed_;
  a.drop_step = drop_step_;
  a.drop_micro = drop_micro_;
  const double hp = a.hidden_p;
  const size_t RC = rows(N) * size_t(C), first = first_row(N) * size_t(C);

  if (stage_.first()) {  // otherwise a.embedded holds the previous stage's output
    const bool first_rank = !tp_ || tp_->rank() == 0;  // adds the position embedding, once
    // With sequence parallelism every rank looks up all rows and keeps its rows of the sum.
    X* lookup = sp_ ? a.branch : a.embedded;
    cuda::embedding_forward(lookup, a.tokens, p(wte_), first_rank ? p(wpe_) : nullptr, B, T, C, V0, Vp, stream_);
    if (sp_)
      tp_->reduce_scatter_sum(a.embedded, lookup, RC, stream_);
    else
      sum_over_tp(a.embedded, NC);
    if (hp > 0) dropout(a.embedded, a.embedded, RC, hp, 0, first);
  }
  const CudaRows lr = layer_rows(B, T);
  for (size_t l = 0; l < layers_.size(); ++l)
    layers_[l]->forward(*this, place(l), lr, a.layer_acts[l], layer_input(l), a.outs[l]);
  if (!stage_.last()) return;  // the output is stage_output()
  norm_rows(a.lnf, a.lnf_mean, a.lnf_rstd, layer_input(layers_.size()), lnf_w_, lnf_b_, N);
  gemm_.linear_forward(a.logits, a.lnf, p(out_w_), static_cast<const X*>(nullptr), N, C, Vp);
  loss_forward(N, dloss);
}

// The losses of the logits and, when DLOSS is not 0, their gradient in place.
template <typename X>
void GptCudaModel<X>::loss_forward(int N, float dloss) {
  Acts& a = *acts_;
  const Dims d = dims(N, 1);
  if (!tp_) {
    cuda::cross_entropy_fused(a.logits, a.losses, a.targets, N, d.V, d.Vp, dloss, stream_);
    return;
  }
  cuda::cross_entropy_partials(a.logits, a.partial, a.targets, N, d.V, d.Vp, d.V0, stream_);
  tp_->all_gather(a.partials, a.partial, 3 * size_t(N), stream_);
  cuda::cross_entropy_parallel(a.logits, a.losses, a.partials, tp_->size(), a.targets, N, d.V, d.Vp, d.V0, dloss,
                               stream_);
}

template <typename X>
void GptCudaModel<X>::sum_over_tp(X* data, size_t n) {
  if (tp_) tp_->all_reduce_sum(data, n, stream_);
}

template <typename X>
const X* GptCudaModel<X>::row_parallel_bias(size_t b) const {
  return !tp_ || tp_->rank() == 0 ? p(b) : nullptr;
}

template <typename X>
X* GptCudaModel<X>::exit_tp(X* parts, int N) {
  if (!sp_) {
    sum_over_tp(parts, size_t(N) * size_t(config_.hidden_size));
    return parts;
  }
  // In place: NCCL leaves this rank's block of the sum where its block of the parts was.
  X* local = parts + first_row(N) * size_t(config_.hidden_size);
  tp_->reduce_scatter_sum(local, parts, rows(N) * size_t(config_.hidden_size), stream_);
  return local;
}

template <typename X>
void GptCudaModel<X>::norm_rows(X* out, float* mean, float* rstd, const X* inp, size_t w, size_t b, int N) {
  if (!sp_) {
    norm_forward(out, mean, rstd, inp, w, b, N);
    return;
  }
  // This rank's rows go where the gathered array has them, and the all-gather runs in place.
  X* local = out + first_row(N) * size_t(config_.hidden_size);
  norm_forward(local, mean, rstd, inp, w, b, int(rows(N)));
  tp_->all_gather(out, local, rows(N) * size_t(config_.hidden_size), stream_);
}

template <typename X>
const X* GptCudaModel<X>::branch_grad(const X* dres, int N, uint64_t site) {
  Acts& a = *acts_;
  const size_t RC = rows(N) * size_t(config_.hidden_size), first = first_row(N) * size_t(config_.hidden_size);
  const X* d = dres;
  if (a.hidden_p > 0) {
    dropout(a.branch + first, dres, RC, a.hidden_p, site, first);
    d = a.branch + first;
  }
  if (!sp_) return d;
  tp_->all_gather(a.branch, d, RC, stream_);  // in place when d is already there
  return a.branch;
}

template <typename X>
void GptCudaModel<X>::norm_linear(const CudaNormLinear<X>& op) {
  norm_rows(op.ln, op.mean, op.rstd, op.x, op.norm_w, op.norm_b, op.N);
  linear_epilogue_forward<X>(*this, op);
}

template <typename X>
void GptCudaModel<X>::residual_linear(const LayerPlace&, const X* inp, size_t w, size_t b, int N, int in,
                                      uint64_t site, const X* x, X* out) {
  Acts& a = *acts_;
  const int C = static_cast<int>(config_.hidden_size);
  // The residual stream's rows on this rank (x, out): all N, or R with sequence parallelism.
  const size_t RC = rows(N) * size_t(C), first = first_row(N) * size_t(C);
  gemm_.linear_forward(a.branch, inp, p(w), row_parallel_bias(b), N, in, C);
  X* branch = exit_tp(a.branch, N);
  if (a.hidden_p > 0) dropout(branch, branch, RC, a.hidden_p, site, first);
  cuda::add(out, x, branch, RC, stream_);
}

template <typename X>
CudaCausalAttention<X>& GptCudaModel<X>::causal_attention_of(int64_t block) {
  const Acts& a = *acts_;
  core_.emplace(a.B, a.T, rope_table_.get(), a.attn_p, dropout_key(block_dropout_sites(block) + 1), a.scratch,
                stream_, config_.attention_window());
  return *core_;
}

// The weight and bias gradients of a linear layer (weight at offset W, bias at B or kAbsentTensor)
// from its output gradient DOUT [N,OC] and input INP [N,C].
template <typename X>
void GptCudaModel<X>::weight_backward(size_t w, size_t b, const X* dout, const X* inp, int N, int C, int OC) {
  gemm_.linear_backward_weight(g(w), dout, inp, N, C, OC);
  if (b != kAbsentTensor) cuda::bias_backward(g(b), dout, N, OC, acts_->scratch, stream_);
}

// The backward, from the logits' gradient left in place by run_forward; every parameter gradient
// accumulates into grads_.
template <typename X>
void GptCudaModel<X>::run_backward(int B, int T) {
  Acts& a = *acts_;
  const auto [N, C, V, Vp, V0, NC] = dims(B, T);
  const size_t L = layers_.size();
  const int R = static_cast<int>(rows(N));  // the residual stream's rows on this rank

  // Output layer (for tied embeddings g(out_w_) is the embedding's gradient) and final norm; on
  // the other stages a.dres holds the next stage's gradient (stage_output_grad()).
  if (stage_.last()) {
    gemm_.linear_backward_input(a.dln, a.logits, p(out_w_), N, C, Vp);
    const X* dl = exit_tp(a.dln, N);
    gemm_.linear_backward_weight(g(out_w_), a.logits, a.lnf, N, C, Vp);
    MEG_CUDA_CHECK(cudaMemsetAsync(a.dres, 0, size_t(R) * C * sizeof(X), stream_));
    norm_backward(a.dres, dl, layer_input(L), lnf_w_, lnf_b_, a.lnf_mean, a.lnf_rstd, R);
    // The final norm and the untied output layer are done. A tied output layer's gradient is the
    // word embedding's (or, on a later last stage, its copy's), first in the table: reported with
    // the rest at the end.
    if (grads_ready_) grads_ready_(lnf_w_);
  }

  // a.dres holds the gradient of the residual stream (this rank's rows), flowing down through the
  // layers; a branch takes it through its hidden dropout's mask, gathered to all rows. Block by
  // block, [begin, end): its layers' forwards run again (full recomputation) or recompute what
  // they did not keep (selective), in order, then their backwards in reverse.
  const CudaRows lr = layer_rows(B, T);
  for (size_t end = L; end > 0;) {
    size_t begin = end - 1;
    while (begin > 0 && specs_[begin - 1].block == specs_[end - 1].block) --begin;
    for (size_t l = begin; l < end; ++l) {
      if (recompute_ == Recompute::full)
        layers_[l]->forward(*this, place(l), lr, a.layer_acts[l], layer_input(l), a.outs[l]);
      else if (recompute_ == Recompute::selective)
        layers_[l]->recompute(*this, place(l), lr, a.layer_acts[l], layer_input(l));
    }
    for (size_t l = end; l-- > begin;)
      layers_[l]->backward(*this, place(l), lr, a.layer_acts[l], a.layer_scratch, layer_input(l), a.dres);
    // All of the block is done: the gradients from its first tensor on are final.
    size_t from = kAbsentTensor;
    for (size_t l = begin; l < end; ++l)
      for (const size_t offset : layer_tensors_[l].offsets) from = std::min(from, offset);
    if (grads_ready_ && from != kAbsentTensor) grads_ready_(from);
    end = begin;
  }
  if (stage_.first()) {  // otherwise a.dres is stage_input_grad()
    // With sequence parallelism the position embedding's gradient is rank 0's, from all rows, as
    // its forward added it: the caller's sum over the group counts it once.
    float* dwpe = !sp_ || tp_->rank() == 0 ? g(wpe_) : nullptr;
    cuda::embedding_backward(g(wte_), dwpe, branch_grad(a.dres, N, 0), a.unique, a.starts, a.positions, a.groups, B,
                             T, C, stream_);
  }
  if (grads_ready_) grads_ready_(0);
}

template <typename X>
void GptCudaModel<X>::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                                       float dloss_scale) {
  forward_stage(0, tokens, targets, B, T, dloss_scale);
  backward_stage(0);
}

template <typename X>
void GptCudaModel<X>::use_slot(int slot) {
  while (slots_.size() <= size_t(slot)) slots_.push_back(std::make_unique<Acts>());
  acts_ = slots_[size_t(slot)].get();
}

template <typename X>
void GptCudaModel<X>::forward_stage(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                                    float dloss_scale) {
  if (!targets) throw std::invalid_argument("GptCudaModel::forward_stage needs targets");
  use_slot(slot);
  prepare_batch(tokens, targets, B, T);
  const int N = B * T;
  float dloss = 0;
  if (stage_.last()) {
    int count = 0;
    for (int i = 0; i < N; ++i) count += targets[i] != -1;
    // Each micro-batch writes its losses to its own buffer, read back together by take_loss().
    auto& pending = staging_->losses;
    const size_t k = static_cast<size_t>(losses_pending_);
    if (pending.size() <= k || pending[k].size() < size_t(N)) {
      if (pending.size() <= k) pending.resize(k + 1);
      pending[k] = cuda::DeviceArray<float>(alloc_, size_t(N));
    }
    acts_->losses = pending[k].get();
    dloss = count > 0 ? dloss_scale / static_cast<float>(count) : 0.0f;
    pending_counts_.push_back(count);
    ++losses_pending_;
  }
  run_forward(B, T, dloss);
  if (stage_.first()) stage_token_groups(tokens, N);
}

template <typename X>
void GptCudaModel<X>::backward_stage(int slot) {
  use_slot(slot);
  run_backward(acts_->B, acts_->T);
}

template <typename X>
X* GptCudaModel<X>::stage_input(int slot, int B, int T) {
  use_slot(slot);
  allocate_activations(B, T);
  return acts_->embedded;
}

template <typename X>
const X* GptCudaModel<X>::stage_output(int slot) const {
  const Acts& a = *slots_.at(size_t(slot));
  return a.outs.empty() ? a.embedded : a.outs.back();
}

template <typename X>
X* GptCudaModel<X>::stage_output_grad(int slot) {
  return slots_.at(size_t(slot))->dres;
}

template <typename X>
const X* GptCudaModel<X>::stage_input_grad(int slot) const {
  return slots_.at(size_t(slot))->dres;
}

template <typename X>
double GptCudaModel<X>::take_loss() {
  double total = 0;
  const size_t n = acts_->B * size_t(acts_->T);
  for (int k = 0; k < losses_pending_; ++k) {
    float* host = staging_->host_loss_buffer(n);
    MEG_CUDA_CHECK(cudaMemcpyAsync(host, staging_->losses[k].get(), n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    MEG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    double sum = 0;  // in position order, as the CPU's cross_entropy_forward
    for (size_t i = 0; i < n; ++i) sum += host[i];
    if (pending_counts_[k] > 0) total += sum / pending_counts_[k];
  }
  losses_pending_ = 0;
  pending_counts_.clear();
  return total;
}

template <typename X>
double GptCudaModel<X>::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  use_slot(0);
  prepare_batch(tokens, targets, B, T);
  const int N = B * T;
  if (!stage_.last()) {
    run_forward(B, T, 0.0f);
    MEG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return 0.0;
  }
  cuda::DeviceArray<float> losses(alloc_, size_t(N));
  acts_->losses = losses.get();
  run_forward(B, T, 0.0f);
  std::vector<float> host(static_cast<size_t>(N));
  MEG_CUDA_CHECK(cudaMemcpyAsync(host.data(), losses.get(), N * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  MEG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (!targets) return 0.0;
  double sum = 0;
  int count = 0;
  for (int i = 0; i < N; ++i) {
    sum += host[i];
    count += targets[i] != -1;
  }
  return count > 0 ? sum / count : 0.0;
}

template <typename X>
std::vector<float> GptCudaModel<X>::logits() const {
  const Acts& a = *acts_;
  const size_t n = size_t(a.B) * a.T * size_t(dims(a.B, a.T).Vp);
  std::vector<X> raw(n);
  MEG_CUDA_CHECK(cudaMemcpyAsync(raw.data(), a.logits, n * sizeof(X), cudaMemcpyDeviceToHost, stream_));
  MEG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(raw[i]);
  return out;
}

template class GptCudaModel<float>;
template class GptCudaModel<__nv_bfloat16>;
template class GptCudaModel<__half>;

}  // namespace meg
