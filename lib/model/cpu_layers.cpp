// The CPU layers (see cpu_layers.hpp): the attention and MLP kinds, and the registry of kinds.
#include "model/cpu_layers.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.hpp"
#include "model/layer_spec.hpp"
#include "moe/cpu_moe_layer.hpp"

namespace meg {

namespace {

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

// The residual add of a branch over the stream's rows.
template <typename F>
void residual_add(F* out, const F* x, const F* branch, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + branch[i];
}

// The start of a pre-norm branch: LN = norm(X) (all N rows), OUT = LN @ W^T + B, the product
// column-parallel (this rank's OC columns).
template <typename F>
void norm_linear_forward(CpuLayerPath<F>& path, F* ln, F* mean, F* rstd, F* out, const F* x, size_t norm_w,
                         size_t norm_b, size_t w, size_t b, int N, int C, int OC) {
  path.norm_rows(ln, mean, rstd, x, norm_w, norm_b, N);
  cpu::linear_forward(out, ln, path.p(w), path.p(b), N, C, OC);
}

// Its backward: from DOUT, the gradient of OUT, the weights' gradients and X's, added to DRES
// (DLN is scratch of N x C).
template <typename F>
void norm_linear_backward(CpuTrainingPath<F>& path, F* dln, const F* dout, const F* ln, const F* mean,
                          const F* rstd, const F* x, size_t norm_w, size_t norm_b, size_t w, size_t b, int N, int C,
                          int OC, F* dres) {
  zero(dln, size_t(N) * size_t(C));
  cpu::linear_backward(dln, path.g(w), path.g(b), dout, ln, path.p(w), N, C, OC);
  path.norm_backward(dres, path.exit_tp(dln, N), x, norm_w, norm_b, mean, rstd, int(path.rows(N)));
}

// The end of a branch: OUT = X + dropout(INP @ W^T + B), the product row-parallel (INP this
// rank's IN columns), over the stream's rows.
template <typename F>
void residual_branch_forward(CpuLayerPath<F>& path, const F* inp, size_t w, size_t b, int N, int in, int C,
                             uint64_t site, const F* x, F* out) {
  F* branch = path.row_parallel_forward(inp, w, b, N, in);
  path.hidden_dropout(branch, N, site);
  residual_add(out, x, branch, path.rows(N) * size_t(C));
}

// qk-layernorm: the RMSNorm (weights WQ for the NH query heads, WK for the NKV key heads, of HS
// each) of every head of the q and k columns of QKV [N, QKV], in place, keeping the columns as
// they were in RAW [N, CQ + KV] and the heads' rstd in RSTD [N, NH + NKV].
template <typename F>
void qk_norm_forward(F* qkv, F* raw, F* rstd, const F* wq, const F* wk, const LayerDims& d, F eps) {
  const size_t N = size_t(d.N), QK = size_t(d.CQ + d.KV), heads = size_t(d.NH + d.NKV);
  gather_cols(raw, qkv, N, size_t(d.QKV), 0, QK);
  for (size_t n = 0; n < N; ++n) {
    F* row = qkv + n * size_t(d.QKV);
    const F* in = raw + n * QK;
    cpu::rmsnorm_forward(row, rstd + n * heads, in, wq, d.NH, d.HS, eps);
    cpu::rmsnorm_forward(row + d.CQ, rstd + n * heads + d.NH, in + d.CQ, wk, d.NKV, d.HS, eps);
  }
}

// Its backward: DQKV's q and k columns, the gradient of the normalised ones, become the raw
// columns' (DRAW [N, CQ + KV] is scratch); the weights' gradients are added to DWQK [2 HS]: the
// query norm's, then the key norm's (this rank's heads only).
template <typename F>
void qk_norm_backward(F* dqkv, F* draw, F* dwqk, const F* raw, const F* rstd, const F* wq, const F* wk,
                      const LayerDims& d) {
  const size_t N = size_t(d.N), QK = size_t(d.CQ + d.KV), heads = size_t(d.NH + d.NKV);
  zero(draw, N * QK);
  for (size_t n = 0; n < N; ++n) {
    const F* dout = dqkv + n * size_t(d.QKV);
    const F* in = raw + n * QK;
    F* din = draw + n * QK;
    cpu::rmsnorm_backward(din, dwqk, dout, in, wq, rstd + n * heads, d.NH, d.HS);
    cpu::rmsnorm_backward(din + d.CQ, dwqk + d.HS, dout + d.CQ, in + d.CQ, wk, rstd + n * heads + d.NH, d.NKV,
                          d.HS);
  }
  scatter_cols(dqkv, static_cast<const F*>(draw), N, size_t(d.QKV), 0, QK);
}

}  // namespace

template <typename F>
void cpu_norm_forward(const ModelConfig& config, F* out, F* mean, F* rstd, const F* inp, const F* w, const F* b,
                      int N) {
  const int C = static_cast<int>(config.hidden_size);
  const F eps = static_cast<F>(config.norm_eps);
  if (config.norm == NormKind::layernorm)
    cpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
  else
    cpu::rmsnorm_forward(out, rstd, inp, w, N, C, eps);
}

template <typename F>
void CausalAttention<F>::forward(AttentionActs<F>& a, const LayerDims& d) {
  const size_t N = size_t(d.N);
  gather_cols(a.q, a.qkv, N, size_t(d.QKV), 0, size_t(d.CQ));
  gather_cols(a.k, a.qkv, N, size_t(d.QKV), size_t(d.CQ), size_t(d.KV));
  gather_cols(a.v, a.qkv, N, size_t(d.QKV), size_t(d.CQ + d.KV), size_t(d.KV));
  if (!inv_freq_.empty()) {
    cpu::rope_forward(a.q, a.q, B_, T_, d.NH, d.HS, inv_freq_);
    cpu::rope_forward(a.k, a.k, B_, T_, d.NKV, d.HS, inv_freq_);
  }
  cpu::attention_forward(a.atty, a.att, a.q, a.k, a.v, B_, T_, d.NH, d.NKV, d.HS, p_, key_, window_);
}

template <typename F>
void CausalAttention<F>::backward(const AttentionActs<F>& a, const AttentionGrads<F>& s,
                                  const LayerDims& d) const {
  const size_t n = size_t(d.N), NC = n * size_t(d.CQ), nkv = n * size_t(d.KV);
  zero(s.dq, NC);
  zero(s.dk, nkv);
  zero(s.dv, nkv);
  cpu::attention_backward(s.dq, s.dk, s.dv, s.datty, a.q, a.k, a.v, a.att, B_, T_, d.NH, d.NKV, d.HS, p_, key_,
                          window_);
  const F* dq = s.dq;
  const F* dk = s.dk;
  if (!inv_freq_.empty()) {
    zero(s.dqr, NC);
    zero(s.dkr, nkv);
    cpu::rope_backward(s.dqr, s.dq, B_, T_, d.NH, d.HS, inv_freq_);
    cpu::rope_backward(s.dkr, s.dk, B_, T_, d.NKV, d.HS, inv_freq_);
    dq = s.dqr;
    dk = s.dkr;
  }
  scatter_cols(s.dqkv, dq, n, size_t(d.QKV), 0, size_t(d.CQ));
  scatter_cols(s.dqkv, dk, n, size_t(d.QKV), size_t(d.CQ), size_t(d.KV));
  scatter_cols(s.dqkv, static_cast<const F*>(s.dv), n, size_t(d.QKV), size_t(d.CQ + d.KV), size_t(d.KV));
}

namespace {

// A layer whose activations and backward scratch are structs of pointers (ACTS, GRADS) carved out
// of the model's buffers: their sizes are those of the carving.
template <typename F, typename Acts, typename Grads>
class CarvedCpuLayer : public CpuLayer<F> {
 public:
  CarvedCpuLayer(const ModelConfig& config, int tp_size) : config_(config), tp_size_(tp_size) {}
  size_t activation_size(const CpuRows& rows) const final {
    Carver<F> c(nullptr);
    acts(c, rows);
    return c.used();
  }
  size_t scratch_size(int N) const final {
    Carver<F> c(nullptr);
    grads(c, N);
    return c.used();
  }

 protected:
  virtual Acts acts(Carver<F>& c, const CpuRows& rows) const = 0;
  virtual Grads grads(Carver<F>& c, int N) const = 0;
  // This rank's sizes over N rows.
  LayerDims dims(int N) const { return layer_dims(config_, tp_size_, N); }
  const ModelConfig& config() const { return config_; }

 private:
  ModelConfig config_;
  int tp_size_;
};

// The attention layer: OUT = X + dropout(proj(core(qkv(norm(X))))), over the stream's rows.
template <typename F>
class CpuAttentionLayer final : public CarvedCpuLayer<F, AttentionActs<F>, AttentionGrads<F>> {
 public:
  using CarvedCpuLayer<F, AttentionActs<F>, AttentionGrads<F>>::CarvedCpuLayer;

  void forward(CpuLayerPath<F>& path, const LayerPlace& at, const CpuRows& rows, F* acts_base, const F* x,
               F* out) const override {
    using enum TensorRole;
    const LayerTensors& t = at.tensors;
    const LayerDims d = this->dims(rows.N);
    Carver<F> c(acts_base);
    AttentionActs<F> a = this->acts(c, rows);
    norm_linear_forward(path, a.ln, a.ln_mean, a.ln_rstd, a.qkv, x, t[norm_weight], t[norm_bias], t[qkv_weight],
                        t[qkv_bias], d.N, d.C, d.QKV);
    if (this->config().qk_layernorm)
      qk_norm_forward(a.qkv, a.qk_raw, a.qk_rstd, path.p(t[q_norm_weight]), path.p(t[k_norm_weight]), d,
                      static_cast<F>(this->config().norm_eps));
    path.attention_core(at).forward(a, d);
    residual_branch_forward(path, a.atty, t[proj_weight], t[proj_bias], d.N, d.CQ, d.C,
                            block_dropout_sites(at.block) + 2, x, out);
  }

  void backward(CpuTrainingPath<F>& path, const LayerPlace& at, const CpuRows& rows, F* acts_base, F* scratch,
                const F* x, F* dres) const override {
    using enum TensorRole;
    const LayerTensors& t = at.tensors;
    const LayerDims d = this->dims(rows.N);
    Carver<F> c(acts_base), cs(scratch);
    const AttentionActs<F> a = this->acts(c, rows);
    const AttentionGrads<F> s = this->grads(cs, rows.N);
    const F* dbranch = path.branch_grad(dres, d.N, block_dropout_sites(at.block) + 2);
    zero(s.datty, size_t(d.N) * size_t(d.CQ));
    cpu::linear_backward(s.datty, path.g(t[proj_weight]), path.g(t[proj_bias]), dbranch, a.atty,
                         path.p(t[proj_weight]), d.N, d.CQ, d.C);
    path.causal_attention(at).backward(a, s, d);
    if (this->config().qk_layernorm) {
      const size_t HS = size_t(d.HS);
      zero(s.dqk_norm, 2 * HS);
      qk_norm_backward(s.dqkv, s.dqk_raw, s.dqk_norm, a.qk_raw, a.qk_rstd, path.p(t[q_norm_weight]),
                       path.p(t[k_norm_weight]), d);
      path.sum_over_heads(s.dqk_norm, 2 * HS);
      F* gq = path.g(t[q_norm_weight]);
      F* gk = path.g(t[k_norm_weight]);
      for (size_t i = 0; i < HS; ++i) {
        gq[i] += s.dqk_norm[i];
        gk[i] += s.dqk_norm[HS + i];
      }
    }
    norm_linear_backward(path, s.dln, s.dqkv, a.ln, a.ln_mean, a.ln_rstd, x, t[norm_weight], t[norm_bias],
                         t[qkv_weight], t[qkv_bias], d.N, d.C, d.QKV, dres);
  }

 private:
  // The activations over ROWS, with the attention probabilities in training.
  AttentionActs<F> acts(Carver<F>& c, const CpuRows& rows) const override {
    const LayerDims d = this->dims(rows.N);
    const size_t N = size_t(d.N), C = size_t(d.C), CQ = size_t(d.CQ), KV = size_t(d.KV);
    const size_t scores = rows.training() ? size_t(rows.B) * size_t(d.NH) * size_t(rows.T) * size_t(rows.T) : 0;
    const bool qk_norm = this->config().qk_layernorm;
    AttentionActs<F> a;
    a.ln = c.take(N * C);
    a.ln_mean = c.take(N);
    a.ln_rstd = c.take(N);
    a.qkv = c.take(N * size_t(d.QKV));
    a.qk_raw = qk_norm ? c.take(N * (CQ + KV)) : nullptr;
    a.qk_rstd = qk_norm ? c.take(N * size_t(d.NH + d.NKV)) : nullptr;
    a.q = c.take(N * CQ);
    a.k = c.take(N * KV);
    a.v = c.take(N * KV);
    a.att = c.take(scores);
    a.atty = c.take(N * CQ);
    return a;
  }
  AttentionGrads<F> grads(Carver<F>& c, int n) const override {
    const LayerDims d = this->dims(n);
    const size_t N = size_t(d.N), C = size_t(d.C), CQ = size_t(d.CQ), KV = size_t(d.KV);
    const bool qk_norm = this->config().qk_layernorm;
    AttentionGrads<F> s;
    s.dln = c.take(N * C);
    s.dqkv = c.take(N * size_t(d.QKV));
    s.dq = c.take(N * CQ);
    s.dk = c.take(N * KV);
    s.dv = c.take(N * KV);
    s.dqr = c.take(N * CQ);
    s.dkr = c.take(N * KV);
    s.datty = c.take(N * CQ);
    s.dqk_raw = qk_norm ? c.take(N * (CQ + KV)) : nullptr;
    s.dqk_norm = qk_norm ? c.take(2 * size_t(d.HS)) : nullptr;
    return s;
  }
};

// The MLP layer's activations and backward scratch.
template <typename F>
struct MlpActs {
  F *ln, *ln_mean, *ln_rstd, *fc1, *act;
};
template <typename F>
struct MlpGrads {
  F *dln, *dact, *dfc1;
};

// The MLP layer: OUT = X + dropout(fc2(act(fc1(norm(X))))).
template <typename F>
class CpuMlpLayer final : public CarvedCpuLayer<F, MlpActs<F>, MlpGrads<F>> {
 public:
  using CarvedCpuLayer<F, MlpActs<F>, MlpGrads<F>>::CarvedCpuLayer;

  void forward(CpuLayerPath<F>& path, const LayerPlace& at, const CpuRows& rows, F* acts_base, const F* x,
               F* out) const override {
    using enum TensorRole;
    const LayerTensors& t = at.tensors;
    const LayerDims d = this->dims(rows.N);
    Carver<F> c(acts_base);
    const Acts a = this->acts(c, rows);
    norm_linear_forward(path, a.ln, a.ln_mean, a.ln_rstd, a.fc1, x, t[norm_weight], t[norm_bias], t[fc1_weight],
                        t[fc1_bias], d.N, d.C, d.FC);
    if (d.activation == Activation::swiglu)
      cpu::swiglu_forward(a.act, a.fc1, d.N, d.Fh);
    else
      cpu::gelu_forward(a.act, a.fc1, size_t(d.N) * size_t(d.Fh));
    residual_branch_forward(path, a.act, t[fc2_weight], t[fc2_bias], d.N, d.Fh, d.C, block_dropout_sites(at.block) + 3,
                            x, out);
  }

  void backward(CpuTrainingPath<F>& path, const LayerPlace& at, const CpuRows& rows, F* acts_base, F* scratch,
                const F* x, F* dres) const override {
    using enum TensorRole;
    const LayerTensors& t = at.tensors;
    const LayerDims d = this->dims(rows.N);
    Carver<F> c(acts_base), cs(scratch);
    const Acts a = this->acts(c, rows);
    const Grads s = this->grads(cs, rows.N);
    const size_t n = size_t(d.N);
    const F* dbranch = path.branch_grad(dres, d.N, block_dropout_sites(at.block) + 3);
    zero(s.dact, n * size_t(d.Fh));
    cpu::linear_backward(s.dact, path.g(t[fc2_weight]), path.g(t[fc2_bias]), dbranch, a.act, path.p(t[fc2_weight]),
                         d.N, d.Fh, d.C);
    zero(s.dfc1, n * size_t(d.FC));
    if (d.activation == Activation::swiglu)
      cpu::swiglu_backward(s.dfc1, s.dact, a.fc1, d.N, d.Fh);
    else
      cpu::gelu_backward(s.dfc1, s.dact, a.fc1, n * size_t(d.Fh));
    norm_linear_backward(path, s.dln, s.dfc1, a.ln, a.ln_mean, a.ln_rstd, x, t[norm_weight], t[norm_bias],
                         t[fc1_weight], t[fc1_bias], d.N, d.C, d.FC, dres);
  }

 private:
  using Acts = MlpActs<F>;
  using Grads = MlpGrads<F>;
  Acts acts(Carver<F>& c, const CpuRows& rows) const override {
    const LayerDims d = this->dims(rows.N);
    const size_t N = size_t(d.N);
    Acts a;
    a.ln = c.take(N * size_t(d.C));
    a.ln_mean = c.take(N);
    a.ln_rstd = c.take(N);
    a.fc1 = c.take(N * size_t(d.FC));
    a.act = c.take(N * size_t(d.Fh));
    return a;
  }
  Grads grads(Carver<F>& c, int n) const override {
    const LayerDims d = this->dims(n);
    const size_t N = size_t(d.N);
    Grads s;
    s.dln = c.take(N * size_t(d.C));
    s.dact = c.take(N * size_t(d.Fh));
    s.dfc1 = c.take(N * size_t(d.FC));
    return s;
  }
};

template <template <typename> class Layer, typename F>
std::unique_ptr<CpuLayer<F>> make(const ModelConfig& config, int tp_size) {
  return std::make_unique<Layer<F>>(config, tp_size);
}

struct CpuFactories {
  CpuLayerFactory<float> make_float;
  CpuLayerFactory<double> make_double;
  template <typename F>
  const CpuLayerFactory<F>& get() const {
    if constexpr (std::is_same_v<F, float>) return make_float;
    else return make_double;
  }
};

std::map<char, CpuFactories>& cpu_registry() {
  static std::map<char, CpuFactories> kinds = {
      {LayerKind::attention, {make<CpuAttentionLayer, float>, make<CpuAttentionLayer, double>}},
      {LayerKind::mlp, {make<CpuMlpLayer, float>, make<CpuMlpLayer, double>}},
      {LayerKind::moe, {make_cpu_moe_layer<float>, make_cpu_moe_layer<double>}},
  };
  return kinds;
}

}  // namespace

void register_cpu_layer(char symbol, CpuLayerFactory<float> make_float, CpuLayerFactory<double> make_double) {
  if (!cpu_registry().emplace(symbol, CpuFactories{std::move(make_float), std::move(make_double)}).second)
    throw std::logic_error(std::string("layer kind '") + symbol + "' has a CPU implementation already");
}

template <typename F>
std::vector<std::unique_ptr<CpuLayer<F>>> make_cpu_layers(const ModelConfig& config, int tp_size, int64_t begin,
                                                          int64_t end) {
  const std::vector<LayerSpec> specs = config.layers();
  std::vector<std::unique_ptr<CpuLayer<F>>> layers;
  for (int64_t l = begin; l < end; ++l) {
    const char kind = specs.at(size_t(l)).kind;
    const auto it = cpu_registry().find(kind);
    if (it == cpu_registry().end())
      input_error("model config: the {} layer '{}' has no CPU implementation", layer_kind(kind).name, kind);
    layers.push_back(it->second.get<F>()(config, tp_size));
  }
  return layers;
}

#define MEG_CPU_LAYERS(F)                                                                                  \
  template void cpu_norm_forward<F>(const ModelConfig&, F*, F*, F*, const F*, const F*, const F*, int);   \
  template class CausalAttention<F>;                                                                       \
  template std::vector<std::unique_ptr<CpuLayer<F>>> make_cpu_layers<F>(const ModelConfig&, int, int64_t,  \
                                                                        int64_t);
MEG_CPU_LAYERS(float)
MEG_CPU_LAYERS(double)
#undef MEG_CPU_LAYERS

}  // namespace meg
