// The CUDA path of the ops: host functions that launch the kernels of kernels/*.cu.
//
// Each mirrors a CPU reference op of ops/cpu/ops.hpp and adds the stream to launch on. Every
// pointer is a device pointer (unless said otherwise); every function is asynchronous with respect
// to the host and checks its launches with MEG_CUDA_CHECK, so a bad launch throws
// std::runtime_error.
//
// Mixed precision. The activation type X is one of float, __nv_bfloat16 (bf16) and __half (fp16):
// activations and the compute copy of the weights are X, while everything that accumulates over
// many steps or many rows is fp32: the master weights, their gradients, the AdamW moments, norm
// statistics and losses. Arithmetic inside a kernel is fp32 whatever X is; X is only the storage.
// The explicit instantiations live in the .cu files, for the three types.
//
// Gradient conventions (they differ from the CPU path, where every backward accumulates):
//   - parameter gradients (fp32: dweight, dbias, dwte, ...) are ACCUMULATED (+=), so gradient
//     accumulation over micro-batches needs nothing more than one zeroing per step;
//   - activation gradients (X) are WRITTEN, except where a comment says += (the norms' dinp, which
//     adds into the gradient of the residual stream);
//   - a gradient output given as nullptr is not computed.
// Every reduction runs in a fixed order (no floating-point atomics), so results are the same bit
// for bit from run to run: exact resume holds on the GPU as on the CPU.
//
// Only for code built with CUDA (MEG_CUDA): kernels/*.cu, ops/cuda/*.cpp, the CUDA model and the
// GPU tests.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace meg::cuda {

using bf16 = __nv_bfloat16;
using fp16 = __half;

// ---- kernels/embedding.cu ----------------------------------------------------------------------

// out[B,T,C] = wte[tokens[b,t] - vocab_begin] + wpe[t]; wpe may be null (Llama). wte holds the
// rows of tokens [vocab_begin, vocab_begin + vocab_size) (all of them: 0 and V); a token outside
// that range looks up a zero row (a vocabulary-parallel rank's part of the lookup). tokens
// (device) must be in [0, V): the caller checks them on the host. POSITIONS (device, [B*T]; null:
// row t of each sequence is at position t) gives each row's position, the wpe row it adds (a
// decode step's rows are single tokens of their sequences); they must be rows of wpe.
// With LOG (an inference pass's), each row's token is also written to LOG.history[slot, position]
// (slot = LOG.slots[row], position = POSITIONS[row], which the log needs): the tokens a slot holds,
// which the repetition penalty reads (penalise_rows).
struct TokenLog {
  int32_t* history = nullptr;       // [slots, max_length]
  const int32_t* slots = nullptr;   // [B*T]: each row's slot
  int max_length = 0;
};
template <typename X>
void embedding_forward(X* out, const int32_t* tokens, const X* wte, const X* wpe, int B, int T,
                       int C, int vocab_begin, int vocab_size, cudaStream_t stream,
                       const int32_t* positions = nullptr, const TokenLog& log = {});

// The positions of a batch whose tokens lie in [vocab_begin, vocab_begin + vocab_size), grouped
// by token, built on the HOST from the host copy of the tokens, for a deterministic embedding
// backward: unique[u] is the u-th distinct token's row (token - vocab_begin, ascending), and
// positions[starts[u] .. starts[u+1]) are the positions b*T+t holding it, ascending.
struct TokenGroups {
  std::vector<int32_t> unique;     // [U]
  std::vector<int32_t> starts;     // [U + 1]
  std::vector<int32_t> positions;  // [at most N]
};
TokenGroups group_positions_by_token(const int32_t* tokens, int N, int vocab_begin = 0,
                                     int vocab_size = std::numeric_limits<int>::max());

// dwte[unique[u]] += sum of dout[p] over the positions of group u, added in position order;
// dwpe[t] += sum over b of dout[b,t], added in b order (dwpe may be null). unique, starts and
// positions are device copies of a TokenGroups' arrays (U groups).
template <typename X>
void embedding_backward(float* dwte, float* dwpe, const X* dout, const int32_t* unique,
                        const int32_t* starts, const int32_t* positions, int U, int B, int T, int C,
                        cudaStream_t stream);

// ---- kernels/layernorm.cu ----------------------------------------------------------------------

// out[N,C] = (inp - mean) * rstd * weight + bias. Saves mean[N] and rstd[N] (either may be null).
// bias may be null.
template <typename X>
void layernorm_forward(X* out, float* mean, float* rstd, const X* inp, const X* weight,
                       const X* bias, int N, int C, float eps, cudaStream_t stream);

// x[N,C] += part (each sum rounded to X, as add() rounds it), then out = layernorm(x) as
// layernorm_forward computes it: a residual add and the norm after it in one launch. out must not
// overlap x or part.
template <typename X>
void add_layernorm_forward(X* out, X* x, const X* part, const X* weight, const X* bias, int N, int C, float eps,
                           cudaStream_t stream);

// dinp[N,C] += ... (accumulates into the residual gradient); dweight[C] and dbias[C] += their
// sums over the rows, reduced in a fixed order through SCRATCH (layernorm_backward_scratch(N, C)
// floats). mean and rstd are the forward's.
template <typename X>
void layernorm_backward(X* dinp, float* dweight, float* dbias, const X* dout, const X* inp,
                        const X* weight, const float* mean, const float* rstd, int N, int C,
                        float* scratch, cudaStream_t stream);
size_t layernorm_backward_scratch(int N, int C);

// ---- kernels/rmsnorm.cu ------------------------------------------------------------------------

// out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps); saves rstd[N] (may be null).
template <typename X>
void rmsnorm_forward(X* out, float* rstd, const X* inp, const X* weight, int N, int C, float eps,
                     cudaStream_t stream);

// x += part, then out = rmsnorm(x): add_layernorm_forward's RMSNorm.
template <typename X>
void add_rmsnorm_forward(X* out, X* x, const X* part, const X* weight, int N, int C, float eps, cudaStream_t stream);

// dinp += ... ; dweight += ..., through SCRATCH (rmsnorm_backward_scratch(N, C) floats).
template <typename X>
void rmsnorm_backward(X* dinp, float* dweight, const X* dout, const X* inp, const X* weight,
                      const float* rstd, int N, int C, float* scratch, cudaStream_t stream);
size_t rmsnorm_backward_scratch(int N, int C);

// ---- kernels/elementwise.cu --------------------------------------------------------------------

// out[i] = a[i] + b[i] over n values; out may equal a or b.
template <typename X>
void add(X* out, const X* a, const X* b, size_t n, cudaStream_t stream);

// out[i] = X(inp[i]): the compute copy of fp32 master weights.
template <typename X>
void cast_from_float(X* out, const float* inp, size_t n, cudaStream_t stream);

// dbias[OC] += sum over the N rows of dout[N,OC], in a fixed order, through SCRATCH
// (bias_backward_scratch(N, OC) floats).
template <typename X>
void bias_backward(float* dbias, const X* dout, int N, int OC, float* scratch, cudaStream_t stream);
size_t bias_backward_scratch(int N, int OC);

// ---- kernels/gelu.cu ---------------------------------------------------------------------------

// GELU, tanh approximation, over n values. out may equal inp.
template <typename X>
void gelu_forward(X* out, const X* inp, size_t n, cudaStream_t stream);

// dinp[i] = gelu'(inp[i]) * dout[i] (written; dinp may equal dout).
template <typename X>
void gelu_backward(X* dinp, const X* dout, const X* inp, size_t n, cudaStream_t stream);

// ---- kernels/swiglu.cu -------------------------------------------------------------------------

// out[N,H] = silu(inp[:, :H]) * inp[:, H:], inp [N,2H] (gate columns first, as on the CPU).
template <typename X>
void swiglu_forward(X* out, const X* inp, int N, int H, cudaStream_t stream);

// dinp[N,2H] written from dout[N,H] and the forward's inp.
template <typename X>
void swiglu_backward(X* dinp, const X* dout, const X* inp, int N, int H, cudaStream_t stream);

// ---- kernels/rope.cu ---------------------------------------------------------------------------

// The cos/sin table of the rotary embedding for positions [0,T) and head size HS: [T, HS/2] pairs
// (cos, sin), computed on the host in double exactly as the CPU reference computes its angles,
// then rounded to fp32. The caller uploads it once.
std::vector<float> rope_table(int T, int HS, double theta);
// The same from the HS / 2 inverse frequencies INV_FREQ (ModelConfig::rope_inv_freq: scaled ones).
std::vector<float> rope_table(int T, const std::vector<double>& inv_freq);

// Rotates IN PLACE the q columns [0, NH*HS) and the k columns [NH*HS, (NH+NKV)*HS) of every row of
// qkv [B, T, (NH + 2*NKV) * HS] (v is left alone), position t by table row t ("rotate_half"
// layout, as the CPU's rope_forward). TABLE is rope_table(T' >= T, HS, theta) on the device.
template <typename X>
void rope_forward(X* qkv, const float* table, int B, int T, int NH, int NKV, int HS,
                  cudaStream_t stream);

// The backward, in place on the gradient dqkv: the rotation by the opposite angle.
template <typename X>
void rope_backward(X* dqkv, const float* table, int B, int T, int NH, int NKV, int HS,
                   cudaStream_t stream);

// ---- kernels/dropout.cu ------------------------------------------------------------------------

// The CPU's counter-based dropout (ops/cpu/ops.hpp: the same mask bits for the same key and
// index), out[i] = keep(i) ? inp[i] / (1 - p) : 0. out may equal inp. STREAM_KEY is
// cpu::dropout_stream(key); p in (0, 1). Applied to a gradient with the forward's key it is the
// dropout's backward. FIRST is the index of inp[0] in the whole array the mask is defined on, as
// cpu::dropout_forward's (a sequence-parallel rank's rows keep the bits they have in one process).
template <typename X>
void dropout_apply(X* out, const X* inp, size_t n, double p, uint64_t stream_key,
                   cudaStream_t stream, uint64_t first = 0);

// ---- kernels/attention.cu ----------------------------------------------------------------------
//
// Causal attention with grouped-query support, reading q, k and v straight from the fused QKV
// projection's output qkv [B, T, (NH + 2*NKV) * HS] (row layout [q heads; k heads; v heads], as
// the model's linear_qkv) and never materialising the T x T matrix: the flash-attention method,
// an online softmax over key blocks. Query head h reads key/value head h / (NH / NKV). Scores are
// scaled by 1/sqrt(HS).
//
// Attention dropout (DROPOUT_P in (0, 1); 0, the default, is none), as the CPU's
// cpu::attention_forward with the same key: out = (P o M / (1 - p)) V, where element
// (b, h, t, t2) of the mask M is element ((b*NH + h)*T + t)*T + t2 of the key's stream, kept iff
// cpu::dropout_bits(stream, index) >= cpu::dropout_threshold(p). DROPOUT_STREAM is
// cpu::dropout_stream(key), as dropout_apply takes it. lse stays that of the undropped softmax P.
// The backward takes the forward's p and stream and regenerates the mask:
//   dV = (P o M / (1 - p))^T dO;  dP = (dO V^T) o M / (1 - p);  dS = P o (dP - rowsum(P o dP)).
// A p outside [0, 1) throws std::invalid_argument.
//
// WINDOW >= 0 is a sliding window, Megatron's --window-size (WINDOW, 0), as cpu::attention_forward's:
// query t attends to the keys t - WINDOW .. t only; -1 (the default) is full causal attention. The
// backward takes the forward's.

// out [B, T, NH, HS]; lse [B, NH, T] receives each row's log-sum-exp of the scaled scores (fp32),
// which the backward uses to recompute the probabilities.
template <typename X>
void attention_forward(X* out, float* lse, const X* qkv, int B, int T, int NH, int NKV, int HS,
                       cudaStream_t stream, double dropout_p = 0, uint64_t dropout_stream = 0, int window = -1);

// dqkv [B, T, (NH + 2*NKV) * HS] WRITTEN in full: dq, and dk/dv summed over the query heads of each
// group in a fixed order. dout and out are [B, T, NH, HS]; lse is the forward's. SCRATCH holds
// attention_backward_scratch(B, T, NH) floats.
template <typename X>
void attention_backward(X* dqkv, const X* dout, const X* qkv, const X* out, const float* lse,
                        int B, int T, int NH, int NKV, int HS, float* scratch, cudaStream_t stream,
                        double dropout_p = 0, uint64_t dropout_stream = 0, int window = -1);
size_t attention_backward_scratch(int B, int T, int NH);

// ---- kernels/cross_entropy.cu ------------------------------------------------------------------

// Softmax cross-entropy over logits [N, Vp] of which columns [0, V) are real, fused with its
// backward: losses[N] (fp32) receives each row's loss (0 where targets is -1), and when DLOSS is
// non-zero the logits are OVERWRITTEN in place by their gradient,
//   dloss * (softmax(logits) - onehot(target)) on counted rows, 0 on ignored rows and padded
//   columns.
// DLOSS is the gradient of the total loss with respect to each row's loss (1 / number of counted
// positions for a mean, times a loss scale for fp16). targets (device) in [0, V) or -1.
template <typename X>
void cross_entropy_fused(X* logits, float* losses, const int32_t* targets, int N, int V, int Vp,
                         float dloss, cudaStream_t stream);

// The same over vocabulary-parallel logits (Megatron's vocabulary-parallel cross-entropy): a rank
// holds columns [vocab_begin, vocab_begin + Vp) of the whole padded vocabulary, V of them real
// (0 <= V <= Vp). First cross_entropy_partials writes each row's partial over its columns to
// PARTIALS[N][3] (max, sum of exp(x - max), and the target's logit where this rank holds the
// target, else 0); the caller all-gathers the ranks' partials into [RANKS][N][3] in rank order;
// then cross_entropy_parallel combines them (identically on every rank: every rank gets the
// losses) and, when DLOSS is not 0, writes this rank's columns of the gradient in place.
template <typename X>
void cross_entropy_partials(const X* logits, float* partials, const int32_t* targets, int N, int V, int Vp,
                            int vocab_begin, cudaStream_t stream);
template <typename X>
void cross_entropy_parallel(X* logits, float* losses, const float* partials, int ranks, const int32_t* targets,
                            int N, int V, int Vp, int vocab_begin, float dloss, cudaStream_t stream);

// ---- kernels/adamw.cu --------------------------------------------------------------------------

// One tensor of a multi-tensor AdamW launch: elements [offset, offset + numel) of the flat arrays.
struct AdamWSegment {
  size_t offset;
  size_t numel;
  float weight_decay;  // 0 for norms and biases
};

// One AdamW step over every segment (in one launch), as cpu::adamw_step, with the gradient first
// multiplied by GRAD_SCALE (clipping, micro-batch averaging and loss-scale removal in one factor):
//   g = grad * grad_scale; p -= lr * wd * p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
// and, when PARAMS_X is not null, params_x = X(p): the compute copy, refreshed in the same pass.
// SEGMENTS is a device array of NUM_SEGMENTS entries.
template <typename X>
void adamw_step(float* params, X* params_x, const float* grads, float* m, float* v,
                const AdamWSegment* segments, int num_segments, float lr, float beta1, float beta2,
                float eps, float grad_scale, int64_t t, cudaStream_t stream);

// ---- kernels/reduce.cu -------------------------------------------------------------------------

// *out (one double, device) = sum of grad[i]^2 over n values, in a fixed order, through SCRATCH
// (sum_squares_scratch(n) doubles). Non-finite values propagate (fp16 overflow detection).
void sum_squares(double* out, const float* grad, size_t n, double* scratch, cudaStream_t stream);
size_t sum_squares_scratch(size_t n);


// ---- kernels/kv_cache.cu -----------------------------------------------------------------------
//
// The KV cache of the inference path: per layer, a K and a V array [slots, NKV, max_length, HS] of
// X, a sequence (slot) keeping each kv head's keys in position order.

// For each token row i of qkv [N, (NH + 2*NKV) * HS] (the fused projection, rows [q; k; v] as the
// model's linear_qkv), the token at position positions[i] of slot slots[i]: rotates its q and k
// heads in place by that position when ROPE_TABLE is given (rope_table(T, HS, theta) on the
// device, T above every position), as rope_forward rotates position t, then writes its k and v
// heads into k_cache and v_cache at (slot, position). Positions must be below max_length.
template <typename X>
void kv_cache_append(X* qkv, X* k_cache, X* v_cache, const int32_t* slots, const int32_t* positions,
                     const float* rope_table, int N, int NH, int NKV, int HS, int max_length,
                     cudaStream_t stream);

// ---- kernels/cached_attention.cu ---------------------------------------------------------------

// Attention of Q query rows against the cache, for the decode steps of the inference path (and
// prompt tokens that follow cached ones). Query q is row rows[q] of qkv (as kv_cache_append takes
// it, after that has run for the row); it attends, as query head h, to the keys and values
// [0, positions[row]] of kv head h / (NH / NKV) of slot slots[row], scores scaled by 1/sqrt(HS),
// and writes out[row] ([N, NH * HS] rows, as attention_forward's). The kernel before it wrote
// at most NEW_KEYS (>= 1) keys and values of each slot, the last ones of its queries; the older
// ones are read before that kernel has finished (an overlapped launch). LONGEST, in [1,
// max_length], bounds every query's keys (positions[row] + 1): where it is small, a few queries
// run one block a (query, head group) with the keys in shared memory (cached_attention_staged).
// SCRATCH holds cached_attention_scratch(Q, NH, NKV, HS) floats (null when that is 0), zeroed
// before its first launch (every launch leaves the counters it holds at zero again). Head sizes:
// those of cached_attention_supports (any even one up to 64, multiples of 4 up to 128, of 8 up to
// 256); for multiples of 8 the caches must be 16-byte aligned. WINDOW >= 0, a sliding window as
// attention_forward's, limits a query to the keys [positions[row] - WINDOW, positions[row]] (the
// cache keeps the older ones: they are only not read); -1 is none.
template <typename X>
void cached_attention(X* out, const X* qkv, const X* k_cache, const X* v_cache, const int32_t* rows,
                      const int32_t* slots, const int32_t* positions, int Q, int NH, int NKV, int HS,
                      int max_length, int longest, int new_keys, float* scratch, cudaStream_t stream,
                      int window = -1);
bool cached_attention_supports(int HS);
// Whether a launch of Q queries of at most LONGEST keys each runs the staged grid. A captured
// decode step keeps its launches' shapes: it holds for the LONGEST its grid was chosen by only
// while this answer stays the same.
bool cached_attention_staged(int Q, int NH, int NKV, int HS, int longest);
// The split grid's key splits for Q queries (a function of Q and the device alone, so that a
// captured decode step keeps its shape as the context grows), and the scratch they need.
int cached_attention_splits(int Q, int NH, int NKV);
size_t cached_attention_scratch(int Q, int NH, int NKV, int HS);

// ---- kernels/small_linear.cu ------------------------------------------------------------------
//
// The linear layers of a decode step: a few rows (batch-1 generation has one) against a weight
// matrix that is read once per step, which makes the product a matter of streaming the weights at
// the memory's bandwidth. cuBLASLt's products are built for many rows; these kernels stream each
// weight once for all the rows and fuse what surrounds the product in a transformer block, so a
// layer is a few launches rather than a dozen.

// What comes before the product: nothing, or a norm of each input row (LayerNorm with an optional
// bias, or RMSNorm), as layernorm_forward / rmsnorm_forward compute it.
template <typename X>
struct SmallLinearNorm {
  const X* weight = nullptr;  // null: no norm
  const X* bias = nullptr;    // LayerNorm's; may be null
  float eps = 0.0f;
  bool rms = false;
};

// What comes after it, on y = norm(inp) @ W^T + bias rounded to X (as a product's output is):
//   store     out = y
//   gelu      out = gelu(y), the tanh approximation (the product's fp32 value, as cuBLASLt's
//             GELU epilogue)
//   swiglu    out[N, OC / 2] = silu(y_gate) * y_up, W's rows [gate (OC / 2) | up (OC / 2)]
//   residual  out += y: the residual stream updated in place. Out is read early, before the
//             kernel waits for the one before it (small_linear's launches overlap their
//             predecessors'), so no kernel that may still be running must write it: the one
//             before, or the one before that where the one between lets its successor start
//             before its own wait (cached_attention does). In a decode step out is the residual
//             stream, which the product three kernels before wrote (two before the MLP's second)
//   kv_append out = y, the fused QKV projection [N, (NH + 2 NKV) HS], then as kv_cache_append:
//             q and k rotated in place by each row's position (with a RoPE table), k and v
//             written to the cache (SmallLinearKvAppend), in the same values and rounding
//   argmax    out = y, and each row's argmax over its columns [0, choices) into tokens
//             (SmallLinearArgmax): argmax_rows' choice on the stored values, without its launch
enum class SmallLinearEpilogue { store, gelu, swiglu, residual, kv_append, argmax };

// kv_cache_append's arguments, for the kv_append epilogue: row n of the product is the token at
// position positions[n] of slot slots[n].
template <typename X>
struct SmallLinearKvAppend {
  X* k_cache = nullptr;
  X* v_cache = nullptr;
  const int32_t* slots = nullptr;
  const int32_t* positions = nullptr;
  const float* rope_table = nullptr;  // null: no rotation (GPT-2)
  int NH = 0, NKV = 0, HS = 0, max_length = 0;
};

// The most rows small_linear takes: past it cuBLASLt's tensor-core products are faster (not
// profiled: a lane's fp32 multiply-adds and conversions grow with the rows while the bytes it
// streams do not, which would make them its limit). At 4 rows cuBLASLt is faster for every model,
// at 3 small_linear for GPT-2's (Llama 1B's alone faster off it).
constexpr int kSmallLinearMaxRows = 3;

// The argmax epilogue's scratch in device memory: the launch's best key so far per row and its
// count of blocks done. Zero before the first launch; each launch leaves it zero (its last block
// resets it), so one scratch serves the launches of one stream in turn, not two at once.
struct SmallLinearArgmaxScratch {
  unsigned long long best[kSmallLinearMaxRows];
  unsigned blocks_done;
};

// The argmax epilogue's arguments: tokens[n] = the lowest column of row n's largest value among
// columns [0, choices) (NaN never chosen; a row of NaN gives 0), as argmax_rows chooses, and where
// VALUES is given, values[n] = that value (NaN for a row of NaN; a -0 maximum comes back as +0).
struct SmallLinearArgmax {
  int32_t* tokens = nullptr;
  float* values = nullptr;
  SmallLinearArgmaxScratch* scratch = nullptr;
  int choices = 0;
};

// out = epilogue(norm(inp[N, C]) @ W[OC, C]^T + bias[OC]) (bias may be null; KV_APPEND is the
// kv_append epilogue's and ARGMAX the argmax epilogue's, null for the others). Returns false,
// having queued nothing, for what it does not handle: N outside [1, kSmallLinearMaxRows], C not a
// multiple of 16 bytes of X, a pointer not 16-byte aligned, rows too wide to hold N of (and the
// norm's weight and bias) in shared memory, or the argmax epilogue with a bias (output layers have
// none); the caller then runs the norm, the product and the epilogue separately.
template <typename X>
bool small_linear(X* out, const X* inp, const X* W, const X* bias, int N, int C, int OC,
                  const SmallLinearNorm<X>& norm, SmallLinearEpilogue epilogue, cudaStream_t stream,
                  const SmallLinearKvAppend<X>* kv_append = nullptr, const SmallLinearArgmax* argmax = nullptr);

// ---- kernels/peer_sums.cu ----------------------------------------------------------------------

// The members' memory a peer_sum reads and writes (parallel/peer_sums.hpp allocates and maps it):
// every member's receive area, [2][size][capacity_vecs] 16-byte vectors, and flags,
// [2][kPeerSumBlocks][kMaxPeers], as this member's device addresses them; and this member's own
// count of calls by block [kPeerSumBlocks], zero before the first.
constexpr int kMaxPeers = 8;
constexpr int kPeerSumBlocks = 32;
struct PeerSumBuffers {
  void* data[kMaxPeers] = {};
  unsigned* flags[kMaxPeers] = {};
  unsigned* epochs = nullptr;
  int rank = 0, size = 0;
  size_t capacity_vecs = 0;
};

// out[i] = the sum of in[i] over the members of a group on one host (ADD: out[i] + that sum,
// rounded to X first, as add() after an all-reduce), the same bits on every member; a collective
// call: every member makes the same calls with the same N. False, with nothing done, where the
// values do not fit the buffers or are not whole 16-byte vectors (the caller falls back to NCCL);
// OUT and IN must be 16-byte aligned, and OUT may equal IN.
template <typename X>
bool peer_sum(X* out, const X* in, size_t n, bool add, const PeerSumBuffers& buffers, cudaStream_t stream);

// ---- kernels/logits.cu -------------------------------------------------------------------------

// out[N, V] (fp32) = the real columns of logits [N, Vp].
template <typename X>
void logits_to_float(float* out, const X* logits, int N, int V, int Vp, cudaStream_t stream);

// Row r of ROWS [N, V] (fp32 logits) under the repetition penalty PENALTIES[r] (device; 1: the row
// is left as it is): each distinct token of its slot's history, HISTORY[slot, 0..position] (what
// embedding_forward's TokenLog wrote), has its logit l made l / p for l > 0, else l * p, in fp32:
// the host sampler's penalty, bit for bit (infer/sampler.hpp's penalised_logit). The row's slot
// and position are SLOTS[i] and POSITIONS[i] of its pass row i: LAST[r] (device), or r where LAST
// is null (every row an output). FIRST is the token of column 0: a member of a tensor-parallel
// group penalises its shard of the vocabulary, tokens [FIRST, FIRST + V), and no other.
void penalise_rows(float* rows, const int32_t* history, const int32_t* slots, const int32_t* positions,
                   const int32_t* last, const float* penalties, int N, int V, int max_length, cudaStream_t stream,
                   int first = 0);

// out[r] = the column of the largest of logits[r, 0..V) (the lowest one among equal maxima, as
// torch.argmax; NaN never wins, and a row of NaN gives 0): the sampler's greedy choice
// (infer/sampler.hpp), which meg-generate makes here through InferenceModel::append_greedy.
// VALUES (if not null): values[r] = that largest value, NaN for a row of NaN (or V = 0).
template <typename X>
void argmax_rows(int32_t* out, const X* logits, int N, int V, int Vp, cudaStream_t stream, float* values = nullptr);

// The argmax of rows whose vocabulary is split over the P members of a tensor-parallel group, member
// m holding columns [m * SHARD, (m + 1) * SHARD), from each member's argmax_rows over its own:
// PARTS [P][2][N] holds member m's N columns (numbered within its shard) then their values (float
// bits, as argmax_rows's VALUES). out[r] = the column argmax_rows would give over the whole row.
void merge_argmax_rows(int32_t* out, const int32_t* parts, int P, int N, int shard, cudaStream_t stream);

// columns[r, 0..K), values[r, 0..K) = the K largest of logits[r, 0..V) and their columns, in no
// particular order (equal values at the K-th: the lowest columns; NaN never; where fewer than K
// are not NaN, the rest have column -1): what top-k sampling draws from. K in [1, kMaxTopK].
constexpr int kMaxTopK = 256;
template <typename X>
void top_k_rows(int32_t* columns, float* values, const X* logits, int N, int V, int Vp, int K, cudaStream_t stream);

// A row's draw (sample_rows): TEMPERATURE 0 (the argmax) or above, TOP_P in (0, 1] (1: off), U in
// [0, 1).
struct RowDraw {
  double temperature = 1, top_p = 1, u = 0;
};

// out[r] = the token drawn with draws[r] (device memory) from the softmax of logits[r, 0..V) over
// its temperature, kept to its top_p nucleus: the sampler's choice with top-k off and no penalty
// (infer/sampler.hpp), which meg-generate makes here through InferenceModel::append_sample. The
// sums are exact: each probability, relative to the row's largest, is rounded to a multiple of
// 2^-40 (so a token under 2^-41 of the largest is never drawn), and the nucleus's target (top_p of
// the total) up to one; so the draw differs from the host's, whose sums are in double, only where
// u falls within rounding of a boundary between two tokens. V at most 2^23.
template <typename X>
void sample_rows(int32_t* out, const X* logits, const RowDraw* draws, int N, int V, int Vp, cudaStream_t stream);

}  // namespace meg::cuda
