// The sum of squares of an fp32 array (the global gradient norm's square) on the GPU, in a fixed
// order, so the same on every run.
//
// The CPU reference is ops/cpu/adamw.cpp (grad_sum_squares); the launchers are declared in
// ops/cuda/ops.hpp.
//
// Two stages, no atomics:
//   1. a grid of G blocks reads the array in 16-byte packs with a grid-stride loop; each thread
//      squares and adds in double, as the CPU does (no fp32 overflow of a huge finite value, and
//      chains of any length, for n up to ~10^10 elements, hence size_t indices). The block's
//      threads are added in a fixed tree (warp shuffles, then warp 0 over the warps) into
//      scratch[block];
//   2. one block adds the G partials the same way and writes the total.
// G depends on n alone (never on the GPU), so the bits of the result do too.
//
// Nothing is clamped or filtered: a NaN or an infinity anywhere makes the sum NaN or infinite, which
// is how fp16 training sees an overflowed gradient.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "common.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kBlock = 512;
constexpr int kWidth = 4;                 // floats per 16-byte pack
constexpr size_t kMinPacksPerThread = 8;  // below this a thread is not worth starting
constexpr size_t kMaxBlocks = 1024;       // enough to fill any current GPU; also the scratch size

size_t blocks_for(size_t n) {
  const size_t per_block = size_t(kBlock) * kWidth * kMinPacksPerThread;
  return std::clamp<size_t>((n + per_block - 1) / per_block, 1, kMaxBlocks);
}

// The sum of V over the block, valid in thread 0: a butterfly within each warp, then warp 0 adds
// the warps' sums in warp order.
__device__ double block_sum(double v) {
  __shared__ double warp_sums[kBlock / kWarp];
  v = warp_sum(v);
  if (threadIdx.x % kWarp == 0) warp_sums[threadIdx.x / kWarp] = v;
  __syncthreads();
  if (threadIdx.x < kWarp)
    v = warp_sum(threadIdx.x < kBlock / kWarp ? warp_sums[threadIdx.x] : 0.0);
  return v;
}

// Stage 1. VEC: the array is 16-byte aligned, so whole packs load as float4; the last n % 4
// elements (and, without VEC, every element) are read one at a time.
template <bool kVec>
__global__ void __launch_bounds__(kBlock)
    sum_squares_partial_kernel(double* partial, const float* x, size_t n) {
  const size_t thread = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  double acc = 0.0;
  if (kVec) {
    const size_t packs = n / kWidth;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (size_t p = thread; p < packs; p += stride) {
      const float4 v = x4[p];
      acc += double(v.x) * v.x;
      acc += double(v.y) * v.y;
      acc += double(v.z) * v.z;
      acc += double(v.w) * v.w;
    }
    for (size_t i = packs * kWidth + thread; i < n; i += stride) acc += double(x[i]) * x[i];
  } else {
    for (size_t i = thread; i < n; i += stride) acc += double(x[i]) * x[i];
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// Stage 2: one block; thread t adds partials t, t + kBlock, ... in order, then the block's tree.
__global__ void __launch_bounds__(kBlock)
    sum_squares_final_kernel(double* out, const double* partial, int count) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += kBlock) acc += partial[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) *out = acc;
}

}  // namespace

size_t sum_squares_scratch(size_t n) { return blocks_for(n); }

void sum_squares(double* out, const float* grad, size_t n, double* scratch, cudaStream_t stream) {
  const size_t blocks = blocks_for(n);
  if (aligned16(grad)) {
    sum_squares_partial_kernel<true><<<unsigned(blocks), kBlock, 0, stream>>>(scratch, grad, n);
  } else {
    sum_squares_partial_kernel<false><<<unsigned(blocks), kBlock, 0, stream>>>(scratch, grad, n);
  }
  MEG_CUDA_CHECK(cudaGetLastError());
  sum_squares_final_kernel<<<1, kBlock, 0, stream>>>(out, scratch, int(blocks));
  MEG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meg::cuda
