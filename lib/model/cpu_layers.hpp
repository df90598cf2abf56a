// The CPU implementation of each layer kind of model/layer_spec.hpp, shared by training
// (GptModel, model/gpt.hpp) and generation (CpuInferenceModel, infer/cpu_inference_model.hpp):
// each kind's forward, its backward and the activations it keeps, over N rows of the residual
// stream. The models run their stage's layers in order through the CpuLayer interface below,
// one object per layer made by the kind's registered factory; a kind defined elsewhere (a test's)
// registers its factory with register_cpu_layer().
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
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "model/config.hpp"
#include "model/layer_dims.hpp"
#include "model/param_table.hpp"
#include "ops/cpu/ops.hpp"

namespace meg {

// The rows a forward runs over: N rows, in training a batch of B sequences of T (N = B T); in
// generation (B = T = 0) packed new tokens of several sequences, and nothing kept for a backward.
struct CpuRows {
  int N = 0, B = 0, T = 0;
  bool training() const { return B > 0; }
};

// The config's norm (LayerNorm or RMSNorm) of N rows; MEAN and RSTD (kept for the backward) may be
// null.
template <typename F>
void cpu_norm_forward(const ModelConfig& config, F* out, F* mean, F* rstd, const F* inp, const F* w, const F* b,
                      int N);

// The attention layer's activations (generation points them at scratch) and its core: from
// a.qkv [N, QKV] the attention output a.atty [N, CQ]. With qk-layernorm, a.qkv's q and k columns
// are normalised in place; qk_raw [N, CQ + KV] keeps them as the projection gave them, qk_rstd
// [N, NH + NKV] their heads' norms (both null without qk-layernorm).
template <typename F>
struct AttentionActs {
  F *ln, *ln_mean, *ln_rstd, *qkv, *qk_raw, *qk_rstd, *q, *k, *v, *att, *atty;
};
template <typename F>
class AttentionCore {
 public:
  virtual void forward(AttentionActs<F>& a, const LayerDims& d) = 0;

 protected:
  ~AttentionCore() = default;
};

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
  // The core of the attention layer AT.
  virtual AttentionCore<F>& attention_core(const LayerPlace& at) = 0;

 protected:
  ~CpuLayerPath() = default;
};

// The backwards' scratch of the attention layer (dqk_raw and dqk_norm, the q/k norms' weight
// gradients [2 HS], with qk-layernorm only).
template <typename F>
struct AttentionGrads {
  F *dln, *dqkv, *dq, *dk, *dv, *dqr, *dkr, *datty, *dqk_raw, *dqk_norm;
};

// Training's core: causal attention over a batch of B sequences of T (N = B*T rows), RoPE at the
// rows' positions with INV_FREQ (ModelConfig::rope_inv_freq; empty: no RoPE; it must outlive the
// core), attention dropout P with KEY's masks.
template <typename F>
class CausalAttention final : public AttentionCore<F> {
 public:
  // WINDOW: the config's attention_window() (-1: full causal attention).
  CausalAttention(int B, int T, std::span<const double> inv_freq, double p, const cpu::DropoutKey& key, int window)
      : B_(B), T_(T), inv_freq_(inv_freq), p_(p), key_(key), window_(window) {}
  void forward(AttentionActs<F>& a, const LayerDims& d) override;
  // S.dqkv = the gradient of a.qkv from S.datty, the attention output's.
  void backward(const AttentionActs<F>& a, const AttentionGrads<F>& s, const LayerDims& d) const;

 private:
  int B_, T_;
  std::span<const double> inv_freq_;
  double p_;
  cpu::DropoutKey key_;
  int window_;
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
  // The core of the attention layer AT, as attention_core() gave it to its forward.
  virtual const CausalAttention<F>& causal_attention(const LayerPlace& at) = 0;
  // Sums PART, a gradient each rank has from its own heads (qk-layernorm's weights), over the
  // tensor-parallel group, in place.
  virtual void sum_over_heads(F* part, size_t n) = 0;

 protected:
  ~CpuTrainingPath() = default;
};

// Hands out consecutive stretches of BASE (null: only counts them).
template <typename F>
class Carver {
 public:
  explicit Carver(F* base) : base_(base) {}
  F* take(size_t n) {
    F* p = base_ ? base_ + used_ : nullptr;
    used_ += n;
    return p;
  }
  size_t used() const { return used_; }

 private:
  F* base_;
  size_t used_ = 0;
};

// The auxiliary losses of the MoE layers' last training forwards (moe/aux_losses.hpp), summed over
// layers: the values Megatron logs (without their coefficients) and the weighted sum whose gradient
// the backwards add (what a gradient check adds to the model loss).
struct AuxiliaryLosses {
  double load_balancing_loss = 0, z_loss = 0, weighted = 0;
  int64_t moe_layers = 0;
};

// One layer kind's implementation for a model (made for its config and tensor-parallel size).
template <typename F>
class CpuLayer {
 public:
  virtual ~CpuLayer() = default;
  // The values of the activations one such layer keeps over ROWS: what its backward reads in
  // training, its forward's scratch in generation (where one set serves every layer in turn).
  virtual size_t activation_size(const CpuRows& rows) const = 0;
  // The values of its backward's scratch over N rows (one scratch serves every layer in turn).
  virtual size_t scratch_size(int N) const = 0;
  // OUT = the layer applied to the stream X (the path's rows of N; OUT may be X), keeping its
  // activations in ACTS (activation_size(ROWS) values).
  virtual void forward(CpuLayerPath<F>& path, const LayerPlace& at, const CpuRows& rows, F* acts, const F* x,
                       F* out) const = 0;
  // The backward of the last forward of ACTS on X: DRES, the gradient of its output, becomes X's,
  // and the gradients of the layer's tensors accumulate.
  virtual void backward(CpuTrainingPath<F>& path, const LayerPlace& at, const CpuRows& rows, F* acts,
                        F* scratch, const F* x, F* dres) const = 0;
  // Adds the layer's auxiliary losses of its last training forward (none but MoE layers').
  virtual void add_auxiliary_losses(AuxiliaryLosses& /*sum*/) const {}
};

// The registry of the kinds' CPU implementations, by symbol: factories of a kind's layer for a
// config and tensor-parallel size, float and double. The attention and MLP kinds are registered
// from the start; register_cpu_layer adds others (std::logic_error for a symbol taken).
template <typename F>
using CpuLayerFactory = std::function<std::unique_ptr<CpuLayer<F>>(const ModelConfig& config, int tp_size)>;
void register_cpu_layer(char symbol, CpuLayerFactory<float> make_float, CpuLayerFactory<double> make_double);
// The layers of CONFIG's layer sequence [BEGIN, END); InputError for a kind without a CPU
// implementation.
template <typename F>
std::vector<std::unique_ptr<CpuLayer<F>>> make_cpu_layers(const ModelConfig& config, int tp_size, int64_t begin,
                                                          int64_t end);

}  // namespace meg
