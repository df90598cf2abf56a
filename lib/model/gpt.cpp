// GptModel: the decoder-only language model on the CPU (see gpt.hpp for the layout and names).
#include "model/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "core/error.hpp"
#include "model/init.hpp"
#include "model/pipeline.hpp"
#include "model/tensor_parallel.hpp"
#include "ops/cpu/ops.hpp"

namespace meg {

namespace {

template <typename F>
void zero(F* a, size_t n) {
  std::fill(a, a + n, F(0));
}

}  // namespace

template <typename F>
GptModel<F>::GptModel(const ModelConfig& config, Comm* tp, PipelineStage stage, bool sequence_parallel, F* params,
                      F* grads)
    : config_(config), tp_(tp), stage_(stage), sp_(sequence_parallel && tp && tp->size() > 1) {
  config_.validate();
  check_pipeline_parallel(config_, stage_.stages);
  if (config_.uses_rope()) rope_inv_freq_ = config_.rope_inv_freq();
  tensors_ = stage_table(config_, stage_,
                         tp_size() > 1 ? gpt_parameter_table(config_, tp_size()) : gpt_parameter_table(config_));
  const TensorIndex index(config_, tensors_);
  const auto [first_layer, end_layer] = stage_layers(config_, stage_);
  first_layer_ = static_cast<size_t>(first_layer);
  wte_ = index.at(kNoLayer, TensorRole::word_embeddings);
  wpe_ = index.at(kNoLayer, TensorRole::position_embeddings);
  lnf_w_ = index.at(kNoLayer, TensorRole::final_norm_weight);
  lnf_b_ = index.at(kNoLayer, TensorRole::final_norm_bias);
  out_w_ = index.output_weight();
  const std::vector<LayerSpec> specs = config_.layers();
  for (int64_t l = first_layer; l < end_layer; ++l) {
    specs_.push_back(specs[size_t(l)]);
    layer_tensors_.push_back(index.layer(l));
  }
  if (config_.moe.enabled() && stage_.stages > 1)
    input_error("model config: MoE layers run on one pipeline stage for now, not {}", stage_.stages);
  layers_ = make_cpu_layers<F>(config_, tp_size(), first_layer, end_layer);
  num_parameters_ = tensors_.empty() ? 0 : tensors_.back().offset + tensors_.back().numel;
  if (!params) {
    own_params_.assign(num_parameters_, F(0));
    params = own_params_.data();
  }
  params_ = params;
  grads_ = grads;
}

template <typename F>
const ParamTensor& GptModel<F>::tensor(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t;
  throw std::out_of_range("GptModel: no parameter tensor named '" + name + "'");
}

template <typename F>
void GptModel<F>::init(uint64_t seed) {
  gpt_init_local(config_, tensors_, tp_size(), tp_ ? tp_->rank() : 0, seed, params_);
}

template <typename F>
AuxiliaryLosses GptModel<F>::auxiliary_losses() const {
  AuxiliaryLosses sum;
  for (const auto& layer : layers_) layer->add_auxiliary_losses(sum);
  return sum;
}

template <typename F>
void GptModel<F>::zero_grad() {
  if (grads_) std::fill(grads_, grads_ + num_parameters_, F(0));  // else zeros when allocated
}

template <typename F>
F* GptModel<F>::ensure_grads() {
  if (!grads_) {
    own_grads_.assign(num_parameters_, F(0));
    grads_ = own_grads_.data();
  }
  return grads_;
}

template <typename F>
void GptModel<F>::allocate_activations(int B, int T) {
  const Dims d = dims(B, T);
  const size_t N = size_t(d.N), C = size_t(d.C), Vp = size_t(d.Vp);
  const size_t L = layers_.size();  // this stage's layers
  const CpuRows rows{B * T, B, T};
  size_t layer_scratch = 0;
  for (const auto& layer : layers_) layer_scratch = std::max(layer_scratch, layer->scratch_size(B * T));

  // Two passes over the same carving: the first (base null) only counts.
  auto carve = [&](F* base) {
    size_t used = 0;
    auto take = [&](size_t n) {
      F* ptr = base ? base + used : nullptr;
      used += n;
      return ptr;
    };
    layer_acts_.assign(L, nullptr);
    res_.assign(L + 1, nullptr);
    res_[0] = take(N * C);
    for (size_t l = 0; l < L; ++l) {
      layer_acts_[l] = take(layers_[l]->activation_size(rows));
      res_[l + 1] = take(N * C);
    }
    lnf_ = take(N * C);
    lnf_mean_ = take(N);
    lnf_rstd_ = take(N);
    logits_ = take(N * Vp);
    losses_ = take(N);
    scratch_ = take(N * C);
    dres_ = take(N * C);
    dlnf_ = take(N * C);
    layer_scratch_ = take(layer_scratch);
    dlogits_ = take(N * Vp);
    sp_full_ = take(sp_ ? N * C : 0);
    sp_local_ = take(sp_ ? N * C : 0);
    return used;
  };
  const size_t need = carve(nullptr);
  if (need > acts_.size()) {
    acts_.clear();
    acts_.shrink_to_fit();
    acts_.assign(need, F(0));
  }
  carve(acts_.data());
  B_ = B;
  T_ = T;
}

template <typename F>
void GptModel<F>::norm_backward(F* dinp, const F* dout, const F* inp, size_t w, size_t b,
                                const F* mean, const F* rstd, int N) {
  const int C = static_cast<int>(config_.hidden_size);
  if (config_.norm == NormKind::layernorm)
    cpu::layernorm_backward(dinp, g(w), g(b), dout, inp, p(w), mean, rstd, N, C);
  else
    cpu::rmsnorm_backward(dinp, g(w), dout, inp, p(w), rstd, N, C);
}

template <typename F>
typename GptModel<F>::Dims GptModel<F>::dims(int B, int T) const {
  const int tp = tp_size();
  Dims d;
  d.N = B * T;
  d.C = static_cast<int>(config_.hidden_size);
  d.V = static_cast<int>(config_.vocab_size);
  d.Vp = static_cast<int>(config_.padded_vocab_size) / tp;
  d.V0 = tp > 1 ? d.Vp * tp_->rank() : 0;
  d.NC = static_cast<size_t>(d.N) * static_cast<size_t>(d.C);
  return d;
}

template <typename F>
double GptModel<F>::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  return forward_stage(tokens, nullptr, targets, B, T);
}

template <typename F>
void GptModel<F>::backward() {
  backward_stage(nullptr);
}

template <typename F>
double GptModel<F>::forward_stage(const int32_t* tokens, const F* hidden, const int32_t* targets, int B, int T) {
  return run_forward(tokens, hidden, targets, B, T, true);
}

template <typename F>
void GptModel<F>::forward_hidden(const int32_t* tokens, int B, int T) {
  if (!stage_.first() || !stage_.last()) throw std::logic_error("GptModel::forward_hidden: the model must be whole");
  run_forward(tokens, nullptr, nullptr, B, T, false);
}

template <typename F>
double GptModel<F>::run_forward(const int32_t* tokens, const F* hidden, const int32_t* targets, int B, int T,
                                bool logits) {
  using enum TensorRole;
  if (B <= 0 || T <= 0) input_error("model forward: batch {} x sequence {} must be positive", B, T);
  if (config_.learned_positions() && T > config_.seq_length)
    input_error("model forward: sequence length {} exceeds the {} learned positions", T,
                config_.seq_length);
  allocate_activations(B, T);
  const auto [N, C, V, Vp, V0, NC] = dims(B, T);

  have_targets_ = false;  // set only once a forward with targets has succeeded
  tokens_.assign(tokens, tokens + N);
  if (targets) targets_.assign(targets, targets + N);
  fwd_hidden_p_ = training_ ? config_.hidden_dropout : 0.0;
  fwd_attn_p_ = training_ ? config_.attention_dropout : 0.0;
  fwd_seed_ = drop_seed_;
  fwd_step_ = drop_step_;
  fwd_micro_ = drop_micro_;
  const double hp = fwd_hidden_p_;

  // The residual stream: all N rows, or with sequence parallelism this rank's R of them, whose
  // first element is element FIRST of the whole array (for the dropout masks).
  const size_t R = rows(N), RC = R * size_t(C), first = first_row(N) * size_t(C);
  forward_done_ = false;
  if (stage_.first()) {
    embed(tokens, B, T);
    if (hp > 0) cpu::dropout_forward(res_[0], res_[0], RC, hp, dropout_key(0), first);
  } else {
    std::copy_n(hidden, RC, res_[0]);
  }
  const CpuRows rows{N, B, T};
  for (size_t l = 0; l < layers_.size(); ++l)
    layers_[l]->forward(*this, place(l), rows, layer_acts_[l], res_[l], res_[l + 1]);
  forward_done_ = true;
  if (!stage_.last()) return 0.0;  // the output is stage_output()
  norm_rows(lnf_, lnf_mean_, lnf_rstd_, res_[layers_.size()], lnf_w_, lnf_b_, N);
  if (!logits) return 0.0;
  cpu::linear_forward(logits_, lnf_, p(out_w_), nullptr, N, C, Vp);
  if (!targets) {
    zero(losses_, static_cast<size_t>(N));
    return 0.0;
  }
  const double loss = loss_forward(targets, N);
  have_targets_ = true;
  return loss;
}

template <typename F>
void GptModel<F>::backward_stage(const F* dout) {
  using enum TensorRole;
  if (stage_.last() ? !have_targets_ || B_ == 0 : !forward_done_)
    throw std::logic_error("GptModel::backward: the last forward had no targets");
  ensure_grads();
  const int B = B_, T = T_;
  const auto [N, C, V, Vp, V0, NC] = dims(B, T);
  const double hp = fwd_hidden_p_;

  const size_t R = rows(N), RC = R * size_t(C), first = first_row(N) * size_t(C);
  if (stage_.last()) {
    // Loss and output layer (for tied embeddings, g(out_w_) is the embedding's gradient).
    loss_backward(N);
    zero(dlnf_, NC);
    cpu::linear_backward(dlnf_, g(out_w_), nullptr, dlogits_, lnf_, p(out_w_), N, C, Vp);
    const F* dl = exit_tp(dlnf_, N);  // the vocabulary-parallel output layer's input gradient
    zero(dres_, RC);
    norm_backward(dres_, dl, res_[layers_.size()], lnf_w_, lnf_b_, lnf_mean_, lnf_rstd_, int(R));
  } else {
    std::copy_n(dout, RC, dres_);  // the next stage's gradient of this stage's output
  }

  // dres_ holds the gradient of the residual stream (this rank's rows), flowing down the layers.
  const CpuRows rows{N, B, T};
  for (size_t l = layers_.size(); l-- > 0;)
    layers_[l]->backward(*this, place(l), rows, layer_acts_[l], layer_scratch_, res_[l], dres_);
  if (!stage_.first()) return;  // dres_ is stage_input_grad()
  if (hp > 0) cpu::dropout_forward(dres_, dres_, RC, hp, dropout_key(0), first);  // dres_ is not needed after
  embed_backward(B, T);
}

// ---- the layers' training path -------------------------------------------------------------------

template <typename F>
CausalAttention<F>& GptModel<F>::causal_attention_of(int64_t block) {
  core_.emplace(B_, T_, rope_inv_freq_, fwd_attn_p_, dropout_key(block_dropout_sites(block) + 1),
                config_.attention_window());
  return *core_;
}

template <typename F>
void GptModel<F>::hidden_dropout(F* branch, int N, uint64_t site) {
  if (fwd_hidden_p_ > 0)
    cpu::dropout_forward(branch, branch, rows(N) * size_t(config_.hidden_size), fwd_hidden_p_, dropout_key(site),
                         first_row(N) * size_t(config_.hidden_size));
}

// With hidden dropout, the gradient of a branch output is DRES through the branch's mask (in
// scratch_); the residual path takes DRES itself. The branch's products see all rows.
template <typename F>
const F* GptModel<F>::branch_grad(const F* dres, int N, uint64_t site) {
  const F* d = dres;
  if (fwd_hidden_p_ > 0) {
    cpu::dropout_forward(scratch_, dres, rows(N) * size_t(config_.hidden_size), fwd_hidden_p_, dropout_key(site),
                         first_row(N) * size_t(config_.hidden_size));
    d = scratch_;
  }
  return enter_tp(d, N);
}

// ---- the tensor-parallel pieces ------------------------------------------------------------------

template <typename F>
void GptModel<F>::sum_over_tp(F* data, size_t n) {
  if (tp_size() > 1) tp_->all_reduce_sum(data, n);
}

template <typename F>
size_t GptModel<F>::rows(int N) const {
  return sp_ ? size_t(N / tp_size()) : size_t(N);
}

template <typename F>
size_t GptModel<F>::first_row(int N) const {
  return sp_ ? rows(N) * size_t(tp_->rank()) : 0;
}

template <typename F>
const F* GptModel<F>::enter_tp(const F* local, int N) {
  if (!sp_) return local;
  const size_t rc = rows(N) * size_t(config_.hidden_size);
  tp_->all_gather(sp_full_, local, rc);
  return sp_full_;
}

template <typename F>
F* GptModel<F>::exit_tp(F* parts, int N) {
  if (!sp_) {
    sum_over_tp(parts, size_t(N) * size_t(config_.hidden_size));
    return parts;
  }
  tp_->reduce_scatter_sum(sp_local_, parts, rows(N) * size_t(config_.hidden_size));
  return sp_local_;
}

// A norm over the residual stream's rows, its output gathered to all N rows where sequence
// parallelism holds only some (the column-parallel product that follows needs them all).
template <typename F>
void GptModel<F>::norm_rows(F* out, F* mean, F* rstd, const F* inp, size_t w, size_t b, int N) {
  if (!sp_) {
    cpu_norm_forward(config_, out, mean, rstd, inp, p(w), p(b), N);
    return;
  }
  cpu_norm_forward(config_, sp_local_, mean, rstd, inp, p(w), p(b), int(rows(N)));
  tp_->all_gather(out, sp_local_, rows(N) * size_t(config_.hidden_size));
}

// Token embedding: each rank looks up the tokens of its vocabulary rows (zero for the others), the
// sum over the ranks is the whole lookup (with sequence parallelism each rank keeps its rows of
// it); then the (replicated) position embedding.
template <typename F>
void GptModel<F>::embed(const int32_t* tokens, int B, int T) {
  const auto [N, C, V, Vp, V0, NC] = dims(B, T);
  if (tp_size() == 1) {
    cpu::embedding_forward(res_[0], tokens, p(wte_), p(wpe_), B, T, C, V);
    return;
  }
  F* lookup = sp_ ? scratch_ : res_[0];
  zero(lookup, NC);
  for (int i = 0; i < N; ++i) {
    const int32_t t = tokens[i];
    if (t < 0 || t >= V) input_error("embedding: token {} at position {} is outside the vocabulary [0,{})", t, i, V);
    if (t >= V0 && t < V0 + Vp) std::copy_n(p(wte_) + size_t(t - V0) * C, C, lookup + size_t(i) * C);
  }
  const size_t R = rows(N), row0 = first_row(N);
  std::copy_n(exit_tp(lookup, N), R * size_t(C), res_[0]);
  F* out = res_[0];
  if (wpe_ != kAbsentTensor)
    for (size_t i = 0; i < R; ++i)
      for (int c = 0; c < C; ++c) out[i * C + c] += p(wpe_)[((row0 + i) % size_t(T)) * C + c];
}

// With sequence parallelism the position embedding's gradient here is of this rank's rows only:
// the backend sums such gradients over the group (the entries' sequence_parallel).
template <typename F>
void GptModel<F>::embed_backward(int B, int T) {
  const auto [N, C, V, Vp, V0, NC] = dims(B, T);
  if (tp_size() == 1) {
    cpu::embedding_backward(g(wte_), g(wpe_), dres_, tokens_.data(), B, T, C);
    return;
  }
  const F* all = enter_tp(dres_, N);
  for (int i = 0; i < N; ++i) {
    const int32_t t = tokens_[size_t(i)];
    if (t >= V0 && t < V0 + Vp)
      for (int c = 0; c < C; ++c) g(wte_)[size_t(t - V0) * C + c] += all[size_t(i) * C + c];
  }
  const size_t R = rows(N), row0 = first_row(N);
  if (wpe_ != kAbsentTensor)
    for (size_t i = 0; i < R; ++i)
      for (int c = 0; c < C; ++c) g(wpe_)[((row0 + i) % size_t(T)) * C + c] += dres_[i * C + c];
}

// A row-parallel linear layer: this rank's input columns times its weight columns is a part of the
// output; the parts are summed over the ranks (with sequence parallelism each keeping its rows),
// then the bias (replicated) is added once. Returns the output: the residual stream's rows.
template <typename F>
F* GptModel<F>::row_parallel_forward(const F* inp, size_t w, size_t b, int N, int in) {
  const int OC = static_cast<int>(config_.hidden_size);
  if (tp_size() == 1) {
    cpu::linear_forward(scratch_, inp, p(w), p(b), N, in, OC);
    return scratch_;
  }
  cpu::linear_forward(scratch_, inp, p(w), static_cast<const F*>(nullptr), N, in, OC);
  F* out = exit_tp(scratch_, N);
  if (b != kAbsentTensor)
    for (size_t i = 0; i < rows(N); ++i)
      for (int o = 0; o < OC; ++o) out[i * size_t(OC) + o] += p(b)[o];
  return out;
}

// Cross-entropy over vocabulary-parallel logits: each row's log-sum-exp is combined from the ranks'
// (the maximum over all, then the sum of exponentials), and the target's logit comes from the rank
// that holds it. Padded columns (>= V) take no part, as in the single-rank op.
template <typename F>
double GptModel<F>::loss_forward(const int32_t* targets, int N) {
  const auto [n_, C, V, Vp, V0, NC] = dims(N, 1);
  if (tp_size() == 1) return cpu::cross_entropy_forward(losses_, logits_, targets, N, V, Vp);
  const int real = std::clamp(V - V0, 0, Vp);  // this rank's columns inside the vocabulary
  std::vector<double> maxima(size_t(N), -INFINITY), sums(size_t(N), 0.0), target_logit(size_t(N), 0.0);
  int count = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] < -1 || targets[i] >= V)
      input_error("cross entropy: target {} at position {} is outside the vocabulary [0,{})", targets[i], i, V);
    count += targets[i] != -1;
    const F* row = logits_ + size_t(i) * Vp;
    for (int j = 0; j < real; ++j) maxima[size_t(i)] = std::max(maxima[size_t(i)], double(row[j]));
    if (targets[i] >= V0 && targets[i] < V0 + real) target_logit[size_t(i)] = row[targets[i] - V0];
  }
  tp_->all_reduce_max(maxima.data(), maxima.size());
  for (int i = 0; i < N; ++i) {
    const F* row = logits_ + size_t(i) * Vp;
    for (int j = 0; j < real; ++j) sums[size_t(i)] += std::exp(double(row[j]) - maxima[size_t(i)]);
  }
  tp_->all_reduce_sum(sums.data(), sums.size());
  tp_->all_reduce_sum(target_logit.data(), target_logit.size());
  lse_.assign(size_t(N), 0.0);
  double total = 0;
  for (int i = 0; i < N; ++i) {
    lse_[size_t(i)] = maxima[size_t(i)] + std::log(sums[size_t(i)]);
    const double loss = targets[i] == -1 ? 0.0 : lse_[size_t(i)] - target_logit[size_t(i)];
    losses_[i] = F(loss);
    total += loss;
  }
  return count > 0 ? total / count : 0.0;
}

template <typename F>
void GptModel<F>::loss_backward(int N) {
  const auto [n_, C, V, Vp, V0, NC] = dims(N, 1);
  if (tp_size() == 1) {
    cpu::cross_entropy_backward(dlogits_, logits_, targets_.data(), N, V, Vp);
    return;
  }
  const int real = std::clamp(V - V0, 0, Vp);
  int count = 0;
  for (int i = 0; i < N; ++i) count += targets_[size_t(i)] != -1;
  const double factor = count > 0 ? 1.0 / count : 0.0;
  for (int i = 0; i < N; ++i) {
    const F* row = logits_ + size_t(i) * Vp;
    F* drow = dlogits_ + size_t(i) * Vp;
    zero(drow, size_t(Vp));
    const int32_t t = targets_[size_t(i)];
    if (t == -1) continue;
    for (int j = 0; j < real; ++j) {
      const double onehot = V0 + j == t ? 1.0 : 0.0;
      drow[j] = F(factor * (std::exp(double(row[j]) - lse_[size_t(i)]) - onehot));
    }
  }
}

template class GptModel<float>;
template class GptModel<double>;

}  // namespace meg
