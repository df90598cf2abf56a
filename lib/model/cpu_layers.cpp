// The CPU layers (see cpu_layers.hpp): the block of gpt.hpp, one layer kind at a time.
#include "model/cpu_layers.hpp"

#include <algorithm>
#include <cstring>

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

}  // namespace

CpuLayerDims cpu_layer_dims(const ModelConfig& config, int tp_size, int N) {
  CpuLayerDims d;
  d.N = N;
  d.C = static_cast<int>(config.hidden_size);
  d.NH = static_cast<int>(config.num_heads) / tp_size;
  d.NKV = static_cast<int>(config.num_kv_heads) / tp_size;
  d.HS = static_cast<int>(config.head_size());
  d.KV = d.NKV * d.HS;
  d.CQ = d.NH * d.HS;
  d.QKV = d.CQ + 2 * d.KV;
  d.Fh = static_cast<int>(config.ffn_hidden_size) / tp_size;
  d.FC = (config.activation == Activation::swiglu ? 2 : 1) * d.Fh;
  d.activation = config.activation;
  return d;
}

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
void CausalAttention<F>::forward(AttentionActs<F>& a, const CpuLayerDims& d) {
  const size_t N = size_t(d.N);
  gather_cols(a.q, a.qkv, N, size_t(d.QKV), 0, size_t(d.CQ));
  gather_cols(a.k, a.qkv, N, size_t(d.QKV), size_t(d.CQ), size_t(d.KV));
  gather_cols(a.v, a.qkv, N, size_t(d.QKV), size_t(d.CQ + d.KV), size_t(d.KV));
  if (rope_) {
    cpu::rope_forward(a.q, a.q, B_, T_, d.NH, d.HS, theta_);
    cpu::rope_forward(a.k, a.k, B_, T_, d.NKV, d.HS, theta_);
  }
  cpu::attention_forward(a.atty, a.att, a.q, a.k, a.v, B_, T_, d.NH, d.NKV, d.HS, p_, key_);
}

template <typename F>
void CausalAttention<F>::backward(const AttentionActs<F>& a, const CpuLayerScratch<F>& s,
                                  const CpuLayerDims& d) const {
  const size_t n = size_t(d.N), NC = n * size_t(d.C), nkv = n * size_t(d.KV);
  zero(s.dq, NC);
  zero(s.dk, nkv);
  zero(s.dv, nkv);
  cpu::attention_backward(s.dq, s.dk, s.dv, s.datty, a.q, a.k, a.v, a.att, B_, T_, d.NH, d.NKV, d.HS, p_, key_);
  const F* dq = s.dq;
  const F* dk = s.dk;
  if (rope_) {
    zero(s.dqr, NC);
    zero(s.dkr, nkv);
    cpu::rope_backward(s.dqr, s.dq, B_, T_, d.NH, d.HS, theta_);
    cpu::rope_backward(s.dkr, s.dk, B_, T_, d.NKV, d.HS, theta_);
    dq = s.dqr;
    dk = s.dkr;
  }
  scatter_cols(s.dqkv, dq, n, size_t(d.QKV), 0, size_t(d.CQ));
  scatter_cols(s.dqkv, dk, n, size_t(d.QKV), size_t(d.CQ), size_t(d.KV));
  scatter_cols(s.dqkv, static_cast<const F*>(s.dv), n, size_t(d.QKV), size_t(d.CQ + d.KV), size_t(d.KV));
}

template <typename F>
void attention_layer_forward(CpuLayerPath<F>& path, AttentionCore<F>& core, AttentionActs<F>& a,
                             const LayerTensors& t, int64_t block, const CpuLayerDims& d, const F* x, F* out) {
  using enum TensorRole;
  path.norm_rows(a.ln, a.ln_mean, a.ln_rstd, x, t[norm_weight], t[norm_bias], d.N);
  cpu::linear_forward(a.qkv, a.ln, path.p(t[qkv_weight]), path.p(t[qkv_bias]), d.N, d.C, d.QKV);
  core.forward(a, d);
  F* branch = path.row_parallel_forward(a.atty, t[proj_weight], t[proj_bias], d.N, d.CQ);
  path.hidden_dropout(branch, d.N, block_dropout_sites(block) + 2);
  residual_add(out, x, branch, path.rows(d.N) * size_t(d.C));
}

template <typename F>
void attention_layer_backward(CpuTrainingPath<F>& path, const CausalAttention<F>& core, const AttentionActs<F>& a,
                              const CpuLayerScratch<F>& s, const LayerTensors& t, int64_t block,
                              const CpuLayerDims& d, const F* x, F* dres) {
  using enum TensorRole;
  const size_t NC = size_t(d.N) * size_t(d.C);
  const F* dbranch = path.branch_grad(dres, d.N, block_dropout_sites(block) + 2);
  zero(s.datty, NC);
  cpu::linear_backward(s.datty, path.g(t[proj_weight]), path.g(t[proj_bias]), dbranch, a.atty,
                       path.p(t[proj_weight]), d.N, d.CQ, d.C);
  core.backward(a, s, d);
  zero(s.dln, NC);
  cpu::linear_backward(s.dln, path.g(t[qkv_weight]), path.g(t[qkv_bias]), s.dqkv, a.ln, path.p(t[qkv_weight]), d.N,
                       d.C, d.QKV);
  path.norm_backward(dres, path.exit_tp(s.dln, d.N), x, t[norm_weight], t[norm_bias], a.ln_mean, a.ln_rstd,
                     int(path.rows(d.N)));
}

template <typename F>
void mlp_layer_forward(CpuLayerPath<F>& path, MlpActs<F>& a, const LayerTensors& t, int64_t block,
                       const CpuLayerDims& d, const F* x, F* out) {
  using enum TensorRole;
  path.norm_rows(a.ln, a.ln_mean, a.ln_rstd, x, t[norm_weight], t[norm_bias], d.N);
  cpu::linear_forward(a.fc1, a.ln, path.p(t[fc1_weight]), path.p(t[fc1_bias]), d.N, d.C, d.FC);
  if (d.activation == Activation::swiglu)
    cpu::swiglu_forward(a.act, a.fc1, d.N, d.Fh);
  else
    cpu::gelu_forward(a.act, a.fc1, size_t(d.N) * size_t(d.Fh));
  F* branch = path.row_parallel_forward(a.act, t[fc2_weight], t[fc2_bias], d.N, d.Fh);
  path.hidden_dropout(branch, d.N, block_dropout_sites(block) + 3);
  residual_add(out, x, branch, path.rows(d.N) * size_t(d.C));
}

template <typename F>
void mlp_layer_backward(CpuTrainingPath<F>& path, const MlpActs<F>& a, const CpuLayerScratch<F>& s,
                        const LayerTensors& t, int64_t block, const CpuLayerDims& d, const F* x, F* dres) {
  using enum TensorRole;
  const size_t n = size_t(d.N);
  const F* dbranch = path.branch_grad(dres, d.N, block_dropout_sites(block) + 3);
  zero(s.dact, n * size_t(d.Fh));
  cpu::linear_backward(s.dact, path.g(t[fc2_weight]), path.g(t[fc2_bias]), dbranch, a.act, path.p(t[fc2_weight]),
                       d.N, d.Fh, d.C);
  zero(s.dfc1, n * size_t(d.FC));
  if (d.activation == Activation::swiglu)
    cpu::swiglu_backward(s.dfc1, s.dact, a.fc1, d.N, d.Fh);
  else
    cpu::gelu_backward(s.dfc1, s.dact, a.fc1, n * size_t(d.Fh));
  zero(s.dln, n * size_t(d.C));
  cpu::linear_backward(s.dln, path.g(t[fc1_weight]), path.g(t[fc1_bias]), s.dfc1, a.ln, path.p(t[fc1_weight]), d.N,
                       d.C, d.FC);
  path.norm_backward(dres, path.exit_tp(s.dln, d.N), x, t[norm_weight], t[norm_bias], a.ln_mean, a.ln_rstd,
                     int(path.rows(d.N)));
}

#define MEG_CPU_LAYERS(F)                                                                                      \
  template void cpu_norm_forward<F>(const ModelConfig&, F*, F*, F*, const F*, const F*, const F*, int);       \
  template class CausalAttention<F>;                                                                           \
  template void attention_layer_forward<F>(CpuLayerPath<F>&, AttentionCore<F>&, AttentionActs<F>&,             \
                                           const LayerTensors&, int64_t, const CpuLayerDims&, const F*, F*);   \
  template void attention_layer_backward<F>(CpuTrainingPath<F>&, const CausalAttention<F>&,                    \
                                            const AttentionActs<F>&, const CpuLayerScratch<F>&,                \
                                            const LayerTensors&, int64_t, const CpuLayerDims&, const F*, F*);  \
  template void mlp_layer_forward<F>(CpuLayerPath<F>&, MlpActs<F>&, const LayerTensors&, int64_t,              \
                                     const CpuLayerDims&, const F*, F*);                                       \
  template void mlp_layer_backward<F>(CpuTrainingPath<F>&, const MlpActs<F>&, const CpuLayerScratch<F>&,       \
                                      const LayerTensors&, int64_t, const CpuLayerDims&, const F*, F*);
MEG_CPU_LAYERS(float)
MEG_CPU_LAYERS(double)
#undef MEG_CPU_LAYERS

}  // namespace meg
