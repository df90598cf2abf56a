// The CUDA implementation of each layer kind of model/layer_spec.hpp, shared by training
// (GptCudaModel, model/gpt_cuda.hpp) and inference (CudaTransformer, infer/cuda_transformer.hpp:
// generation, eval's scorer, RETRO's embedder): each kind's forward, its backward and the
// activations it keeps, over N rows of the residual stream, in the activation type X (float, bf16
// or fp16). The models run their stage's layers in order through the CudaLayer interface below, one
// object per layer made by the kind's registered factory, as the CPU models run CpuLayer
// (model/cpu_layers.hpp; both share model/layer_dims.hpp's sizes, places and dropout sites:
// block_dropout_sites(block) + 1 for the attention probabilities, + 2 for the attention layer's
// output, + 3 for the MLP layer's, so that both devices drop the same elements).
//
// Both kinds are a pre-norm branch of the residual stream x:
//   ln  = norm(x)                          LayerNorm or RMSNorm, all N rows
//   h   = core(ln @ W1^T + b1)             column-parallel: this rank's heads, or MLP columns
//   x'  = x + dropout(h @ W2^T + b2)       row-parallel: the ranks' parts summed, b2 added once
// attention: W1 the fused q/k/v projection, core = causal softmax(q k^T / sqrt(HS)) v (RoPE on q
// and k first, grouped-query when NKV < NH), W2 the output projection; MLP: W1 = fc1, core = GELU
// (tanh), or SwiGLU over fc1's [gate; up] halves, W2 = fc2.
//
// What differs between training and inference belongs to the path (CudaLayerPath), the same
// calls in the same order for both:
//   norm_linear      the start of a branch. Training: the norm kernel (on the rank's rows, then
//                    all-gathered under sequence parallelism) and the cuBLASLt product, GELU in
//                    its epilogue where allowed. Inference: for a few rows one small_linear launch
//                    that fuses the norm, the product and its epilogue (the activation, or the KV
//                    cache append after the QKV product); for more, the norm kernel, which first
//                    adds a residual part the branch before left pending, then the same products
//                    and epilogue kernels as training (linear_epilogue_forward).
//   residual_linear  the end of a branch. Training: the cuBLASLt product, the sum over the group
//                    (all-reduce, or reduce-scatter to the rank's rows), hidden dropout and the
//                    residual add as launches of their own. Inference: the add in small_linear's
//                    epilogue, or in the peer-sum kernel (PeerSums), or deferred to the next
//                    norm's launch (never after the last layer).
//   attention_core   the attention between the two products (CudaAttentionCore). Training's is
//                    CudaCausalAttention (here): flash attention over a batch of B sequences of T,
//                    RoPE in place, dropout keyed by the block. Inference's is the caller's
//                    callback against its KV cache, which the QKV product's epilogue fills first.
//
// Activations and recomputation (training). A layer names the arrays it keeps (activations()),
// marking those that selective recomputation computes again; the model carves them in that order,
// each followed by the layer's output (the next layer's input), and under recomputation aliases
// them: every layer of a kind after the stage's first uses the first one's arrays for
//   none       nothing: every layer keeps its own arrays;
//   selective  the recomputed arrays (the norm outputs and the MLP's activation: cheap to
//              recompute, wide to keep). Before a block's backward, each of its layers
//              recompute()s them from its input and what it kept (statistics, fc1's output);
//   full       all of them, and the outputs of layers that do not end a block: a block keeps its
//              input alone. Before a block's backward its layers' forwards run again.
// So recomputation is by block (an attention layer and the MLP layer after it), as the
// training model runs it: the block's forwards (or recomputes) in order, then its layers'
// backwards in reverse. Dropout masks are keyed, not drawn, so a recomputed forward drops the
// same elements. The backward's scratch (scratch_bytes()) and the reductions' float scratch
// (reduction_floats()) are one of each for all layers, used in turn.
//
// Inference keeps nothing for a backward: one set of a layer's arrays, carved for the most rows of
// a forward, serves every layer in turn (no statistics, no log-sum-exps).
// Only for code built with CUDA (MEG_CUDA).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "model/config.hpp"
#include "model/layer_dims.hpp"
#include "model/param_table.hpp"
#include "ops/cuda/gemm.hpp"
#include "ops/cuda/ops.hpp"

namespace meg {

enum class Recompute { none, selective, full };

// The rows a forward runs over: N rows, in training a batch of B sequences of T (N = B T) of which
// the rank holds R rows of the residual stream (N / tp with sequence parallelism, else N), with
// the activations kept as RECOMPUTE says; in inference (B = T = 0, R = N) any N rows.
struct CudaRows {
  int N = 0, B = 0, T = 0, R = 0;
  Recompute recompute = Recompute::none;
  bool training() const { return B > 0; }
};

// Hands out consecutive pieces of one device allocation, each on a 256-byte boundary (so on any
// vector load's); with a null base it only counts their bytes.
class CudaCarver {
 public:
  static constexpr size_t kAlign = 256;
  explicit CudaCarver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename T>
  T* take(size_t n) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += (n * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// One array of a layer's activations: its bytes, and whether selective recomputation computes it
// again (then one array serves every layer of the kind).
struct CudaActArray {
  size_t bytes = 0;
  bool recomputed = false;
};

// The start of a branch, norm_linear(): LN = norm(X) (X the stream's rows; LN all N rows of C),
// MEAN and RSTD its statistics kept for the backward (training; null otherwise), then the
// column-parallel product of LN with W [OC, C] and B, and its epilogue:
//   store      OUT [N, OC] = LN @ W^T + B
//   kv_append  the same, then the rows' keys and values appended to the cache (KV_APPEND), q and
//              k rotated in place with RoPE
//   gelu       PRE [N, OC] = LN @ W^T + B, OUT = gelu(PRE)
//   swiglu     the same PRE, OUT [N, OC / 2] = silu(PRE's gate half) * PRE's up half
// FUSED_GELU: whether the GELU may come from cuBLASLt's epilogue (which may round differently in
// the last bit from the GELU kernel).
template <typename X>
struct CudaNormLinear {
  X* out = nullptr;
  X* pre = nullptr;
  X* ln = nullptr;
  float *mean = nullptr, *rstd = nullptr;
  const X* x = nullptr;
  size_t norm_w = kAbsentTensor, norm_b = kAbsentTensor, w = kAbsentTensor, b = kAbsentTensor;
  int N = 0, C = 0, OC = 0;
  cuda::SmallLinearEpilogue epilogue = cuda::SmallLinearEpilogue::store;
  const cuda::SmallLinearKvAppend<X>* kv_append = nullptr;
  bool fused_gelu = false;
};

// The attention layer's activations: LN [N, C] (recomputed), its statistics [R] (training), QKV
// [N, QKV] (q and k rotated in place with RoPE), LSE [B, NH, T] the softmax's log-sum-exps
// (training) and ATTY [N, CQ] the attention's output.
// With qk-layernorm, a.qkv's q and k columns are normalised in place after the product (before
// RoPE); QK_RAW keeps them as the product gave them, the q heads [N, CQ] then the k heads [N, KV],
// and QK_RSTD their heads' norms, [N, NH] then [N, NKV] (both null without qk-layernorm).
template <typename X>
struct CudaAttentionActs {
  X* ln;
  float *ln_mean, *ln_rstd;
  X* qkv;
  X* qk_raw;
  float* qk_rstd;
  float* lse;
  X* atty;
};

// The attention's core, from a.qkv to a.atty.
template <typename X>
class CudaAttentionCore {
 public:
  // The KV-cache append that the QKV product's epilogue does before forward() (null: none).
  virtual const cuda::SmallLinearKvAppend<X>* kv_append() const { return nullptr; }
  virtual void forward(const CudaAttentionActs<X>& a, const LayerDims& d) = 0;

 protected:
  ~CudaAttentionCore() = default;
};

// What a path gives the layers' forwards (all on the path's stream).
template <typename X>
class CudaLayerPath {
 public:
  // The weight at OFFSET of the path's flat array, null for kAbsentTensor.
  virtual const X* p(size_t offset) const = 0;
  virtual cuda::Gemm& gemm() = 0;
  virtual cudaStream_t stream() const = 0;
  // Whether cuBLASLt's fused GELU epilogues may be used (forward and backward).
  virtual bool fused_epilogues() const = 0;
  // The start of a branch (CudaNormLinear). In inference the stream OP.x may still lack the add
  // the branch before deferred: this call adds it, so a layer's forward reads its input through
  // norm_linear first.
  virtual void norm_linear(const CudaNormLinear<X>& op) = 0;
  // The end of the branch of layer AT: OUT = X + dropout(INP [N, IN] @ W^T + B), the product
  // row-parallel (INP this rank's IN columns), over the stream's rows; SITE the hidden dropout's.
  // OUT may be X (inference's stream is updated in place, OUT == X).
  virtual void residual_linear(const LayerPlace& at, const X* inp, size_t w, size_t b, int N, int in,
                               uint64_t site, const X* x, X* out) = 0;
  // The core of the attention layer AT, for its forward.
  virtual CudaAttentionCore<X>& attention_core(const LayerPlace& at) = 0;

 protected:
  ~CudaLayerPath() = default;
};

// norm_linear()'s product and epilogue as separate launches, from OP.ln (the norm written): the
// cuBLASLt product (with the GELU in its epilogue where OP.fused_gelu and cuBLASLt has one), then
// the activation's kernel, or kv_cache_append. The argmax epilogue stores (its caller chooses).
template <typename X>
void linear_epilogue_forward(CudaLayerPath<X>& path, const CudaNormLinear<X>& op);

// Training's core: causal flash attention over a batch of B sequences of T (N = B T rows), q and
// k rotated in place by their positions first with ROPE_TABLE (cuda::rope_table; null: no RoPE),
// attention dropout P (0: none) with the masks of DROPOUT_STREAM (cpu::dropout_stream of the
// block's site + 1); SCRATCH holds the backward's attention_backward_scratch(B, T, NH) floats.
template <typename X>
class CudaCausalAttention final : public CudaAttentionCore<X> {
 public:
  // WINDOW: the config's attention_window() (-1: full causal attention).
  CudaCausalAttention(int B, int T, const float* rope_table, double p, uint64_t dropout_stream, float* scratch,
                      cudaStream_t stream, int window)
      : B_(B),
        T_(T),
        rope_(rope_table),
        p_(p),
        key_(dropout_stream),
        scratch_(scratch),
        stream_(stream),
        window_(window) {}
  void forward(const CudaAttentionActs<X>& a, const LayerDims& d) override;
  // DQKV [N, QKV] (written) = the gradient of a.qkv from DATTY, a.atty's.
  void backward(const CudaAttentionActs<X>& a, X* dqkv, const X* datty, const LayerDims& d) const;

 private:
  int B_, T_;
  const float* rope_;
  double p_;
  uint64_t key_;
  float* scratch_;
  cudaStream_t stream_;
  int window_;
};

// What the backwards need besides.
template <typename X>
class CudaTrainingPath : public CudaLayerPath<X> {
 public:
  // The fp32 gradient at OFFSET of the path's flat array, null for kAbsentTensor.
  virtual float* g(size_t offset) const = 0;
  // OUT (all N rows) = the layer's norm of the stream's rows INP, MEAN and RSTD its statistics:
  // norm_linear()'s norm alone, for selective recomputation.
  virtual void norm_rows(X* out, float* mean, float* rstd, const X* inp, size_t w, size_t b, int N) = 0;
  // The gradient of a branch output (all N rows) from the stream's gradient DRES, through SITE's
  // dropout mask.
  virtual const X* branch_grad(const X* dres, int N, uint64_t site) = 0;
  // The stream's rows of the sum of the ranks' PARTS [N, C] (the input gradients of a
  // column-parallel product), in place.
  virtual X* exit_tp(X* parts, int N) = 0;
  // Adds to DINP the gradient of the stream's R rows INP through the layer's norm from DOUT; the
  // norm's weight and bias gradients accumulate.
  virtual void norm_backward(X* dinp, const X* dout, const X* inp, size_t w, size_t b, const float* mean,
                             const float* rstd, int R) = 0;
  // The weight and bias (B, or kAbsentTensor) gradients of a linear layer from its output
  // gradient DOUT [N, OC] and input INP [N, C], accumulated.
  virtual void weight_backward(size_t w, size_t b, const X* dout, const X* inp, int N, int C, int OC) = 0;
  // The core of the attention layer AT, as attention_core() gave it to its forward.
  virtual const CudaCausalAttention<X>& causal_attention(const LayerPlace& at) = 0;
  // Adds to DINP the gradient of INP [ROWS, HS], heads through qk-layernorm's RMSNorm of weight W,
  // from DOUT; W's gradient (each rank's from its own heads, so summed over the tensor-parallel
  // group) accumulates.
  virtual void head_norm_backward(X* dinp, const X* dout, const X* inp, size_t w, const float* rstd, int rows) = 0;

 protected:
  ~CudaTrainingPath() = default;
};

// One layer kind's implementation for a model (made for its config and tensor-parallel size).
template <typename X>
class CudaLayer {
 public:
  virtual ~CudaLayer() = default;
  // The arrays one such layer keeps over ROWS, in order: what its backward reads in training, its
  // forward's scratch in inference. An empty array (0 bytes) is a null pointer in ACTS.
  virtual std::vector<CudaActArray> activations(const CudaRows& rows) const = 0;
  // The bytes of its backward's scratch over ROWS, and the floats of the reductions' scratch of
  // its backward's kernels (norm, bias and attention gradients).
  virtual size_t scratch_bytes(const CudaRows& rows) const = 0;
  virtual size_t reduction_floats(const CudaRows& rows) const = 0;
  // OUT = the layer applied to the stream X (the path's rows of N; OUT may be X), keeping its
  // activations in ACTS (where the model put the arrays of activations(ROWS)).
  virtual void forward(CudaLayerPath<X>& path, const LayerPlace& at, const CudaRows& rows,
                       std::span<void* const> acts, const X* x, X* out) const = 0;
  // Selective recomputation: the arrays activations() marks recomputed, again, as the last forward
  // on X wrote them.
  virtual void recompute(CudaTrainingPath<X>& path, const LayerPlace& at, const CudaRows& rows,
                         std::span<void* const> acts, const X* x) const = 0;
  // The backward of the last forward of ACTS on X: DRES, the gradient of its output (the stream's
  // rows), becomes X's, and the gradients of the layer's tensors accumulate. SCRATCH holds
  // scratch_bytes(ROWS).
  virtual void backward(CudaTrainingPath<X>& path, const LayerPlace& at, const CudaRows& rows,
                        std::span<void* const> acts, void* scratch, const X* x, X* dres) const = 0;
};

// The registry of the kinds' CUDA implementations, by symbol: factories of a kind's layer for a
// config and tensor-parallel size, one per activation type. The attention and MLP kinds are
// registered from the start; register_cuda_layer adds others (std::logic_error for a symbol
// taken).
template <typename X>
using CudaLayerFactory = std::function<std::unique_ptr<CudaLayer<X>>(const ModelConfig& config, int tp_size)>;
void register_cuda_layer(char symbol, CudaLayerFactory<float> make_float, CudaLayerFactory<__nv_bfloat16> make_bf16,
                         CudaLayerFactory<__half> make_fp16);
// The layers of CONFIG's layer sequence [BEGIN, END); InputError naming the kind for one without
// a CUDA implementation.
template <typename X>
std::vector<std::unique_ptr<CudaLayer<X>>> make_cuda_layers(const ModelConfig& config, int tp_size, int64_t begin,
                                                            int64_t end);

}  // namespace meg
