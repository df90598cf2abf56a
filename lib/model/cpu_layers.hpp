// The CPU implementation of each layer kind of model/layer_spec.hpp, shared by training
// (GptModel, model/gpt.hpp) and generation (CpuInferenceModel, infer/cpu_inference_model.hpp):
// each kind's forward, its backward and the activations it keeps, over N rows of the residual
// stream.
//
// What differs between the two paths is theirs, behind CpuLayerPath: where the parameters are,
// how the residual stream is split over the tensor-parallel group (sequence parallelism) and how a
// row-parallel product is summed (training adds the bias after the sum, generation on rank 0
// before it; each keeps the numerics it always had), and dropout (training only). The attention's
// core is a hook (AttentionCore): training attends over the batch, causally (CausalAttention,
// here), generation over its key/value cache (infer/cpu_inference_model.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/config.hpp"
#include "model/param_table.hpp"
#include "ops/cpu/ops.hpp"

namespace meg {

// One rank's sizes of a layer over N rows: NH, NKV its query and key/value heads of HS, CQ = NH*HS,
// KV = NKV*HS, QKV their sum with the keys', Fh the MLP's hidden width and FC its first product's.
struct CpuLayerDims {
  int N, C, NH, NKV, HS, KV, CQ, QKV, Fh, FC;
  Activation activation;
};
CpuLayerDims cpu_layer_dims(const ModelConfig& config, int tp_size, int N);

// The config's norm (LayerNorm or RMSNorm) of N rows; MEAN and RSTD (kept for the backward) may be
// null.
template <typename F>
void cpu_norm_forward(const ModelConfig& config, F* out, F* mean, F* rstd, const F* inp, const F* w, const F* b,
                      int N);

// What a path gives the layers' forwards.
template <typename F>
class CpuLayerPath {
 public:
  // The parameter at OFFSET of the path's flat array, null for kAbsentTensor.
  virtual const F* p(size_t offset) const = 0;
  // The path's rows of the residual stream out of N (fewer under sequence parallelism).
  virtual size_t rows(int N) const = 0;
  // OUT (all N rows, for the column-parallel product) = the layer's norm of the stream INP.
  virtual void norm_rows(F* out, F* mean, F* rstd, const F* inp, size_t w, size_t b, int N) = 0;
  // INP [N, IN] @ W^T + B summed over the group: returns the stream's rows of it.
  virtual F* row_parallel_forward(const F* inp, size_t w, size_t b, int N, int in) = 0;
  // Hidden dropout of SITE on a branch output of the stream's rows, in place.
  virtual void hidden_dropout(F* branch, int N, uint64_t site) = 0;

 protected:
  ~CpuLayerPath() = default;
};

// What the backwards need besides.
template <typename F>
class CpuTrainingPath : public CpuLayerPath<F> {
 public:
  // The gradient at OFFSET of the path's flat array, null for kAbsentTensor.
  virtual F* g(size_t offset) = 0;
  // The gradient of a branch output (all N rows) from the stream's gradient DRES, through SITE's
  // dropout mask.
  virtual const F* branch_grad(const F* dres, int N, uint64_t site) = 0;
  // The stream's rows of the sum of the ranks' PARTS (the input gradients of a column-parallel
  // product).
  virtual F* exit_tp(F* parts, int N) = 0;
  // Adds to DINP the gradient of the stream's R = rows(N) rows through the layer's norm.
  virtual void norm_backward(F* dinp, const F* dout, const F* inp, size_t w, size_t b, const F* mean, const F* rstd,
                             int R) = 0;

 protected:
  ~CpuTrainingPath() = default;
};

// The activations each layer keeps for its backward (generation points them at scratch).
template <typename F>
struct AttentionActs {
  F *ln, *ln_mean, *ln_rstd, *qkv, *q, *k, *v, *att, *atty;
};
template <typename F>
struct MlpActs {
  F *ln, *ln_mean, *ln_rstd, *fc1, *act;
};

// Each layer's activations over D's rows carved by TAKE(n) (a pointer to n values; the caller's
// buffer), the attention's with SCORES values of attention probabilities (none in generation).
template <typename F, typename Take>
AttentionActs<F> attention_acts(Take&& take, const CpuLayerDims& d, size_t scores) {
  const size_t N = size_t(d.N), C = size_t(d.C), KV = size_t(d.KV);
  AttentionActs<F> a;
  a.ln = take(N * C);
  a.ln_mean = take(N);
  a.ln_rstd = take(N);
  a.qkv = take(N * size_t(d.QKV));
  a.q = take(N * C);
  a.k = take(N * KV);
  a.v = take(N * KV);
  a.att = take(scores);
  a.atty = take(N * C);
  return a;
}
template <typename F, typename Take>
MlpActs<F> mlp_acts(Take&& take, const CpuLayerDims& d) {
  const size_t N = size_t(d.N);
  MlpActs<F> a;
  a.ln = take(N * size_t(d.C));
  a.ln_mean = take(N);
  a.ln_rstd = take(N);
  a.fc1 = take(N * size_t(d.FC));
  a.act = take(N * size_t(d.Fh));
  return a;
}

// The backwards' scratch, shared by all layers.
template <typename F>
struct CpuLayerScratch {
  F *dln, *dqkv, *dq, *dk, *dv, *dqr, *dkr, *datty, *dfc1, *dact;
};

// The attention's core: from a.qkv [N, QKV] the attention output a.atty [N, CQ].
template <typename F>
class AttentionCore {
 public:
  virtual void forward(AttentionActs<F>& a, const CpuLayerDims& d) = 0;

 protected:
  ~AttentionCore() = default;
};

// Training's core: causal attention over a batch of B sequences of T (N = B*T rows), RoPE at the
// rows' positions, attention dropout P with KEY's masks.
template <typename F>
class CausalAttention final : public AttentionCore<F> {
 public:
  CausalAttention(int B, int T, bool rope, F theta, double p, const cpu::DropoutKey& key)
      : B_(B), T_(T), rope_(rope), theta_(theta), p_(p), key_(key) {}
  void forward(AttentionActs<F>& a, const CpuLayerDims& d) override;
  // S.dqkv = the gradient of a.qkv from S.datty, the attention output's.
  void backward(const AttentionActs<F>& a, const CpuLayerScratch<F>& s, const CpuLayerDims& d) const;

 private:
  int B_, T_;
  bool rope_;
  F theta_;
  double p_;
  cpu::DropoutKey key_;
};

// The dropout sites of block BLOCK (gpt.hpp) are this + 1 for the attention probabilities, + 2
// for the attention layer's output, + 3 for the MLP layer's.
inline uint64_t block_dropout_sites(int64_t block) { return 3 * static_cast<uint64_t>(block); }

// The attention layer: OUT = X + dropout(proj(core(qkv(norm(X))))), over the stream's rows (OUT
// may be X). T: the layer's tensors.
template <typename F>
void attention_layer_forward(CpuLayerPath<F>& path, AttentionCore<F>& core, AttentionActs<F>& a,
                             const LayerTensors& t, int64_t block, const CpuLayerDims& d, const F* x, F* out);
// Adds to DRES (the gradient of OUT, becoming X's) and to the gradients of T the layer's gradient.
template <typename F>
void attention_layer_backward(CpuTrainingPath<F>& path, const CausalAttention<F>& core, const AttentionActs<F>& a,
                              const CpuLayerScratch<F>& s, const LayerTensors& t, int64_t block,
                              const CpuLayerDims& d, const F* x, F* dres);

// The MLP layer: OUT = X + dropout(fc2(act(fc1(norm(X))))).
template <typename F>
void mlp_layer_forward(CpuLayerPath<F>& path, MlpActs<F>& a, const LayerTensors& t, int64_t block,
                       const CpuLayerDims& d, const F* x, F* out);
template <typename F>
void mlp_layer_backward(CpuTrainingPath<F>& path, const MlpActs<F>& a, const CpuLayerScratch<F>& s,
                        const LayerTensors& t, int64_t block, const CpuLayerDims& d, const F* x, F* dres);

}  // namespace meg
