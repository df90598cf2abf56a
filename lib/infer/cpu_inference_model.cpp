// CpuInferenceModel: GptModel's forward (model/gpt.cpp) over new tokens and a key/value cache.
#include "infer/cpu_inference_model.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "model/tensor_parallel.hpp"
#include "model/tensor_parallel_shard.hpp"
#include "ops/cpu/ops.hpp"
#include "parallel/comm.hpp"

namespace meg {

namespace {

void grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

CpuInferenceModel::CpuInferenceModel(const ModelConfig& config, std::vector<float> params, int slots, int max_length,
                                     Comm* tp)
    : tp_(tp != nullptr && tp->size() > 1 ? tp : nullptr) {
  if (tp_) {
    tp_size_ = tp_->size();
    tp_rank_ = tp_->rank();
  }
  config_ = tensor_parallel_config(config, params.size(), tp_size_);
  const bool whole = holds_whole_model(config, params.size());
  params_ = tp_ && whole ? tensor_parallel_shard(config, params, config_, tp_size_, tp_rank_) : std::move(params);
  if (slots < 1) input_error("--batch {}: must be at least 1", slots);
  if (max_length < 0) input_error("--max-length {}: must be positive", max_length);
  if (max_length == 0) max_length = static_cast<int>(config_.seq_length);
  if (config_.learned_positions() && max_length > config_.seq_length)
    input_error("--max-length {}: this GPT-2 model has only {} learned positions", max_length, config_.seq_length);
  w_ = TensorIndex(config_, gpt_parameter_table(config_, tp_size_));
  slots_ = slots;
  max_length_ = max_length;
  C_ = static_cast<int>(config_.hidden_size);
  NH_ = static_cast<int>(config_.num_heads) / tp_size_;
  NKV_ = static_cast<int>(config_.num_kv_heads) / tp_size_;
  HS_ = static_cast<int>(config_.head_size());
  CQ_ = NH_ * HS_;
  KV_ = NKV_ * HS_;
  QKV_ = CQ_ + 2 * KV_;
  V_ = static_cast<int>(config_.vocab_size);
  Vp_ = static_cast<int>(config_.padded_vocab_size) / tp_size_;
  V0_ = Vp_ * tp_rank_;
  specs_ = config_.layers();
  layers_ = make_cpu_layers<float>(config_, tp_size_, 0, int64_t(specs_.size()));
  size_t attention_layers = 0;
  for (const LayerSpec& l : specs_) {
    cache_layer_.push_back(attention_layers);
    attention_layers += l.kind == LayerKind::attention;
  }
  lengths_.assign(size_t(slots_), 0);
  const size_t cache = attention_layers * size_t(slots_) * size_t(max_length_) * size_t(KV_);
  k_cache_.assign(cache, 0.0f);
  v_cache_.assign(cache, 0.0f);
  logits_.resize(size_t(slots_) * size_t(Vp_));
  if (tp_) gathered_.resize(size_t(tp_size_) * logits_.size());
}

int CpuInferenceModel::length(int slot) const { return lengths_[size_t(checked_slot(slot, slots_))]; }

void CpuInferenceModel::reset(int slot) {
  const size_t s = size_t(checked_slot(slot, slots_));
  default_queue_reset();
  lengths_[s] = 0;  // the cached rows are overwritten before they are read again
}

float* CpuInferenceModel::cache(std::vector<float>& kv, size_t l, int s) const {
  return kv.data() + ((l * size_t(slots_) + size_t(s)) * size_t(max_length_)) * size_t(KV_);
}

void CpuInferenceModel::reserve(int N, size_t scores) {
  const size_t n = size_t(N);
  for (auto* v : {&x_, &ln_, &branch_, &last_}) grow(*v, n * C_);
  for (const auto& layer : layers_) grow(layer_acts_, layer->activation_size({N}));
  grow(scores_, scores);
}

const float* CpuInferenceModel::p(size_t offset) const {
  return offset == kAbsentTensor ? nullptr : params_.data() + offset;
}

void CpuInferenceModel::norm_rows(float* out, float* mean, float* rstd, const float* inp, size_t w, size_t b, int N) {
  cpu_norm_forward(config_, out, mean, rstd, inp, p(w), p(b), N);
}

AttentionCore<float>& CpuInferenceModel::attention_core(const LayerPlace& at) {
  core_.l_ = cache_layer_[size_t(at.layer)];
  return core_;
}

void CpuInferenceModel::attend(size_t l, std::span<const AppendRequest> requests, const AttentionActs<float>& a) {
  const std::vector<double> inv_freq = config_.uses_rope() ? config_.rope_inv_freq() : std::vector<double>{};
  size_t row = 0;
  for (const AppendRequest& r : requests) {
    const int n = static_cast<int>(r.tokens.size());
    const int first = lengths_[size_t(r.slot)];
    float* k = cache(k_cache_, l, r.slot);
    float* v = cache(v_cache_, l, r.slot);
    float* q = a.q + row * CQ_;
    for (int i = 0; i < n; ++i) {
      const float* qkv = a.qkv + (row + size_t(i)) * QKV_;
      std::memcpy(q + size_t(i) * CQ_, qkv, size_t(CQ_) * sizeof(float));
      std::memcpy(k + size_t(first + i) * KV_, qkv + CQ_, size_t(KV_) * sizeof(float));
      std::memcpy(v + size_t(first + i) * KV_, qkv + CQ_ + KV_, size_t(KV_) * sizeof(float));
    }
    if (config_.uses_rope()) {
      cpu::rope_forward_from(q, q, n, NH_, HS_, first, std::span<const double>(inv_freq));
      float* new_keys = k + size_t(first) * KV_;
      cpu::rope_forward_from(new_keys, new_keys, n, NKV_, HS_, first, std::span<const double>(inv_freq));
    }
    // A window reads only the last window-size + 1 positions; the cache keeps them all.
    cpu::attention_cached_forward(a.atty + row * CQ_, q, k, v, n, first, NH_, NKV_, HS_, scores_.data(),
                                  config_.attention_window());
    row += size_t(n);
  }
}

// Vocabulary-parallel: this rank's rows of the lookup (all of them without a group), zeros for
// the tokens of other ranks, summed over the group; then the (replicated) position embedding.
void CpuInferenceModel::embed(std::span<const AppendRequest> requests, int N) {
  const float* wte = p(w_.at(kNoLayer, TensorRole::word_embeddings));
  const float* wpe = p(w_.at(kNoLayer, TensorRole::position_embeddings));
  std::fill_n(x_.data(), size_t(N) * C_, 0.0f);
  size_t row = 0;
  for (const AppendRequest& r : requests)
    for (const int32_t t : r.tokens) {
      if (t >= V0_ && t < V0_ + Vp_) std::copy_n(wte + size_t(t - V0_) * C_, C_, x_.data() + row * C_);
      ++row;
    }
  sum_over_tp(x_.data(), size_t(N) * C_);
  if (!wpe) return;
  row = 0;
  for (const AppendRequest& r : requests)
    for (size_t i = 0; i < r.tokens.size(); ++i, ++row) {
      const float* pos = wpe + (size_t(lengths_[size_t(r.slot)]) + i) * C_;
      float* x = x_.data() + row * C_;
      for (int c = 0; c < C_; ++c) x[c] += pos[c];
    }
}

// Each rank's input columns times its weight columns is a part of the output; rank 0's part
// carries the (replicated) bias, so that the sum adds it once.
float* CpuInferenceModel::row_parallel_forward(const float* inp, size_t w, size_t b, int N, int in) {
  cpu::linear_forward(branch_.data(), inp, p(w), tp_rank_ == 0 ? p(b) : nullptr, N, in, C_);
  sum_over_tp(branch_.data(), size_t(N) * C_);
  return branch_.data();
}

// Each rank's vocabulary shard of the logits, gathered: rank r's columns [r * Vp, (r + 1) * Vp)
// of row i are row r * R + i of the gathered array. Only the real vocabulary's columns go out.
void CpuInferenceModel::output(float* logits, int R) {
  cpu::linear_forward(logits_.data(), ln_.data(), p(w_.output_weight()), nullptr, R, C_, Vp_);
  const float* all = logits_.data();
  if (tp_) {
    tp_->all_gather(gathered_.data(), logits_.data(), size_t(R) * Vp_);
    all = gathered_.data();
  }
  for (int r = 0; r < tp_size_; ++r) {
    const int first = r * Vp_, columns = std::clamp(V_ - first, 0, Vp_);
    for (int i = 0; i < R; ++i)
      std::copy_n(all + (size_t(r) * R + size_t(i)) * Vp_, columns, logits + size_t(i) * V_ + first);
  }
}

void CpuInferenceModel::sum_over_tp(float* data, size_t n) {
  if (tp_) tp_->all_reduce_sum(data, n);
}

void CpuInferenceModel::append(std::span<const AppendRequest> requests, float* logits) {
  default_queue_append();
  check_append(requests, lengths_, max_length_, V_);
  if (requests.empty()) return;
  int N = 0;
  size_t scores = 0;
  for (const AppendRequest& r : requests) {
    const size_t n = r.tokens.size();
    N += static_cast<int>(n);
    // attention_cached_forward's scratch: max(T, NH) rows of the keys (ops.hpp)
    scores = std::max(scores, std::max(n, size_t(NH_)) * (size_t(lengths_[size_t(r.slot)]) + n));
  }
  reserve(N, scores);

  embed(requests, N);
  // The layers' activations are scratch, the same for every layer: nothing here runs a backward.
  requests_ = requests;
  for (size_t l = 0; l < layers_.size(); ++l)
    layers_[l]->forward(*this, {w_.layer(int64_t(l)), int64_t(l), specs_[l].block}, {N}, layer_acts_.data(),
                        x_.data(), x_.data());
  requests_ = {};

  // The output layer on each request's last row only.
  const int R = static_cast<int>(requests.size());
  size_t row = 0;
  for (int i = 0; i < R; ++i) {
    row += requests[size_t(i)].tokens.size();
    std::memcpy(last_.data() + size_t(i) * C_, x_.data() + (row - 1) * C_, size_t(C_) * sizeof(float));
  }
  norm_rows(ln_.data(), nullptr, nullptr, last_.data(), w_.at(kNoLayer, TensorRole::final_norm_weight),
            w_.at(kNoLayer, TensorRole::final_norm_bias), R);
  output(logits, R);

  for (const AppendRequest& r : requests) lengths_[size_t(r.slot)] += static_cast<int>(r.tokens.size());
}

}  // namespace meg
