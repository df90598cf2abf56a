// GptModel: the decoder-only language model on the CPU (see gpt.hpp for the layout and names).
#include "model/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include "core/error.hpp"
#include "ops/cpu/ops.hpp"

namespace meg {

namespace {

constexpr size_t kAbsent = static_cast<size_t>(-1);

// Appends tensors to the table with contiguous offsets; add() returns the new tensor's offset.
struct TableBuilder {
  std::vector<ParamTensor> tensors;
  size_t next = 0;

  size_t add(std::string name, std::vector<int64_t> shape, bool decay, ParamInit init) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    ParamTensor t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.offset = next;
    t.numel = n;
    t.weight_decay = decay;
    t.init = init;
    tensors.push_back(std::move(t));
    next += n;
    return next - n;
  }
};

struct Offsets {
  size_t wte = 0, wpe = kAbsent, lnf_w = 0, lnf_b = kAbsent, out_w = 0;
  struct Layer {
    size_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };
  std::vector<Layer> layers;
};

std::vector<ParamTensor> build_table(const ModelConfig& c, Offsets* off) {
  const int64_t C = c.hidden_size, F = c.ffn_hidden_size, Vp = c.padded_vocab_size;
  const int64_t QKV = C + 2 * c.num_kv_heads * c.head_size();
  const int64_t FC = (c.activation == Activation::swiglu ? 2 : 1) * F;
  const bool ln = c.norm == NormKind::layernorm;
  const bool bias = c.use_bias;
  TableBuilder b;
  Offsets o;

  auto norm = [&](const std::string& prefix, size_t* w, size_t* bb) {
    *w = b.add(prefix + ".weight", {C}, false, ParamInit::ones);
    *bb = ln ? b.add(prefix + ".bias", {C}, false, ParamInit::zeros) : kAbsent;
  };
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in, ParamInit init, size_t* w,
                    size_t* bb) {
    *w = b.add(prefix + ".weight", {out, in}, true, init);
    *bb = bias ? b.add(prefix + ".bias", {out}, false, ParamInit::zeros) : kAbsent;
  };

  o.wte = b.add("embedding.word_embeddings.weight", {Vp, C}, true, ParamInit::normal);
  if (c.learned_positions())
    o.wpe = b.add("embedding.position_embeddings.weight", {c.seq_length, C}, true,
                  ParamInit::normal);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string pre = "decoder.layers." + std::to_string(l) + ".";
    Offsets::Layer L{};
    norm(pre + "input_layernorm", &L.ln1_w, &L.ln1_b);
    linear(pre + "self_attention.linear_qkv", QKV, C, ParamInit::normal, &L.qkv_w, &L.qkv_b);
    linear(pre + "self_attention.linear_proj", C, C, ParamInit::normal_scaled, &L.proj_w,
           &L.proj_b);
    norm(pre + "pre_mlp_layernorm", &L.ln2_w, &L.ln2_b);
    linear(pre + "mlp.linear_fc1", FC, C, ParamInit::normal, &L.fc1_w, &L.fc1_b);
    linear(pre + "mlp.linear_fc2", C, F, ParamInit::normal_scaled, &L.fc2_w, &L.fc2_b);
    o.layers.push_back(L);
  }
  norm("decoder.final_layernorm", &o.lnf_w, &o.lnf_b);
  o.out_w = c.tie_embeddings ? o.wte
                             : b.add("output_layer.weight", {Vp, C}, true, ParamInit::normal);
  if (off) *off = std::move(o);
  return std::move(b.tensors);
}

// Deterministic standard normals: mt19937_64 and Box-Muller (both values of each pair used).
class NormalGen {
 public:
  explicit NormalGen(uint64_t seed) : rng_(seed) {}
  double operator()() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(kTwoPi * u2);
    have_spare_ = true;
    return r * std::cos(kTwoPi * u2);
  }

 private:
  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }  // [0, 1)
  std::mt19937_64 rng_;
  double spare_ = 0;
  bool have_spare_ = false;
};

// Copies columns [col, col + width) of rows of a [N, stride] array into a contiguous [N, width].
template <typename F>
void gather_cols(F* dst, const F* src, size_t N, size_t stride, size_t col, size_t width) {
  for (size_t i = 0; i < N; ++i) std::memcpy(dst + i * width, src + i * stride + col, width * sizeof(F));
}

// The inverse: writes a contiguous [N, width] into columns [col, col + width) of [N, stride].
template <typename F>
void scatter_cols(F* dst, const F* src, size_t N, size_t stride, size_t col, size_t width) {
  for (size_t i = 0; i < N; ++i) std::memcpy(dst + i * stride + col, src + i * width, width * sizeof(F));
}

template <typename F>
void zero(F* a, size_t n) {
  std::fill(a, a + n, F(0));
}

}  // namespace

std::vector<ParamTensor> gpt_parameter_table(const ModelConfig& config) {
  return build_table(config, nullptr);
}

template <typename F>
GptModel<F>::GptModel(const ModelConfig& config) : config_(config) {
  config_.validate();
  Offsets o;
  tensors_ = build_table(config_, &o);
  wte_ = o.wte;
  wpe_ = o.wpe;
  lnf_w_ = o.lnf_w;
  lnf_b_ = o.lnf_b;
  out_w_ = o.out_w;
  for (const auto& L : o.layers)
    layers_.push_back({L.ln1_w, L.ln1_b, L.qkv_w, L.qkv_b, L.proj_w, L.proj_b, L.ln2_w, L.ln2_b,
                       L.fc1_w, L.fc1_b, L.fc2_w, L.fc2_b});
  const size_t n = tensors_.empty() ? 0 : tensors_.back().offset + tensors_.back().numel;
  params_.assign(n, F(0));
  grads_.assign(n, F(0));
}

template <typename F>
const ParamTensor& GptModel<F>::tensor(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t;
  throw std::out_of_range("GptModel: no parameter tensor named '" + name + "'");
}

template <typename F>
void gpt_init_parameters(const ModelConfig& config, const std::vector<ParamTensor>& tensors, uint64_t seed,
                         F* params) {
  NormalGen normal(seed);
  const double std0 = config.init_std;
  const double std_scaled = std0 / std::sqrt(2.0 * static_cast<double>(config.num_layers));
  for (const auto& t : tensors) {
    F* w = params + t.offset;
    switch (t.init) {
      case ParamInit::zeros: std::fill(w, w + t.numel, F(0)); break;
      case ParamInit::ones: std::fill(w, w + t.numel, F(1)); break;
      case ParamInit::normal:
      case ParamInit::normal_scaled: {
        const double s = t.init == ParamInit::normal ? std0 : std_scaled;
        for (size_t i = 0; i < t.numel; ++i) w[i] = static_cast<F>(s * normal());
        break;
      }
    }
  }
}
template void gpt_init_parameters<float>(const ModelConfig&, const std::vector<ParamTensor>&, uint64_t, float*);
template void gpt_init_parameters<double>(const ModelConfig&, const std::vector<ParamTensor>&, uint64_t, double*);

template <typename F>
void GptModel<F>::init(uint64_t seed) {
  gpt_init_parameters(config_, tensors_, seed, params_.data());
}

template <typename F>
void GptModel<F>::zero_grad() {
  std::fill(grads_.begin(), grads_.end(), F(0));
}

template <typename F>
void GptModel<F>::allocate_activations(int B, int T) {
  const Dims d = dims(B, T);
  const size_t N = size_t(d.N), C = size_t(d.C), NH = size_t(d.NH), KV = size_t(d.KV), QKV = size_t(d.QKV),
               Fh = size_t(d.Fh), FC = size_t(d.FC), Vp = size_t(d.Vp);
  const size_t L = static_cast<size_t>(config_.num_layers);
  const size_t BTT = static_cast<size_t>(B) * NH * static_cast<size_t>(T) * static_cast<size_t>(T);

  // Two passes over the same carving: the first (base null) only counts.
  auto carve = [&](F* base) {
    size_t used = 0;
    auto take = [&](size_t n) {
      F* ptr = base ? base + used : nullptr;
      used += n;
      return ptr;
    };
    la_.assign(L, LayerActs{});
    res_.assign(L + 1, nullptr);
    res_[0] = take(N * C);
    for (size_t l = 0; l < L; ++l) {
      LayerActs& a = la_[l];
      a.ln1 = take(N * C);
      a.ln1_mean = take(N);
      a.ln1_rstd = take(N);
      a.qkv = take(N * QKV);
      a.q = take(N * C);
      a.k = take(N * KV);
      a.v = take(N * KV);
      a.att = take(BTT);
      a.atty = take(N * C);
      a.mid = take(N * C);
      a.ln2 = take(N * C);
      a.ln2_mean = take(N);
      a.ln2_rstd = take(N);
      a.fc1 = take(N * FC);
      a.act = take(N * Fh);
      res_[l + 1] = take(N * C);
    }
    lnf_ = take(N * C);
    lnf_mean_ = take(N);
    lnf_rstd_ = take(N);
    logits_ = take(N * Vp);
    losses_ = take(N);
    scratch_ = take(N * C);
    dres_ = take(N * C);
    dln_ = take(N * C);
    dqkv_ = take(N * QKV);
    dq_ = take(N * C);
    dk_ = take(N * KV);
    dv_ = take(N * KV);
    dqr_ = take(N * C);
    dkr_ = take(N * KV);
    datty_ = take(N * C);
    dfc1_ = take(N * FC);
    dact_ = take(N * Fh);
    dlogits_ = take(N * Vp);
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
void GptModel<F>::norm_forward(F* out, F* mean, F* rstd, const F* inp, size_t w, size_t b, int N) {
  const int C = static_cast<int>(config_.hidden_size);
  const F eps = static_cast<F>(config_.norm_eps);
  if (config_.norm == NormKind::layernorm)
    cpu::layernorm_forward(out, mean, rstd, inp, p(w), p(b), N, C, eps);
  else
    cpu::rmsnorm_forward(out, rstd, inp, p(w), N, C, eps);
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
  Dims d;
  d.N = B * T;
  d.C = static_cast<int>(config_.hidden_size);
  d.NH = static_cast<int>(config_.num_heads);
  d.NKV = static_cast<int>(config_.num_kv_heads);
  d.HS = static_cast<int>(config_.head_size());
  d.KV = d.NKV * d.HS;
  d.QKV = d.C + 2 * d.KV;
  d.Fh = static_cast<int>(config_.ffn_hidden_size);
  d.FC = (config_.activation == Activation::swiglu ? 2 : 1) * d.Fh;
  d.V = static_cast<int>(config_.vocab_size);
  d.Vp = static_cast<int>(config_.padded_vocab_size);
  d.NC = static_cast<size_t>(d.N) * static_cast<size_t>(d.C);
  return d;
}

template <typename F>
double GptModel<F>::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  if (B <= 0 || T <= 0) input_error("model forward: batch {} x sequence {} must be positive", B, T);
  if (config_.learned_positions() && T > config_.seq_length)
    input_error("model forward: sequence length {} exceeds the {} learned positions", T,
                config_.seq_length);
  allocate_activations(B, T);
  const auto [N, C, NH, NKV, HS, KV, QKV, Fh, FC, V, Vp, NC] = dims(B, T);
  const F theta = static_cast<F>(config_.rope_theta);

  have_targets_ = false;  // set only once a forward with targets has succeeded
  tokens_.assign(tokens, tokens + N);
  if (targets) targets_.assign(targets, targets + N);
  fwd_hidden_p_ = training_ ? config_.hidden_dropout : 0.0;
  fwd_attn_p_ = training_ ? config_.attention_dropout : 0.0;
  fwd_seed_ = drop_seed_;
  fwd_step_ = drop_step_;
  fwd_micro_ = drop_micro_;
  const double hp = fwd_hidden_p_, ap = fwd_attn_p_;
  auto key = [&](uint64_t site) { return cpu::DropoutKey{fwd_seed_, fwd_step_, fwd_micro_, site}; };

  cpu::embedding_forward(res_[0], tokens, p(wte_), p(wpe_), B, T, C, V);
  if (hp > 0) cpu::dropout_forward(res_[0], res_[0], NC, hp, key(0));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerOffsets& w = layers_[l];
    LayerActs& a = la_[l];
    const F* x = res_[l];
    norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, N);
    cpu::linear_forward(a.qkv, a.ln1, p(w.qkv_w), p(w.qkv_b), N, C, QKV);
    gather_cols(a.q, a.qkv, N, QKV, 0, C);
    gather_cols(a.k, a.qkv, N, QKV, C, KV);
    gather_cols(a.v, a.qkv, N, QKV, C + KV, KV);
    if (config_.uses_rope()) {
      cpu::rope_forward(a.q, a.q, B, T, NH, HS, theta);
      cpu::rope_forward(a.k, a.k, B, T, NKV, HS, theta);
    }
    const uint64_t site = 3 * static_cast<uint64_t>(l);
    if (ap > 0)
      cpu::attention_forward(a.atty, a.att, a.q, a.k, a.v, B, T, NH, NKV, HS, ap, key(site + 1));
    else
      cpu::attention_forward(a.atty, a.att, a.q, a.k, a.v, B, T, NH, NKV, HS);
    cpu::linear_forward(scratch_, a.atty, p(w.proj_w), p(w.proj_b), N, C, C);
    if (hp > 0) cpu::dropout_forward(scratch_, scratch_, NC, hp, key(site + 2));
    for (size_t i = 0; i < NC; ++i) a.mid[i] = x[i] + scratch_[i];
    norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.mid, w.ln2_w, w.ln2_b, N);
    cpu::linear_forward(a.fc1, a.ln2, p(w.fc1_w), p(w.fc1_b), N, C, FC);
    if (config_.activation == Activation::swiglu)
      cpu::swiglu_forward(a.act, a.fc1, N, Fh);
    else
      cpu::gelu_forward(a.act, a.fc1, static_cast<size_t>(N) * static_cast<size_t>(Fh));
    cpu::linear_forward(scratch_, a.act, p(w.fc2_w), p(w.fc2_b), N, Fh, C);
    if (hp > 0) cpu::dropout_forward(scratch_, scratch_, NC, hp, key(site + 3));
    F* out = res_[l + 1];
    for (size_t i = 0; i < NC; ++i) out[i] = a.mid[i] + scratch_[i];
  }
  norm_forward(lnf_, lnf_mean_, lnf_rstd_, res_[layers_.size()], lnf_w_, lnf_b_, N);
  cpu::linear_forward(logits_, lnf_, p(out_w_), nullptr, N, C, Vp);
  if (!targets) {
    zero(losses_, static_cast<size_t>(N));
    return 0.0;
  }
  const double loss = cpu::cross_entropy_forward(losses_, logits_, targets, N, V, Vp);
  have_targets_ = true;
  return loss;
}

template <typename F>
void GptModel<F>::backward() {
  if (!have_targets_ || B_ == 0)
    throw std::logic_error("GptModel::backward: the last forward had no targets");
  const int B = B_, T = T_;
  const auto [N, C, NH, NKV, HS, KV, QKV, Fh, FC, V, Vp, NC] = dims(B, T);
  const F theta = static_cast<F>(config_.rope_theta);
  const size_t n = static_cast<size_t>(N);
  const double hp = fwd_hidden_p_, ap = fwd_attn_p_;
  auto key = [&](uint64_t site) { return cpu::DropoutKey{fwd_seed_, fwd_step_, fwd_micro_, site}; };

  // Loss and output layer (for tied embeddings, g(out_w_) is the embedding's gradient).
  cpu::cross_entropy_backward(dlogits_, logits_, targets_.data(), N, V, Vp);
  zero(dln_, NC);
  cpu::linear_backward(dln_, g(out_w_), nullptr, dlogits_, lnf_, p(out_w_), N, C, Vp);
  zero(dres_, NC);
  norm_backward(dres_, dln_, res_[layers_.size()], lnf_w_, lnf_b_, lnf_mean_, lnf_rstd_, N);

  // dres_ holds the gradient of the residual stream, flowing down through the blocks.
  for (size_t l = layers_.size(); l-- > 0;) {
    const LayerOffsets& w = layers_[l];
    const LayerActs& a = la_[l];
    const uint64_t site = 3 * static_cast<uint64_t>(l);
    // With hidden dropout, the gradient of a branch output is dres_ through the branch's mask
    // (in scratch_); the residual path takes dres_ itself.
    const F* dbranch = dres_;
    // MLP: out = mid + dropout(fc2(act(fc1(norm2(mid))))).
    if (hp > 0) {
      cpu::dropout_forward(scratch_, dres_, NC, hp, key(site + 3));
      dbranch = scratch_;
    }
    zero(dact_, n * static_cast<size_t>(Fh));
    cpu::linear_backward(dact_, g(w.fc2_w), g(w.fc2_b), dbranch, a.act, p(w.fc2_w), N, Fh, C);
    zero(dfc1_, n * static_cast<size_t>(FC));
    if (config_.activation == Activation::swiglu)
      cpu::swiglu_backward(dfc1_, dact_, a.fc1, N, Fh);
    else
      cpu::gelu_backward(dfc1_, dact_, a.fc1, n * static_cast<size_t>(Fh));
    zero(dln_, NC);
    cpu::linear_backward(dln_, g(w.fc1_w), g(w.fc1_b), dfc1_, a.ln2, p(w.fc1_w), N, C, FC);
    norm_backward(dres_, dln_, a.mid, w.ln2_w, w.ln2_b, a.ln2_mean, a.ln2_rstd, N);
    // Attention: mid = x + dropout(proj(attention(split(qkv(norm1(x)))))).
    if (hp > 0) cpu::dropout_forward(scratch_, dres_, NC, hp, key(site + 2));
    zero(datty_, NC);
    cpu::linear_backward(datty_, g(w.proj_w), g(w.proj_b), dbranch, a.atty, p(w.proj_w), N, C, C);
    zero(dq_, NC);
    zero(dk_, n * static_cast<size_t>(KV));
    zero(dv_, n * static_cast<size_t>(KV));
    if (ap > 0)
      cpu::attention_backward(dq_, dk_, dv_, datty_, a.q, a.k, a.v, a.att, B, T, NH, NKV, HS, ap,
                              key(site + 1));
    else
      cpu::attention_backward(dq_, dk_, dv_, datty_, a.q, a.k, a.v, a.att, B, T, NH, NKV, HS);
    const F* dq = dq_;
    const F* dk = dk_;
    if (config_.uses_rope()) {
      zero(dqr_, NC);
      zero(dkr_, n * static_cast<size_t>(KV));
      cpu::rope_backward(dqr_, dq_, B, T, NH, HS, theta);
      cpu::rope_backward(dkr_, dk_, B, T, NKV, HS, theta);
      dq = dqr_;
      dk = dkr_;
    }
    scatter_cols(dqkv_, dq, n, QKV, 0, C);
    scatter_cols(dqkv_, dk, n, QKV, C, KV);
    scatter_cols(dqkv_, static_cast<const F*>(dv_), n, QKV, C + KV, KV);
    zero(dln_, NC);
    cpu::linear_backward(dln_, g(w.qkv_w), g(w.qkv_b), dqkv_, a.ln1, p(w.qkv_w), N, C, QKV);
    norm_backward(dres_, dln_, res_[l], w.ln1_w, w.ln1_b, a.ln1_mean, a.ln1_rstd, N);
  }
  if (hp > 0) cpu::dropout_forward(dres_, dres_, NC, hp, key(0));  // dres_ is not needed after
  cpu::embedding_backward(g(wte_), g(wpe_), dres_, tokens_.data(), B, T, C);
}

template class GptModel<float>;
template class GptModel<double>;

}  // namespace meg
