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

namespace {

constexpr size_t kAlign = 256;  // bytes: every carved array starts on a 16-byte vector boundary and more

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Hands out consecutive aligned pieces of one allocation; with a null base it only counts.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* take(size_t n) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += align_up(n * sizeof(T));
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

}  // namespace

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::none;
  if (name == "selective") return Recompute::selective;
  if (name == "full") return Recompute::full;
  input_error("--recompute '{}': expected none, selective or full", name);
}

// Activations and backward buffers of one (B, T), carved out of one device allocation.
template <typename X>
struct GptCudaModel<X>::Acts {
  struct Block {
    X *ln1, *qkv, *atty, *mid, *ln2, *fc1, *act, *out;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lse;
  };
  int B = 0, T = 0;
  cuda::DeviceArray<char> store;
  X* embedded = nullptr;  // the input of block 0: the embedding's output, or the previous stage's
  int groups = 0;         // distinct tokens of the batch (the embedding backward's groups)
  // The dropout of the forward, for its backward.
  double hidden_p = 0, attn_p = 0;
  uint64_t drop_seed = 0, drop_step = 0, drop_micro = 0;
  std::vector<Block> blocks;
  X *lnf = nullptr, *logits = nullptr;
  float *lnf_mean = nullptr, *lnf_rstd = nullptr, *losses = nullptr;
  // Vocabulary-parallel cross-entropy: this rank's row partials, and all ranks' gathered.
  float *partial = nullptr, *partials = nullptr;
  // Backward.
  X *dres = nullptr, *dln = nullptr, *dqkv = nullptr, *datty = nullptr, *dact = nullptr, *dfc1 = nullptr,
    *branch = nullptr;
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
  if (config_.layer_pattern() != default_layer_pattern(config_.num_layers))
    input_error("model config: hybrid-layer-pattern \"{}\": the CUDA model runs \"*-\" blocks only",
                config_.layer_pattern());
  const auto [first_layer, end_layer] = stage_layers(config_, stage_);
  first_layer_ = static_cast<size_t>(first_layer / 2);
  for (int64_t l = first_layer; l < end_layer; l += 2) layers_.push_back({index.layer(l), index.layer(l + 1)});

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
  if (config_.uses_rope()) {
    const auto table = cuda::rope_table(static_cast<int>(config_.seq_length), static_cast<int>(config_.head_size()),
                                        config_.rope_theta);
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
X* GptCudaModel<X>::px(size_t offset) const {
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
  const size_t N = size_t(d.N), C = size_t(d.C), NH = size_t(d.NH), CQ = size_t(d.CQ), QKV = size_t(d.QKV),
               Fh = size_t(d.Fh), FC = size_t(d.FC), Vp = size_t(d.Vp), L = layers_.size();
  const size_t R = rows(d.N);  // the residual stream's rows on this rank
  const int n = static_cast<int>(N);
  const size_t scratch = std::max({cuda::layernorm_backward_scratch(n, int(C)), cuda::rmsnorm_backward_scratch(n, int(C)),
                                   cuda::bias_backward_scratch(n, int(std::max({QKV, FC, C}))),
                                   cuda::attention_backward_scratch(B, T, int(NH))});
  const bool gelu_in_place = config_.activation != Activation::swiglu;

  // With recomputation, what a block recomputes lives in one buffer shared by all blocks (taken
  // by the first block, aliased by the others).
  const bool share_all = recompute_ == Recompute::full;
  const bool share_wide = recompute_ != Recompute::none;
  auto carve = [&](char* base) {
    Carver c(base);
    a.blocks.assign(L, {});
    a.embedded = c.take<X>(R * C);
    for (size_t l = 0; l < L; ++l) {
      auto& b = a.blocks[l];
      const auto& first = a.blocks[0];
      const bool alias_all = share_all && l > 0, alias_wide = share_wide && l > 0;
      b.ln1 = alias_wide ? first.ln1 : c.take<X>(N * C);
      b.ln1_mean = alias_all ? first.ln1_mean : c.take<float>(R);
      b.ln1_rstd = alias_all ? first.ln1_rstd : c.take<float>(R);
      b.qkv = alias_all ? first.qkv : c.take<X>(N * QKV);
      b.lse = alias_all ? first.lse : c.take<float>(size_t(B) * NH * T);
      b.atty = alias_all ? first.atty : c.take<X>(N * CQ);
      b.mid = alias_all ? first.mid : c.take<X>(R * C);
      b.ln2 = alias_wide ? first.ln2 : c.take<X>(N * C);
      b.ln2_mean = alias_all ? first.ln2_mean : c.take<float>(R);
      b.ln2_rstd = alias_all ? first.ln2_rstd : c.take<float>(R);
      b.fc1 = alias_all ? first.fc1 : c.take<X>(N * FC);
      b.act = alias_wide ? first.act : c.take<X>(N * Fh);
      b.out = c.take<X>(R * C);
    }
    if (stage_.last()) {
      a.lnf = c.take<X>(N * C);
      a.lnf_mean = c.take<float>(R);
      a.lnf_rstd = c.take<float>(R);
      a.logits = c.take<X>(N * Vp);
    }
    a.dres = c.take<X>(R * C);
    a.dln = c.take<X>(N * C);
    a.dqkv = c.take<X>(N * QKV);
    a.datty = c.take<X>(N * CQ);
    a.dact = c.take<X>(N * Fh);
    a.dfc1 = gelu_in_place ? a.dact : c.take<X>(N * FC);
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
    cuda::layernorm_forward(out, mean, rstd, inp, px(w), px(b), N, C, eps, stream_);
  else
    cuda::rmsnorm_forward(out, rstd, inp, px(w), N, C, eps, stream_);
}

template <typename X>
void GptCudaModel<X>::norm_backward(X* dinp, const X* dout, const X* inp, size_t w, size_t b, const float* mean,
                                    const float* rstd, int N) {
  const int C = static_cast<int>(config_.hidden_size);
  if (config_.norm == NormKind::layernorm)
    cuda::layernorm_backward(dinp, g(w), g(b), dout, inp, px(w), mean, rstd, N, C, acts_->scratch, stream_);
  else
    cuda::rmsnorm_backward(dinp, g(w), dout, inp, px(w), rstd, N, C, acts_->scratch, stream_);
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
  const int tp = tp_size();
  Dims d;
  d.N = B * T;
  d.C = static_cast<int>(config_.hidden_size);
  d.NH = static_cast<int>(config_.num_heads) / tp;
  d.NKV = static_cast<int>(config_.num_kv_heads) / tp;
  d.HS = static_cast<int>(config_.head_size());
  d.CQ = d.NH * d.HS;
  d.QKV = d.CQ + 2 * d.NKV * d.HS;
  d.Fh = static_cast<int>(config_.ffn_hidden_size) / tp;
  d.FC = (config_.activation == Activation::swiglu ? 2 : 1) * d.Fh;
  d.Vp = static_cast<int>(config_.padded_vocab_size) / tp;
  d.V0 = tp_ ? d.Vp * tp_->rank() : 0;
  d.V = std::clamp(static_cast<int>(config_.vocab_size) - d.V0, 0, d.Vp);
  d.NC = static_cast<size_t>(d.N) * static_cast<size_t>(d.C);
  return d;
}

// The forward of the whole model on the batch staged by prepare_batch; the loss (and, when DLOSS
// is not 0, its gradient in place of the logits) at the end.
template <typename X>
void GptCudaModel<X>::run_forward(int B, int T, float dloss) {
  Acts& a = *acts_;
  const auto [N, C, NH, NKV, HS, CQ, QKV, Fh, FC, V, Vp, V0, NC] = dims(B, T);
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
    cuda::embedding_forward(lookup, a.tokens, px(wte_), first_rank ? px(wpe_) : nullptr, B, T, C, V0, Vp, stream_);
    if (sp_)
      tp_->reduce_scatter_sum(a.embedded, lookup, RC, stream_);
    else
      sum_over_tp(a.embedded, NC);
    if (hp > 0) dropout(a.embedded, a.embedded, RC, hp, 0, first);
  }
  const X* x = a.embedded;
  for (size_t l = 0; l < layers_.size(); ++l) {
    block_forward(l, x, B, T);
    x = a.blocks[l].out;
  }
  if (!stage_.last()) return;  // the output is stage_output()
  norm_rows(a.lnf, a.lnf_mean, a.lnf_rstd, x, lnf_w_, lnf_b_, N);
  gemm_.linear_forward(a.logits, a.lnf, px(out_w_), static_cast<const X*>(nullptr), N, C, Vp);
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
X* GptCudaModel<X>::row_parallel_bias(size_t b) const {
  return !tp_ || tp_->rank() == 0 ? px(b) : nullptr;
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
const X* GptCudaModel<X>::dropout_input_grad(uint64_t site, int N) {
  Acts& a = *acts_;
  const size_t RC = rows(N) * size_t(config_.hidden_size), first = first_row(N) * size_t(config_.hidden_size);
  const X* d = a.dres;
  if (a.hidden_p > 0) {
    dropout(a.branch + first, a.dres, RC, a.hidden_p, site, first);
    d = a.branch + first;
  }
  if (!sp_) return d;
  tp_->all_gather(a.branch, d, RC, stream_);  // in place when d is already there
  return a.branch;
}

// Block L on its input X, writing the block's activations and its output.
template <typename X>
void GptCudaModel<X>::block_forward(size_t l, const X* x, int B, int T) {
  Acts& a = *acts_;
  const auto [N, C, NH, NKV, HS, CQ, QKV, Fh, FC, V, Vp, V0, NC] = dims(B, T);
  const double hp = a.hidden_p;
  using enum TensorRole;
  const LayerTensors& attn = layers_[l].attention;
  const LayerTensors& mlp = layers_[l].mlp;
  auto& b = a.blocks[l];
  const uint64_t site = 3 * static_cast<uint64_t>(first_layer_ + l);  // the global block number
  // The residual stream's rows on this rank (x, mid, out): all N, or R with sequence parallelism.
  const size_t RC = rows(N) * size_t(C), first = first_row(N) * size_t(C);
  norm_rows(b.ln1, b.ln1_mean, b.ln1_rstd, x, attn[norm_weight], attn[norm_bias], N);
  gemm_.linear_forward(b.qkv, b.ln1, px(attn[qkv_weight]), px(attn[qkv_bias]), N, C, QKV);
  if (config_.uses_rope()) cuda::rope_forward(b.qkv, rope_table_.get(), B, T, NH, NKV, HS, stream_);
  cuda::attention_forward(b.atty, b.lse, b.qkv, B, T, NH, NKV, HS, stream_, a.attn_p, dropout_key(site + 1));
  gemm_.linear_forward(a.branch, b.atty, px(attn[proj_weight]), row_parallel_bias(attn[proj_bias]), N, CQ, C);
  X* branch = exit_tp(a.branch, N);
  if (hp > 0) dropout(branch, branch, RC, hp, site + 2, first);
  cuda::add(b.mid, x, branch, RC, stream_);
  norm_rows(b.ln2, b.ln2_mean, b.ln2_rstd, b.mid, mlp[norm_weight], mlp[norm_bias], N);
  // Selective recomputation computes the activation again with the GELU kernel, so the forward
  // must use that kernel too: cuBLASLt's GELU may round differently in the last bit.
  const bool fuse_gelu = config_.activation != Activation::swiglu && fused_ && recompute_ != Recompute::selective;
  if (!(fuse_gelu &&
        gemm_.linear_gelu_forward(b.act, b.fc1, b.ln2, px(mlp[fc1_weight]), px(mlp[fc1_bias]), N, C, FC))) {
    gemm_.linear_forward(b.fc1, b.ln2, px(mlp[fc1_weight]), px(mlp[fc1_bias]), N, C, FC);
    activation_forward(b.act, b.fc1, N);
  }
  gemm_.linear_forward(a.branch, b.act, px(mlp[fc2_weight]), row_parallel_bias(mlp[fc2_bias]), N, Fh, C);
  branch = exit_tp(a.branch, N);
  if (hp > 0) dropout(branch, branch, RC, hp, site + 3, first);
  cuda::add(b.out, b.mid, branch, RC, stream_);
}

template <typename X>
void GptCudaModel<X>::activation_forward(X* out, const X* inp, int N) {
  const int Fh = dims(N, 1).Fh;
  if (config_.activation == Activation::swiglu)
    cuda::swiglu_forward(out, inp, N, Fh, stream_);
  else
    cuda::gelu_forward(out, inp, size_t(N) * Fh, stream_);
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
  using enum TensorRole;
  Acts& a = *acts_;
  const auto [N, C, NH, NKV, HS, CQ, QKV, Fh, FC, V, Vp, V0, NC] = dims(B, T);
  const int L = static_cast<int>(layers_.size());
  const int R = static_cast<int>(rows(N));  // the residual stream's rows on this rank

  // Output layer (for tied embeddings g(out_w_) is the embedding's gradient) and final norm; on
  // the other stages a.dres holds the next stage's gradient (stage_output_grad()).
  if (stage_.last()) {
    gemm_.linear_backward_input(a.dln, a.logits, px(out_w_), N, C, Vp);
    const X* dl = exit_tp(a.dln, N);
    gemm_.linear_backward_weight(g(out_w_), a.logits, a.lnf, N, C, Vp);
    MEG_CUDA_CHECK(cudaMemsetAsync(a.dres, 0, size_t(R) * C * sizeof(X), stream_));
    const X* last = L > 0 ? a.blocks[L - 1].out : a.embedded;
    norm_backward(a.dres, dl, last, lnf_w_, lnf_b_, a.lnf_mean, a.lnf_rstd, R);
    // The final norm and the untied output layer are done. A tied output layer's gradient is the
    // word embedding's (or, on a later last stage, its copy's), first in the table: reported with
    // the rest at the end.
    if (grads_ready_) grads_ready_(lnf_w_);
  }

  // a.dres holds the gradient of the residual stream (this rank's rows), flowing down through the
  // blocks; a branch takes it through its hidden dropout's mask, gathered to all rows.
  for (int l = L - 1; l >= 0; --l) {
    const LayerTensors& attn = layers_[size_t(l)].attention;
    const LayerTensors& mlp = layers_[size_t(l)].mlp;
    const auto& b = a.blocks[l];
    const X* x = l > 0 ? a.blocks[l - 1].out : a.embedded;
    const uint64_t site = 3 * static_cast<uint64_t>(first_layer_ + size_t(l));
    if (recompute_ == Recompute::full) {
      block_forward(size_t(l), x, B, T);
    } else if (recompute_ == Recompute::selective) {
      norm_rows(b.ln1, b.ln1_mean, b.ln1_rstd, x, attn[norm_weight], attn[norm_bias], N);
      norm_rows(b.ln2, b.ln2_mean, b.ln2_rstd, b.mid, mlp[norm_weight], mlp[norm_bias], N);
      activation_forward(b.act, b.fc1, N);
    }
    // MLP: out = mid + dropout(fc2(act(fc1(norm2(mid))))).
    const X* dbranch = dropout_input_grad(site + 3, N);
    const bool gelu = config_.activation != Activation::swiglu;
    if (!(gelu && fused_ &&
          gemm_.linear_dgelu_backward_input(a.dfc1, dbranch, px(mlp[fc2_weight]), b.fc1, N, Fh, C))) {
      gemm_.linear_backward_input(a.dact, dbranch, px(mlp[fc2_weight]), N, Fh, C);
      if (gelu)
        cuda::gelu_backward(a.dfc1, a.dact, b.fc1, size_t(N) * Fh, stream_);
      else
        cuda::swiglu_backward(a.dfc1, a.dact, b.fc1, N, Fh, stream_);
    }
    weight_backward(mlp[fc2_weight], mlp[fc2_bias], dbranch, b.act, N, Fh, C);
    gemm_.linear_backward_input(a.dln, a.dfc1, px(mlp[fc1_weight]), N, C, FC);
    const X* dl = exit_tp(a.dln, N);
    weight_backward(mlp[fc1_weight], mlp[fc1_bias], a.dfc1, b.ln2, N, C, FC);
    norm_backward(a.dres, dl, b.mid, mlp[norm_weight], mlp[norm_bias], b.ln2_mean, b.ln2_rstd, R);
    // Attention: mid = x + dropout(proj(attention(rope(qkv(norm1(x)))))).
    dbranch = dropout_input_grad(site + 2, N);
    gemm_.linear_backward_input(a.datty, dbranch, px(attn[proj_weight]), N, CQ, C);
    weight_backward(attn[proj_weight], attn[proj_bias], dbranch, b.atty, N, CQ, C);
    cuda::attention_backward(a.dqkv, a.datty, b.qkv, b.atty, b.lse, B, T, NH, NKV, HS, a.scratch, stream_,
                             a.attn_p, dropout_key(site + 1));
    if (config_.uses_rope()) cuda::rope_backward(a.dqkv, rope_table_.get(), B, T, NH, NKV, HS, stream_);
    gemm_.linear_backward_input(a.dln, a.dqkv, px(attn[qkv_weight]), N, C, QKV);
    dl = exit_tp(a.dln, N);
    weight_backward(attn[qkv_weight], attn[qkv_bias], a.dqkv, b.ln1, N, C, QKV);
    norm_backward(a.dres, dl, x, attn[norm_weight], attn[norm_bias], b.ln1_mean, b.ln1_rstd, R);
    if (grads_ready_) grads_ready_(attn[norm_weight]);  // the block's first tensor: all of the block is done
  }
  if (stage_.first()) {  // otherwise a.dres is stage_input_grad()
    // With sequence parallelism the position embedding's gradient is rank 0's, from all rows, as
    // its forward added it: the caller's sum over the group counts it once.
    float* dwpe = !sp_ || tp_->rank() == 0 ? g(wpe_) : nullptr;
    cuda::embedding_backward(g(wte_), dwpe, dropout_input_grad(0, N), a.unique, a.starts, a.positions, a.groups, B,
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
  return a.blocks.empty() ? a.embedded : a.blocks.back().out;
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
