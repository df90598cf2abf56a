// Softmax cross-entropy fused with its backward on the GPU (llm.c's fused_classifier), for logits
// of type X (fp32, bf16 or fp16) with fp32 arithmetic.
//
// The CPU reference is ops/cpu/loss.cpp (cross_entropy_forward / cross_entropy_backward); the
// launcher is declared in ops/cuda/ops.hpp.
//
// One block per row of logits [N, Vp]. The row (100 KB for GPT-2's 50304 bf16 columns) is
// read twice:
//   1. every thread keeps an online (max, sum of exp(x - max)) pair over its columns: a pack of
//      values raises the running max once and rescales the running sum by exp(old - new), so the
//      row is read once and exp never overflows, however large the logits. The pairs of the
//      block's threads are then merged by butterflies over each warp and over the warps, in a
//      fixed order: the result is the same bit for bit on every run. The loss is
//      log(sum) + max - x[target];
//   2. when dloss is not zero, the row is read again (mostly from L2, the block having just read
//      it) and overwritten IN PLACE by its gradient dloss * (softmax - onehot(target)).
// Padded columns [V, Vp) are skipped by the softmax and get a zero gradient; an ignored row
// (target -1) is not read at all: its loss is 0 and its gradient, if asked for, 0.
//
// Each thread moves 16-byte packs (4 floats, or 8 bf16/fp16 values), two in flight per step of
// pass 1. That needs Vp to be a multiple of the pack and an aligned logits pointer (then every row
// starts aligned); otherwise the same kernel runs one element at a time (W = 1).
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kBlock = 1024;  // threads per row: ~6 packs each for 50304 bf16 columns

// exp(x - max) = 2^(x log2 e - max log2 e), MAX2 = max * log2(e) computed once: an fma and an ex2.
// fast_exp2 rather than expf: the kernel takes one or two exponentials per logit, and with expf
// they, not the memory, set its speed. Its flush to zero under 2^-126 drops probabilities 1e-38
// below the max's.
__device__ float exp_minus(float x, float max2) { return fast_exp2(fmaf(x, kLog2e, -max2)); }

// A softmax partial: the max of some logits and the sum of exp(logit - max) over them. The empty
// partial is (-inf, 0).
struct MaxSum {
  float max;
  float sum;
};

// Merge two partials. Each sum is rescaled to the common max (not when it already is that max:
// exp(-inf - -inf) would be NaN for two empty partials). Symmetric bit for bit: a + b == b + a in
// floating point, so both lanes of a butterfly get the same result.
__device__ MaxSum merge(MaxSum a, MaxSum b) {
  MaxSum r;
  r.max = fmaxf(a.max, b.max);
  const float r2 = r.max * kLog2e;
  const float sa = a.max == r.max ? a.sum : a.sum * exp_minus(a.max, r2);
  const float sb = b.max == r.max ? b.sum : b.sum * exp_minus(b.max, r2);
  r.sum = sa + sb;
  return r;
}

// Adds the real columns among the pack's W (first column J0) to the running partial: the max is
// raised once per pack. A NaN logit never becomes the max (fmaxf drops it) but reaches the sum
// through exp(NaN), so the loss comes out NaN, as it should.
template <typename X, int W>
__device__ void add_pack(MaxSum& acc, const Vec<X, W>& p, int j0, int V) {
  const bool full = j0 + W <= V;  // every pack but the row's last one or two
  float m = acc.max;
#pragma unroll
  for (int k = 0; k < W; ++k)
    if (full || j0 + k < V) m = fmaxf(m, to_float(p.v[k]));
  const float m2 = m * kLog2e;
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < W; ++k)
    if (full || j0 + k < V) s += exp_minus(to_float(p.v[k]), m2);
  acc.sum = (acc.max == m ? acc.sum : acc.sum * exp_minus(acc.max, m2)) + s;
  acc.max = m;
}

// A butterfly over the warp: every lane ends with the merge of the 32 lanes' partials.
__device__ MaxSum warp_merge(MaxSum acc) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    MaxSum other;
    other.max = __shfl_xor_sync(0xffffffffu, acc.max, offset);
    other.sum = __shfl_xor_sync(0xffffffffu, acc.sum, offset);
    acc = merge(acc, other);
  }
  return acc;
}

// The partial of the whole block, returned to every thread: a butterfly within each warp, then
// every warp does the same butterfly over the 32 warps' partials (the same bits in each warp), so
// one barrier is enough.
__device__ MaxSum block_merge(MaxSum acc) {
  static_assert(kBlock / kWarp == kWarp, "one warp partial per lane");
  __shared__ MaxSum warp_partial[kBlock / kWarp];
  acc = warp_merge(acc);
  if (threadIdx.x % kWarp == 0) warp_partial[threadIdx.x / kWarp] = acc;
  __syncthreads();
  return warp_merge(warp_partial[threadIdx.x % kWarp]);
}

// Ignored rows: the gradient, if asked for, is zero.
template <typename X, int W>
__device__ void zero_row(X* x, int packs) {
  Vec<X, W> zero;
#pragma unroll
  for (int k = 0; k < W; ++k) zero.v[k] = from_float<X>(0.0f);
  for (int p = threadIdx.x; p < packs; p += kBlock) reinterpret_cast<Vec<X, W>*>(x)[p] = zero;
}

// Pass 1: the row's partial over its real columns [0, V), to every thread of the block; two packs
// in flight per step.
template <typename X, int W>
__device__ MaxSum row_partial(const X* x, int packs, int V) {
  MaxSum acc{-INFINITY, 0.0f};
  for (int p = threadIdx.x; p < packs; p += 2 * kBlock) {
    const Vec<X, W> a = reinterpret_cast<const Vec<X, W>*>(x)[p];
    const bool has_b = p + kBlock < packs;
    Vec<X, W> b;
    if (has_b) b = reinterpret_cast<const Vec<X, W>*>(x)[p + kBlock];
    add_pack(acc, a, p * W, V);
    if (has_b) add_pack(acc, b, (p + kBlock) * W, V);
  }
  return block_merge(acc);
}

// Pass 2: dx_j = dloss * exp(x_j - max) / sum - dloss [j == target], 0 on padded columns; TARGET
// is a column of this row or -1 (the target lies in another rank's columns).
template <typename X, int W>
__device__ void write_gradient(X* x, int packs, int V, int target, MaxSum row, float dloss) {
  const float scale = dloss / row.sum;
  const float max2 = row.max * kLog2e;
  for (int p = threadIdx.x; p < packs; p += kBlock) {
    Vec<X, W> v = reinterpret_cast<const Vec<X, W>*>(x)[p];
    const bool full = (p + 1) * W <= V;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const int j = p * W + k;
      float d = 0.0f;
      if (full || j < V) d = exp_minus(to_float(v.v[k]), max2) * scale;
      if (j == target) d -= dloss;
      v.v[k] = from_float<X>(d);
    }
    reinterpret_cast<Vec<X, W>*>(x)[p] = v;
  }
}

template <typename X, int W>
__global__ void __launch_bounds__(kBlock)
    cross_entropy_kernel(X* logits, float* losses, const int32_t* targets, int V, int Vp,
                         float dloss) {
  X* x = logits + size_t(blockIdx.x) * Vp;
  const int packs = Vp / W;
  const int target = targets[blockIdx.x];

  if (target < 0) {  // ignored position
    if (threadIdx.x == 0) losses[blockIdx.x] = 0.0f;
    if (dloss != 0.0f) zero_row<X, W>(x, packs);
    return;
  }
  // Read before any thread of the block overwrites the row: block_merge's barriers order it
  // before pass 2.
  const float x_target = threadIdx.x == 0 ? to_float(x[target]) : 0.0f;
  const MaxSum row = row_partial<X, W>(x, packs, V);
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(row.sum) + row.max - x_target;
  if (dloss != 0.0f) write_gradient<X, W>(x, packs, V, target, row, dloss);
}

// Vocabulary parallelism, launch 1: each row's (max, sum, target logit) over this rank's columns,
// the target logit 0 where another rank holds the target.
template <typename X, int W>
__global__ void __launch_bounds__(kBlock)
    cross_entropy_partial_kernel(const X* logits, float* partials, const int32_t* targets, int V, int Vp,
                                 int vocab_begin) {
  const X* x = logits + size_t(blockIdx.x) * Vp;
  const int target = targets[blockIdx.x] - vocab_begin;
  float* out = partials + 3 * size_t(blockIdx.x);
  if (targets[blockIdx.x] < 0) {
    if (threadIdx.x == 0) out[0] = -INFINITY, out[1] = 0.0f, out[2] = 0.0f;
    return;
  }
  const MaxSum row = row_partial<X, W>(x, Vp / W, V);
  if (threadIdx.x == 0) {
    out[0] = row.max;
    out[1] = row.sum;
    out[2] = target >= 0 && target < V ? to_float(x[target]) : 0.0f;
  }
}

// Launch 2, after the partials of all RANKS are gathered ([RANKS][N][3]): every rank merges them
// in rank order (the same bits everywhere), so all ranks hold the same loss, and writes its
// columns' gradient in place.
template <typename X, int W>
__global__ void __launch_bounds__(kBlock)
    cross_entropy_parallel_kernel(X* logits, float* losses, const float* partials, int ranks, int N,
                                  const int32_t* targets, int V, int Vp, int vocab_begin, float dloss) {
  X* x = logits + size_t(blockIdx.x) * Vp;
  const int packs = Vp / W;
  if (targets[blockIdx.x] < 0) {
    if (threadIdx.x == 0) losses[blockIdx.x] = 0.0f;
    if (dloss != 0.0f) zero_row<X, W>(x, packs);
    return;
  }
  MaxSum row{-INFINITY, 0.0f};
  float x_target = 0.0f;  // one rank's is the logit, the others' are 0: the sum is exact
  for (int r = 0; r < ranks; ++r) {
    const float* p = partials + 3 * (size_t(r) * N + blockIdx.x);
    row = merge(row, MaxSum{p[0], p[1]});
    x_target += p[2];
  }
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(row.sum) + row.max - x_target;
  if (dloss != 0.0f) write_gradient<X, W>(x, packs, V, targets[blockIdx.x] - vocab_begin, row, dloss);
}

}  // namespace

template <typename X>
void cross_entropy_fused(X* logits, float* losses, const int32_t* targets, int N, int V, int Vp,
                         float dloss, cudaStream_t stream) {
  if (N <= 0) return;
  constexpr int W = kVecWidth<X>;
  if (Vp % W == 0 && aligned16(logits)) {
    cross_entropy_kernel<X, W><<<N, kBlock, 0, stream>>>(logits, losses, targets, V, Vp, dloss);
  } else {
    cross_entropy_kernel<X, 1><<<N, kBlock, 0, stream>>>(logits, losses, targets, V, Vp, dloss);
  }
  MEG_CUDA_CHECK(cudaGetLastError());
}

template <typename X>
void cross_entropy_partials(const X* logits, float* partials, const int32_t* targets, int N, int V, int Vp,
                            int vocab_begin, cudaStream_t stream) {
  if (N <= 0) return;
  constexpr int W = kVecWidth<X>;
  if (Vp % W == 0 && aligned16(logits))
    cross_entropy_partial_kernel<X, W><<<N, kBlock, 0, stream>>>(logits, partials, targets, V, Vp, vocab_begin);
  else
    cross_entropy_partial_kernel<X, 1><<<N, kBlock, 0, stream>>>(logits, partials, targets, V, Vp, vocab_begin);
  MEG_CUDA_CHECK(cudaGetLastError());
}

template <typename X>
void cross_entropy_parallel(X* logits, float* losses, const float* partials, int ranks, const int32_t* targets,
                            int N, int V, int Vp, int vocab_begin, float dloss, cudaStream_t stream) {
  if (N <= 0) return;
  constexpr int W = kVecWidth<X>;
  if (Vp % W == 0 && aligned16(logits))
    cross_entropy_parallel_kernel<X, W><<<N, kBlock, 0, stream>>>(logits, losses, partials, ranks, N, targets, V, Vp,
                                                                  vocab_begin, dloss);
  else
    cross_entropy_parallel_kernel<X, 1><<<N, kBlock, 0, stream>>>(logits, losses, partials, ranks, N, targets, V, Vp,
                                                                  vocab_begin, dloss);
  MEG_CUDA_CHECK(cudaGetLastError());
}

#define MEG_INSTANTIATE(X)                                                                    \
  template void cross_entropy_fused<X>(X*, float*, const int32_t*, int, int, int, float,     \
                                       cudaStream_t);                                         \
  template void cross_entropy_partials<X>(const X*, float*, const int32_t*, int, int, int, int, \
                                          cudaStream_t);                                      \
  template void cross_entropy_parallel<X>(X*, float*, const float*, int, const int32_t*, int, int, \
                                          int, int, float, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
