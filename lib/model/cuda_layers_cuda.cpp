// The CUDA layers (see cuda_layers.hpp): the attention and MLP kinds, training's causal attention,
// and the registry of kinds.
#include "model/cuda_layers.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.hpp"
#include "model/layer_spec.hpp"
#include "ops/cuda/check.hpp"

namespace meg {

namespace {

using E = cuda::SmallLinearEpilogue;

// A layer's activation arrays as its acts() names them, in order: listed (with their sizes), or
// bound to where the model put them.
class CudaActs {
 public:
  CudaActs() = default;  // lists them; take() returns null
  explicit CudaActs(std::span<void* const> at) : at_(at), bound_(true) {}
  template <typename T>
  T* take(size_t n, bool recomputed = false) {
    const size_t i = next_++;
    if (!bound_) {
      arrays_.push_back({n * sizeof(T), recomputed});
      return nullptr;
    }
    if (i >= at_.size()) throw std::logic_error("CUDA layer: fewer activation arrays than the layer names");
    return n == 0 ? nullptr : static_cast<T*>(at_[i]);
  }
  std::vector<CudaActArray> arrays() && { return std::move(arrays_); }

 private:
  std::span<void* const> at_;
  bool bound_ = false;
  size_t next_ = 0;
  std::vector<CudaActArray> arrays_;
};

// The floats the backward of either norm takes as scratch over N rows of C.
size_t norm_scratch(int N, int C) {
  return std::max(cuda::layernorm_backward_scratch(N, C), cuda::rmsnorm_backward_scratch(N, C));
}

// OUT = the activation E (gelu, or swiglu: OUT of OC / 2 columns) of PRE [N, OC].
template <typename X>
void activation_forward(E e, X* out, const X* pre, int N, int OC, cudaStream_t stream) {
  if (e == E::swiglu)
    cuda::swiglu_forward(out, pre, N, OC / 2, stream);
  else
    cuda::gelu_forward(out, pre, size_t(N) * OC, stream);
}

// norm_linear()'s call for the start of a branch of the layer of tensors T: LN (MEAN, RSTD) = its
// norm of X, then the product of W and B (roles) with OC outputs; the output and epilogue are the
// caller's.
template <typename X>
CudaNormLinear<X> branch_start(const LayerTensors& t, TensorRole w, TensorRole b, const LayerDims& d, int OC,
                               const X* x, X* ln, float* mean, float* rstd) {
  CudaNormLinear<X> op;
  op.ln = ln;
  op.mean = mean;
  op.rstd = rstd;
  op.x = x;
  op.norm_w = t[TensorRole::norm_weight];
  op.norm_b = t[TensorRole::norm_bias];
  op.w = t[w];
  op.b = t[b];
  op.N = d.N;
  op.C = d.C;
  op.OC = OC;
  return op;
}

// The backward of a branch's start (norm_linear): from DOUT [N, OC], the gradient of the product's
// output, the product's weight gradients, and the stream's gradient through the norm added to DRES
// (DLN: scratch [N, C] for the product's input gradient).
template <typename X>
void norm_linear_backward(CudaTrainingPath<X>& path, X* dln, const X* dout, const X* ln, const float* mean,
                          const float* rstd, const X* x, size_t norm_w, size_t norm_b, size_t w, size_t b,
                          const CudaRows& rows, int C, int OC, X* dres) {
  path.gemm().linear_backward_input(dln, dout, path.p(w), rows.N, C, OC);
  const X* dl = path.exit_tp(dln, rows.N);
  path.weight_backward(w, b, dout, ln, rows.N, C, OC);
  path.norm_backward(dres, dl, x, norm_w, norm_b, mean, rstd, rows.R);
}

// Columns [0, WIDTH) of N rows of stride SRC_STRIDE to rows of stride DST_STRIDE (elements).
template <typename X>
void copy_rows(X* dst, size_t dst_stride, const X* src, size_t src_stride, int N, size_t width, cudaStream_t s) {
  if (N <= 0 || width == 0) return;
  MEG_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_stride * sizeof(X), src, src_stride * sizeof(X), width * sizeof(X),
                                   size_t(N), cudaMemcpyDeviceToDevice, s));
}

// The q heads (columns [0, CQ) of qkv, NH of them, weight role q_norm_weight) or the k heads
// (columns [CQ, CQ + KV), NKV, k_norm_weight) of the attention layer's activations: where each
// sits in a.qkv, a.qk_raw and a.qk_rstd.
struct QkPart {
  size_t col, raw, rstd;
  int heads;
  TensorRole weight;
};
inline std::array<QkPart, 2> qk_parts(const LayerDims& d) {
  const size_t N = size_t(d.N);
  return {QkPart{0, 0, 0, d.NH, TensorRole::q_norm_weight},
          QkPart{size_t(d.CQ), N * size_t(d.CQ), N * size_t(d.NH), d.NKV, TensorRole::k_norm_weight}};
}

// qk-layernorm's forward: each q and k head of a.qkv RMS-normalised in place, the columns kept in
// a.qk_raw, the norms in a.qk_rstd; TMP holds N x CQ.
template <typename X>
void qk_norm_forward(CudaLayerPath<X>& path, const CudaAttentionActs<X>& a, const LayerTensors& t, const LayerDims& d,
                     float eps, X* tmp) {
  for (const QkPart& q : qk_parts(d)) {
    const size_t width = size_t(q.heads) * size_t(d.HS);
    copy_rows(a.qk_raw + q.raw, width, a.qkv + q.col, size_t(d.QKV), d.N, width, path.stream());
    cuda::rmsnorm_forward(tmp, a.qk_rstd + q.rstd, a.qk_raw + q.raw, path.p(t[q.weight]), d.N * q.heads, d.HS, eps,
                          path.stream());
    copy_rows(a.qkv + q.col, size_t(d.QKV), tmp, width, d.N, width, path.stream());
  }
}

// Its backward, in place on DQKV's q and k columns (the normalised heads' gradients become the raw
// ones'); DOUT and DINP hold N x CQ each.
template <typename X>
void qk_norm_backward(CudaTrainingPath<X>& path, const CudaAttentionActs<X>& a, const LayerTensors& t,
                      const LayerDims& d, X* dqkv, X* dout, X* dinp) {
  for (const QkPart& q : qk_parts(d)) {
    const size_t width = size_t(q.heads) * size_t(d.HS);
    copy_rows(dout, width, dqkv + q.col, size_t(d.QKV), d.N, width, path.stream());
    MEG_CUDA_CHECK(cudaMemsetAsync(dinp, 0, size_t(d.N) * width * sizeof(X), path.stream()));
    path.head_norm_backward(dinp, dout, a.qk_raw + q.raw, t[q.weight], a.qk_rstd + q.rstd, d.N * q.heads);
    copy_rows(dqkv + q.col, size_t(d.QKV), dinp, width, d.N, width, path.stream());
  }
}

}  // namespace

template <typename X>
void linear_epilogue_forward(CudaLayerPath<X>& path, const CudaNormLinear<X>& op) {
  cuda::Gemm& gemm = path.gemm();
  const X* w = path.p(op.w);
  const X* b = path.p(op.b);
  if (op.epilogue == E::gelu || op.epilogue == E::swiglu) {
    const bool fused = op.epilogue == E::gelu && op.fused_gelu;
    if (fused && gemm.linear_gelu_forward(op.out, op.pre, op.ln, w, b, op.N, op.C, op.OC)) return;
    gemm.linear_forward(op.pre, op.ln, w, b, op.N, op.C, op.OC);
    activation_forward(op.epilogue, op.out, op.pre, op.N, op.OC, path.stream());
    return;
  }
  gemm.linear_forward(op.out, op.ln, w, b, op.N, op.C, op.OC);
  if (const cuda::SmallLinearKvAppend<X>* kv = op.kv_append)
    cuda::kv_cache_append(op.out, kv->k_cache, kv->v_cache, kv->slots, kv->positions, kv->rope_table, op.N, kv->NH,
                          kv->NKV, kv->HS, kv->max_length, path.stream());
}

template <typename X>
void CudaCausalAttention<X>::forward(const CudaAttentionActs<X>& a, const LayerDims& d) {
  if (rope_) cuda::rope_forward(a.qkv, rope_, B_, T_, d.NH, d.NKV, d.HS, stream_);
  cuda::attention_forward(a.atty, a.lse, a.qkv, B_, T_, d.NH, d.NKV, d.HS, stream_, p_, key_, window_);
}

template <typename X>
void CudaCausalAttention<X>::backward(const CudaAttentionActs<X>& a, X* dqkv, const X* datty,
                                      const LayerDims& d) const {
  cuda::attention_backward(dqkv, datty, a.qkv, a.atty, a.lse, B_, T_, d.NH, d.NKV, d.HS, scratch_, stream_, p_, key_,
                           window_);
  if (rope_) cuda::rope_backward(dqkv, rope_, B_, T_, d.NH, d.NKV, d.HS, stream_);
}

namespace {

// A layer whose activations (ACTS) and backward scratch (GRADS) are structs of pointers, named by
// acts() and grads(): their sizes are those of the naming.
template <typename X, typename Acts, typename Grads>
class CarvedCudaLayer : public CudaLayer<X> {
 public:
  CarvedCudaLayer(const ModelConfig& config, int tp_size) : config_(config), tp_size_(tp_size) {}
  std::vector<CudaActArray> activations(const CudaRows& rows) const final {
    CudaActs c;
    acts(c, rows);
    return std::move(c).arrays();
  }
  size_t scratch_bytes(const CudaRows& rows) const final {
    CudaCarver c(nullptr);
    grads(c, rows);
    return c.used();
  }

 protected:
  virtual Acts acts(CudaActs& c, const CudaRows& rows) const = 0;
  virtual Grads grads(CudaCarver& c, const CudaRows& rows) const = 0;
  // The arrays at AT (the model's carving of activations(ROWS)), and the scratch at SCRATCH.
  Acts bound(std::span<void* const> at, const CudaRows& rows) const {
    CudaActs c(at);
    return acts(c, rows);
  }
  Grads bound_scratch(void* scratch, const CudaRows& rows) const {
    CudaCarver c(scratch);
    return grads(c, rows);
  }
  // This rank's sizes over N rows.
  LayerDims dims(int N) const { return layer_dims(config_, tp_size_, N); }
  const ModelConfig& config() const { return config_; }

 private:
  ModelConfig config_;
  int tp_size_;
};

// The attention layer's backward scratch.
template <typename X>
struct AttentionGrads {
  X *dln, *dqkv, *datty, *dqk_out, *dqk_in;  // the last two with qk-layernorm only
};

// The attention layer: OUT = X + dropout(proj(core(qkv(norm(X))))).
template <typename X>
class CudaAttentionLayer final : public CarvedCudaLayer<X, CudaAttentionActs<X>, AttentionGrads<X>> {
 public:
  using CarvedCudaLayer<X, CudaAttentionActs<X>, AttentionGrads<X>>::CarvedCudaLayer;

  size_t reduction_floats(const CudaRows& rows) const override {
    const LayerDims d = this->dims(rows.N);
    return std::max({norm_scratch(d.N, d.C), cuda::bias_backward_scratch(d.N, std::max(d.QKV, d.C)),
                     cuda::attention_backward_scratch(rows.B, rows.T, d.NH),
                     this->config().qk_layernorm ? cuda::rmsnorm_backward_scratch(d.N * d.NH, d.HS) : size_t(0)});
  }

  void forward(CudaLayerPath<X>& path, const LayerPlace& at, const CudaRows& rows, std::span<void* const> acts,
               const X* x, X* out) const override {
    using enum TensorRole;
    const LayerTensors& t = at.tensors;
    const LayerDims d = this->dims(rows.N);
    const CudaAttentionActs<X> a = this->bound(acts, rows);
    CudaAttentionCore<X>& core = path.attention_core(at);
    const cuda::SmallLinearKvAppend<X>* kv = core.kv_append();
    // With qk-layernorm the cache takes the keys after their norm: the product only stores.
    const bool qk_norm = this->config().qk_layernorm;
    CudaNormLinear<X> op = branch_start(t, qkv_weight, qkv_bias, d, d.QKV, x, a.ln, a.ln_mean, a.ln_rstd);
    op.out = a.qkv;
    op.epilogue = kv && !qk_norm ? E::kv_append : E::store;
    op.kv_append = qk_norm ? nullptr : kv;
    path.norm_linear(op);
    if (qk_norm) {
      qk_norm_forward(path, a, t, d, static_cast<float>(this->config().norm_eps), a.atty);
      if (kv)
        cuda::kv_cache_append(a.qkv, kv->k_cache, kv->v_cache, kv->slots, kv->positions, kv->rope_table, d.N, kv->NH,
                              kv->NKV, kv->HS, kv->max_length, path.stream());
    }
    core.forward(a, d);
    path.residual_linear(at, a.atty, t[proj_weight], t[proj_bias], d.N, d.CQ, block_dropout_sites(at.block) + 2, x,
                         out);
  }

  void recompute(CudaTrainingPath<X>& path, const LayerPlace& at, const CudaRows& rows,
                 std::span<void* const> acts, const X* x) const override {
    using enum TensorRole;
    const CudaAttentionActs<X> a = this->bound(acts, rows);
    path.norm_rows(a.ln, a.ln_mean, a.ln_rstd, x, at.tensors[norm_weight], at.tensors[norm_bias], rows.N);
  }

  void backward(CudaTrainingPath<X>& path, const LayerPlace& at, const CudaRows& rows, std::span<void* const> acts,
                void* scratch, const X* x, X* dres) const override {
    using enum TensorRole;
    const LayerTensors& t = at.tensors;
    const LayerDims d = this->dims(rows.N);
    const CudaAttentionActs<X> a = this->bound(acts, rows);
    const AttentionGrads<X> s = this->bound_scratch(scratch, rows);
    const X* dbranch = path.branch_grad(dres, d.N, block_dropout_sites(at.block) + 2);
    path.gemm().linear_backward_input(s.datty, dbranch, path.p(t[proj_weight]), d.N, d.CQ, d.C);
    path.weight_backward(t[proj_weight], t[proj_bias], dbranch, a.atty, d.N, d.CQ, d.C);
    path.causal_attention(at).backward(a, s.dqkv, s.datty, d);
    if (this->config().qk_layernorm) qk_norm_backward(path, a, t, d, s.dqkv, s.dqk_out, s.dqk_in);
    norm_linear_backward(path, s.dln, s.dqkv, a.ln, a.ln_mean, a.ln_rstd, x, t[norm_weight], t[norm_bias],
                         t[qkv_weight], t[qkv_bias], rows, d.C, d.QKV, dres);
  }

 private:
  // With the statistics and the log-sum-exps in training.
  CudaAttentionActs<X> acts(CudaActs& c, const CudaRows& rows) const override {
    const LayerDims d = this->dims(rows.N);
    const size_t N = size_t(d.N), R = rows.training() ? size_t(rows.R) : 0;
    const size_t scores = rows.training() ? size_t(rows.B) * size_t(d.NH) * size_t(rows.T) : 0;
    CudaAttentionActs<X> a;
    a.ln = c.take<X>(N * size_t(d.C), true);
    a.ln_mean = c.take<float>(R);
    a.ln_rstd = c.take<float>(R);
    a.qkv = c.take<X>(N * size_t(d.QKV));
    const bool qk_norm = this->config().qk_layernorm;
    a.qk_raw = c.take<X>(qk_norm ? N * size_t(d.CQ + d.KV) : 0);
    a.qk_rstd = c.take<float>(qk_norm ? N * size_t(d.NH + d.NKV) : 0);
    a.lse = c.take<float>(scores);
    a.atty = c.take<X>(N * size_t(d.CQ));
    return a;
  }
  AttentionGrads<X> grads(CudaCarver& c, const CudaRows& rows) const override {
    const LayerDims d = this->dims(rows.N);
    const size_t N = size_t(d.N);
    AttentionGrads<X> s;
    s.dln = c.take<X>(N * size_t(d.C));
    s.dqkv = c.take<X>(N * size_t(d.QKV));
    s.datty = c.take<X>(N * size_t(d.CQ));
    const size_t qk = this->config().qk_layernorm ? N * size_t(d.CQ) : 0;
    s.dqk_out = c.take<X>(qk);
    s.dqk_in = c.take<X>(qk);
    return s;
  }
};

// The MLP layer's activations and backward scratch.
template <typename X>
struct MlpActs {
  X* ln;
  float *ln_mean, *ln_rstd;
  X *fc1, *act;
};
template <typename X>
struct MlpGrads {
  X *dln, *dact, *dfc1;
};

// The MLP layer: OUT = X + dropout(fc2(act(fc1(norm(X))))).
template <typename X>
class CudaMlpLayer final : public CarvedCudaLayer<X, MlpActs<X>, MlpGrads<X>> {
 public:
  using CarvedCudaLayer<X, MlpActs<X>, MlpGrads<X>>::CarvedCudaLayer;

  size_t reduction_floats(const CudaRows& rows) const override {
    const LayerDims d = this->dims(rows.N);
    return std::max(norm_scratch(d.N, d.C), cuda::bias_backward_scratch(d.N, std::max(d.FC, d.C)));
  }

  void forward(CudaLayerPath<X>& path, const LayerPlace& at, const CudaRows& rows, std::span<void* const> acts,
               const X* x, X* out) const override {
    using enum TensorRole;
    const LayerTensors& t = at.tensors;
    const LayerDims d = this->dims(rows.N);
    const MlpActs<X> a = this->bound(acts, rows);
    // Selective recomputation computes the activation again with the GELU kernel, so the forward
    // must use that kernel too: cuBLASLt's GELU may round differently in the last bit.
    CudaNormLinear<X> op = branch_start(t, fc1_weight, fc1_bias, d, d.FC, x, a.ln, a.ln_mean, a.ln_rstd);
    op.out = a.act;
    op.pre = a.fc1;
    op.epilogue = activation(d);
    op.fused_gelu = path.fused_epilogues() && rows.recompute != Recompute::selective;
    path.norm_linear(op);
    path.residual_linear(at, a.act, t[fc2_weight], t[fc2_bias], d.N, d.Fh, block_dropout_sites(at.block) + 3, x,
                         out);
  }

  void recompute(CudaTrainingPath<X>& path, const LayerPlace& at, const CudaRows& rows,
                 std::span<void* const> acts, const X* x) const override {
    using enum TensorRole;
    const LayerDims d = this->dims(rows.N);
    const MlpActs<X> a = this->bound(acts, rows);
    path.norm_rows(a.ln, a.ln_mean, a.ln_rstd, x, at.tensors[norm_weight], at.tensors[norm_bias], rows.N);
    activation_forward(activation(d), a.act, a.fc1, d.N, d.FC, path.stream());
  }

  void backward(CudaTrainingPath<X>& path, const LayerPlace& at, const CudaRows& rows, std::span<void* const> acts,
                void* scratch, const X* x, X* dres) const override {
    using enum TensorRole;
    const LayerTensors& t = at.tensors;
    const LayerDims d = this->dims(rows.N);
    const MlpActs<X> a = this->bound(acts, rows);
    const MlpGrads<X> s = this->bound_scratch(scratch, rows);
    const X* dbranch = path.branch_grad(dres, d.N, block_dropout_sites(at.block) + 3);
    const X* w2 = path.p(t[fc2_weight]);
    const bool gelu = d.activation != Activation::swiglu;
    // fc2's input gradient, through the activation: GELU's derivative in cuBLASLt's epilogue where
    // it has one.
    if (!(gelu && path.fused_epilogues() &&
          path.gemm().linear_dgelu_backward_input(s.dfc1, dbranch, w2, a.fc1, d.N, d.Fh, d.C))) {
      path.gemm().linear_backward_input(s.dact, dbranch, w2, d.N, d.Fh, d.C);
      if (gelu)
        cuda::gelu_backward(s.dfc1, s.dact, a.fc1, size_t(d.N) * size_t(d.Fh), path.stream());
      else
        cuda::swiglu_backward(s.dfc1, s.dact, a.fc1, d.N, d.Fh, path.stream());
    }
    path.weight_backward(t[fc2_weight], t[fc2_bias], dbranch, a.act, d.N, d.Fh, d.C);
    norm_linear_backward(path, s.dln, s.dfc1, a.ln, a.ln_mean, a.ln_rstd, x, t[norm_weight], t[norm_bias],
                         t[fc1_weight], t[fc1_bias], rows, d.C, d.FC, dres);
  }

 private:
  static E activation(const LayerDims& d) { return d.activation == Activation::swiglu ? E::swiglu : E::gelu; }
  // With the norm's statistics in training.
  MlpActs<X> acts(CudaActs& c, const CudaRows& rows) const override {
    const LayerDims d = this->dims(rows.N);
    const size_t N = size_t(d.N), R = rows.training() ? size_t(rows.R) : 0;
    MlpActs<X> a;
    a.ln = c.take<X>(N * size_t(d.C), true);
    a.ln_mean = c.take<float>(R);
    a.ln_rstd = c.take<float>(R);
    a.fc1 = c.take<X>(N * size_t(d.FC));
    a.act = c.take<X>(N * size_t(d.Fh), true);
    return a;
  }
  // GELU's backward runs in place (dfc1 is dact); SwiGLU's writes twice dact's width.
  MlpGrads<X> grads(CudaCarver& c, const CudaRows& rows) const override {
    const LayerDims d = this->dims(rows.N);
    const size_t N = size_t(d.N);
    MlpGrads<X> s;
    s.dln = c.take<X>(N * size_t(d.C));
    s.dact = c.take<X>(N * size_t(d.Fh));
    s.dfc1 = d.activation != Activation::swiglu ? s.dact : c.take<X>(N * size_t(d.FC));
    return s;
  }
};

template <template <typename> class Layer, typename X>
std::unique_ptr<CudaLayer<X>> make(const ModelConfig& config, int tp_size) {
  return std::make_unique<Layer<X>>(config, tp_size);
}

struct CudaFactories {
  CudaLayerFactory<float> make_float;
  CudaLayerFactory<__nv_bfloat16> make_bf16;
  CudaLayerFactory<__half> make_fp16;
  template <typename X>
  const CudaLayerFactory<X>& get() const {
    if constexpr (std::is_same_v<X, float>) return make_float;
    else if constexpr (std::is_same_v<X, __nv_bfloat16>) return make_bf16;
    else return make_fp16;
  }
};

template <template <typename> class Layer>
CudaFactories factories() {
  return {make<Layer, float>, make<Layer, __nv_bfloat16>, make<Layer, __half>};
}

std::map<char, CudaFactories>& cuda_registry() {
  static std::map<char, CudaFactories> kinds = {
      {LayerKind::attention, factories<CudaAttentionLayer>()},
      {LayerKind::mlp, factories<CudaMlpLayer>()},
  };
  return kinds;
}

}  // namespace

void register_cuda_layer(char symbol, CudaLayerFactory<float> make_float, CudaLayerFactory<__nv_bfloat16> make_bf16,
                         CudaLayerFactory<__half> make_fp16) {
  const CudaFactories f{std::move(make_float), std::move(make_bf16), std::move(make_fp16)};
  if (!cuda_registry().emplace(symbol, f).second)
    throw std::logic_error(std::string("layer kind '") + symbol + "' has a CUDA implementation already");
}

template <typename X>
std::vector<std::unique_ptr<CudaLayer<X>>> make_cuda_layers(const ModelConfig& config, int tp_size, int64_t begin,
                                                            int64_t end) {
  const std::vector<LayerSpec> specs = config.layers();
  std::vector<std::unique_ptr<CudaLayer<X>>> layers;
  for (int64_t l = begin; l < end; ++l) {
    const char kind = specs.at(size_t(l)).kind;
    const auto it = cuda_registry().find(kind);
    if (it == cuda_registry().end())
      input_error("model config: the {} layer '{}' has no CUDA implementation", layer_kind(kind).name, kind);
    layers.push_back(it->second.get<X>()(config, tp_size));
  }
  return layers;
}

#define MEG_CUDA_LAYERS(X)                                                                                     \
  template void linear_epilogue_forward<X>(CudaLayerPath<X>&, const CudaNormLinear<X>&);                     \
  template class CudaCausalAttention<X>;                                                                       \
  template std::vector<std::unique_ptr<CudaLayer<X>>> make_cuda_layers<X>(const ModelConfig&, int, int64_t, \
                                                                          int64_t);
MEG_CUDA_LAYERS(float)
MEG_CUDA_LAYERS(__nv_bfloat16)
MEG_CUDA_LAYERS(__half)
#undef MEG_CUDA_LAYERS

}  // namespace meg
