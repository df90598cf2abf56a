// CPU reference ops of a GPT-2 / Llama decoder, each with an explicit forward and backward.
//
// These are the "obviously right" versions the model's CPU path runs and the CUDA kernels are
// tested against. They follow llm.c's train_gpt2.c: plain functions over contiguous row-major
// arrays with explicit shape arguments. The matrix products go to OpenBLAS, which threads them;
// the rest is split over the cores in fixed chunks (core/parallel.hpp), so every result is the
// same bit for bit whatever the number of threads.
//
// Conventions shared by every function here:
//   - Shapes: B batch, T sequence, C channels, OC output channels, NH query heads, NKV key/value
//     heads, HS head size, V vocabulary, Vp padded vocabulary, N rows (usually B*T). An array
//     described as [B,T,C] is contiguous with C fastest.
//   - Every backward ACCUMULATES (+=) into its gradient outputs, so the caller zeroes gradients once
//     per step and gradient accumulation over micro-batches falls out. The one exception is
//     cross_entropy_backward, which writes dlogits (the logits gradient is never shared).
//   - A gradient output given as nullptr is not computed (e.g. dinp of the first layer).
//   - Inputs are never modified unless the comment says so; outputs must not alias inputs unless
//     the comment says they may.
//   - Everything is a template over the scalar type F, instantiated for float (the real path) and
//     double (used by the tests to check gradients against finite differences running the very
//     same code). Reductions outside the GEMMs (means, variances, softmax sums) accumulate in
//     double either way.
//   - Scalars and optional pointers are typed nd<F> ("not deduced"), so F is taken from the
//     arrays alone and calls such as layernorm_forward(..., nullptr, N, C, 1e-5) just work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "ops/cpu/dropout_mask.hpp"

namespace meg::cpu {

template <typename F>
using nd = std::type_identity_t<F>;

// ---- matmul.cpp: linear layer ------------------------------------------------------------------

// out[N,OC] = inp[N,C] @ W[OC,C]^T + bias[OC]. W is stored [OC,C] as in PyTorch's nn.Linear.
// bias may be null.
template <typename F>
void linear_forward(F* out, const F* inp, const F* W, const nd<F>* bias, int N, int C, int OC);

// dinp[N,C] += dout @ W;  dW[OC,C] += dout^T @ inp;  dbias[OC] += column sums of dout.
template <typename F>
void linear_backward(nd<F>* dinp, nd<F>* dW, nd<F>* dbias, const F* dout, const F* inp, const F* W,
                     int N, int C, int OC);

// ---- embedding.cpp -----------------------------------------------------------------------------

// out[B,T,C] = wte[tokens[b,t]] + wpe[t]. wte is [V,C], wpe is [maxT,C] with maxT >= T.
// wpe null gives the token-only embedding of Llama. Throws InputError on a token outside [0,V).
template <typename F>
void embedding_forward(F* out, const int32_t* tokens, const F* wte, const nd<F>* wpe, int B, int T,
                       int C, int V);

// dwte[tokens[b,t]] += dout[b,t];  dwpe[t] += dout[b,t] (dwpe may be null).
template <typename F>
void embedding_backward(nd<F>* dwte, nd<F>* dwpe, const F* dout, const int32_t* tokens, int B, int T,
                        int C);

// ---- norms.cpp ---------------------------------------------------------------------------------

// LayerNorm over the last dimension of inp[N,C]: out = (x - mean) * rstd * weight + bias.
// Saves mean[N] and rstd[N] for the backward (both may be null when no backward follows).
// bias may be null.
template <typename F>
void layernorm_forward(F* out, nd<F>* mean, nd<F>* rstd, const F* inp, const F* weight,
                       const nd<F>* bias, int N, int C, nd<F> eps);

template <typename F>
void layernorm_backward(nd<F>* dinp, nd<F>* dweight, nd<F>* dbias, const F* dout, const F* inp,
                        const F* weight, const F* mean, const F* rstd, int N, int C);

// RMSNorm: out = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps). Saves rstd[N] (may be null).
template <typename F>
void rmsnorm_forward(F* out, nd<F>* rstd, const F* inp, const F* weight, int N, int C, nd<F> eps);

template <typename F>
void rmsnorm_backward(nd<F>* dinp, nd<F>* dweight, const F* dout, const F* inp, const F* weight,
                      const F* rstd, int N, int C);

// ---- activations.cpp ---------------------------------------------------------------------------

// GELU, tanh approximation (GPT-2's "gelu_new"), elementwise over n values. out may equal inp.
template <typename F>
void gelu_forward(F* out, const F* inp, size_t n);

template <typename F>
void gelu_backward(F* dinp, const F* dout, const F* inp, size_t n);

// SwiGLU: out[N,H] = silu(gate) * up, where inp is [N,2H] holding gate in columns [0,H) and up in
// columns [H,2H): the output of one fused fc1 with 2H columns, split like Megatron's
// torch.chunk(x, 2, dim=-1). dinp is [N,2H].
template <typename F>
void swiglu_forward(F* out, const F* inp, int N, int H);

template <typename F>
void swiglu_backward(F* dinp, const F* dout, const F* inp, int N, int H);

// ---- rope.cpp ----------------------------------------------------------------------------------

// Rotary position embedding on x[B,T,NH,HS] (q or k; NH is the number of heads of that tensor).
// The pair (i, i + HS/2) of each head at position t is rotated by the angle t * theta^(-2i/HS):
// the "rotate_half" layout of Hugging Face Llama and Megatron (not the interleaved one of the
// original paper). HS must be even. out may equal inp (in place).
template <typename F>
void rope_forward(F* out, const F* inp, int B, int T, int NH, int HS, nd<F> theta = 10000);

// dinp += R^T dout: the rotation by the opposite angle. dinp must not alias dout.
template <typename F>
void rope_backward(F* dinp, const F* dout, int B, int T, int NH, int HS, nd<F> theta = 10000);

// rope_forward of one sequence x[T,NH,HS] whose row t is position FIRST + t (the new tokens of a
// sequence whose keys up to FIRST are cached). out may equal inp.
template <typename F>
void rope_forward_from(F* out, const F* inp, int T, int NH, int HS, int first, nd<F> theta = 10000);

// The same with the HS / 2 inverse frequencies INV_FREQ (ops/rope_frequencies.hpp: scaled ones)
// in place of theta's.
template <typename F>
void rope_forward(F* out, const F* inp, int B, int T, int NH, int HS, std::span<const double> inv_freq);
template <typename F>
void rope_backward(F* dinp, const F* dout, int B, int T, int NH, int HS, std::span<const double> inv_freq);
template <typename F>
void rope_forward_from(F* out, const F* inp, int T, int NH, int HS, int first, std::span<const double> inv_freq);

// ---- dropout.cpp -------------------------------------------------------------------------------
//
// Inverted dropout with a counter-based mask: element i of the array at dropout site SITE is kept
// iff dropout_bits(key, i) >= p * 2^32, and kept values are scaled by 1 / (1 - p). The 32 bits are
// a SplitMix64 mix of (seed, step, micro-batch, site, i), so there is no generator state: the mask
// is a pure function of the key and the element index. A resumed run regenerates the same masks,
// results do not depend on the number of threads, and the backward regenerates the forward's mask
// instead of storing it. p must be in [0, 1); p == 0 keeps everything (callers skip the call).

// DropoutKey, dropout_stream(key), dropout_bits(stream, index) and dropout_threshold(p) are in
// dropout_mask.hpp, which the CUDA kernels include too.

// out[i] = keep(i) ? inp[i] / (1 - p) : 0 over n values. out may equal inp. With p == 0 a copy.
// Applied to a gradient with the same key it is also the gradient of the dropout (written).
// FIRST is the index of inp[0] in the whole array the mask is defined on (a rank holding rows
// [r, r + n / C) of a sequence-parallel array passes r * C), so each element keeps its own bit.
template <typename F>
void dropout_forward(F* out, const F* inp, size_t n, double p, const DropoutKey& key, uint64_t first = 0);

// dinp[i] += keep(i) ? dout[i] / (1 - p) : 0, the mask regenerated from KEY (that of the forward).
template <typename F>
void dropout_backward(F* dinp, const F* dout, size_t n, double p, const DropoutKey& key, uint64_t first = 0);

// ---- attention.cpp -----------------------------------------------------------------------------

// Causal multi-head attention with grouped-query support.
//   q [B,T,NH,HS], k and v [B,T,NKV,HS] with NH divisible by NKV; query head h reads key/value head
//   h / (NH/NKV) (Hugging Face's repeat_kv and Megatron's grouping). NKV == NH is plain MHA.
//   out [B,T,NH,HS]; att [B,NH,T,T] receives the softmax probabilities (zero above the diagonal),
//   which the backward needs. Scores are scaled by 1/sqrt(HS).
//   Attention dropout (DROPOUT_P > 0): out = (P o M / (1 - p)) V with the mask M of dropout.cpp,
//   element (b, h, t, t2) of M being element index ((b*NH + h)*T + t)*T + t2 of KEY's stream. att
//   still receives the undropped P (the backward regenerates M). DROPOUT_P == 0 is exactly the
//   plain attention.
//   WINDOW >= 0 is a sliding window, Megatron's --window-size (WINDOW, 0): query t attends to the
//   keys t - WINDOW .. t only (att is zero before them too); -1 is full causal attention.
template <typename F>
void attention_forward(F* out, F* att, const F* q, const F* k, const F* v, int B, int T, int NH,
                       int NKV, int HS, double dropout_p = 0, const DropoutKey& key = {}, int window = -1);

// dq [B,T,NH,HS] +=, dk and dv [B,T,NKV,HS] += (summed over the query heads of each group).
// Uses one [T,T] scratch buffer of its own (two with dropout). With dropout (the forward's p and
// key): dV += (P o M / (1-p))^T dO; dP = (dO V^T) o M / (1-p); dS = P o (dP - rowsum(P o dP)).
// WINDOW is the forward's.
template <typename F>
void attention_backward(nd<F>* dq, nd<F>* dk, nd<F>* dv, const F* dout, const F* q, const F* k,
                        const F* v, const F* att, int B, int T, int NH, int NKV, int HS,
                        double dropout_p = 0, const DropoutKey& key = {}, int window = -1);

// Attention of one sequence's T new tokens, positions FIRST .. FIRST+T-1, against its key/value
// cache: q [T,NH,HS]; k and v [FIRST+T, NKV,HS] hold the keys and values of positions 0 ..
// FIRST+T-1 (the new tokens' included); query t attends to positions <= FIRST + t, as row FIRST+t
// of attention_forward over the whole sequence does. out [T,NH,HS]. SCORES is scratch of
// max(T, NH) * (FIRST+T) values (a decode step, T = 1, scores its heads at once). No dropout: this
// is inference. WINDOW as attention_forward's: query t sees positions FIRST + t - WINDOW .. FIRST + t
// (the cache keeps them all; the older ones are only not read).
template <typename F>
void attention_cached_forward(F* out, const F* q, const F* k, const F* v, int T, int first, int NH, int NKV, int HS,
                              F* scores, int window = -1);

// ---- loss.cpp ----------------------------------------------------------------------------------

// Softmax cross-entropy over logits[N,Vp], of which only columns [0,V) are real (Vp >= V pads the
// vocabulary; padded columns take no part). targets[N] in [0,V), or -1 to ignore that position.
// Writes losses[N] (may be null; 0 at ignored positions) and returns the mean over counted
// positions (0 when none counts). Throws InputError on a target outside [-1,V).
template <typename F>
double cross_entropy_forward(nd<F>* losses, const F* logits, const int32_t* targets, int N, int V,
                             int Vp);

// Writes dlogits[N,Vp] = dloss / count * (softmax(logits) - onehot(target)) on counted rows and
// zero on ignored rows and padded columns; count is the number of targets != -1. This is the
// gradient of dloss * (the mean returned by cross_entropy_forward).
template <typename F>
void cross_entropy_backward(F* dlogits, const F* logits, const int32_t* targets, int N, int V, int Vp,
                            nd<F> dloss = 1);

// ---- adamw.cpp ---------------------------------------------------------------------------------

// One AdamW step (Loshchilov & Hutter; PyTorch's AdamW, Megatron's adam with decoupled decay)
// over n parameters of one group, with moments m and v of the same type, updated in place:
//   m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2
//   p -= lr * ( (m / (1-beta1^t)) / (sqrt(v / (1-beta2^t)) + eps) + weight_decay * p )
// t is the 1-based step number. The caller passes weight_decay 0 for norms and biases.
template <typename F>
void adamw_step(F* param, const F* grad, F* m, F* v, size_t n, nd<F> lr, nd<F> beta1, nd<F> beta2,
                nd<F> eps, nd<F> weight_decay, int64_t t);

// Sum of squares of grad[n], in double. The global norm is sqrt of the sum over all groups (and
// ranks), which the caller takes.
template <typename F>
double grad_sum_squares(const F* grad, size_t n);

// grad *= scale, for clipping to a maximum global norm.
template <typename F>
void scale_inplace(F* grad, size_t n, nd<F> scale);

}  // namespace meg::cpu
