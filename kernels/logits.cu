// What the inference paths read off the logits [N, Vp] (X = fp32, bf16 or fp16; the real
// vocabulary is columns [0, V), the rest is padding):
//   - logits_to_float: the real columns in fp32, what meg-generate samples from on the host;
//   - argmax_rows: each row's greedy token, what meg-eval compares its targets with (their
//     log-probabilities come from cross_entropy_fused, kernels/cross_entropy.cu), so that no
//     [N, V] array crosses to the host.
// The launchers are declared in ops/cuda/ops.hpp.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kArgmaxBlock = 512;  // threads per row: ~12 packs each for 50304 bf16 columns

// out[r, j] = logits[r, j] for j < V. Rows of V values need not be 16-byte aligned (V is the
// tokenizer's, often odd), so this moves one value per thread and step; it runs on a handful of
// rows (a decode step's), small next to the product that made them.
template <typename X>
__global__ void logits_to_float_kernel(float* out, const X* logits, int N, int V, int Vp) {
  const size_t total = size_t(N) * V;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const size_t r = idx / V, j = idx % V;
    out[idx] = to_float(logits[r * Vp + j]);
  }
}

// A candidate for the maximum: its value and column. NaN logits never win (every comparison with
// NaN is false).
struct Best {
  float value;
  int index;
};

// Whether a beats b: a larger value, or an equal one at a lower column (torch.argmax's choice
// among equal maxima).
__device__ bool beats(Best a, Best b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

__device__ Best warp_best(Best b) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const Best o{__shfl_xor_sync(0xffffffffu, b.value, offset),
                 __shfl_xor_sync(0xffffffffu, b.index, offset)};
    if (beats(o, b)) b = o;
  }
  return b;
}

// Block per row. Each thread scans its packs of W columns in column order, keeping the first
// maximum it meets (from no candidate at all, so that a row whose largest value is -inf gives its
// first -inf column, as the host's greedy choice does); then the block's candidates are reduced
// through shuffles and shared memory. A row of NaN everywhere gives column 0.
template <typename X, int W>
__global__ void __launch_bounds__(kArgmaxBlock)
    argmax_kernel(int32_t* out, const X* logits, int V, int Vp) {
  const X* x = logits + size_t(blockIdx.x) * Vp;
  Best best{-INFINITY, INT_MAX};
  for (int p = threadIdx.x; p < Vp / W; p += kArgmaxBlock) {
    const Vec<X, W> v = reinterpret_cast<const Vec<X, W>*>(x)[p];
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const int j = p * W + k;
      const float f = to_float(v.v[k]);
      if (j < V && beats({f, j}, best)) best = {f, j};
    }
  }
  __shared__ Best warps[kArgmaxBlock / kWarp];
  best = warp_best(best);
  if (threadIdx.x % kWarp == 0) warps[threadIdx.x / kWarp] = best;
  __syncthreads();
  if (threadIdx.x < kWarp) {
    best = threadIdx.x < kArgmaxBlock / kWarp ? warps[threadIdx.x] : Best{-INFINITY, INT_MAX};
    best = warp_best(best);
    if (threadIdx.x == 0) out[blockIdx.x] = best.index == INT_MAX ? 0 : best.index;
  }
}

}  // namespace

template <typename X>
void logits_to_float(float* out, const X* logits, int N, int V, int Vp, cudaStream_t stream) {
  if (N <= 0 || V <= 0) return;
  logits_to_float_kernel<X>
      <<<grid_stride_blocks(size_t(N) * V, kBlock), kBlock, 0, stream>>>(out, logits, N, V, Vp);
  MEG_CUDA_CHECK(cudaGetLastError());
}

template <typename X>
void argmax_rows(int32_t* out, const X* logits, int N, int V, int Vp, cudaStream_t stream) {
  if (N <= 0) return;
  constexpr int W = kVecWidth<X>;
  if (Vp % W == 0 && aligned16(logits))
    argmax_kernel<X, W><<<N, kArgmaxBlock, 0, stream>>>(out, logits, V, Vp);
  else
    argmax_kernel<X, 1><<<N, kArgmaxBlock, 0, stream>>>(out, logits, V, Vp);
  MEG_CUDA_CHECK(cudaGetLastError());
}

#define MEG_INSTANTIATE(X)                                                         \
  template void logits_to_float<X>(float*, const X*, int, int, int, cudaStream_t); \
  template void argmax_rows<X>(int32_t*, const X*, int, int, int, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
