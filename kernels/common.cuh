// Helpers shared by the kernels of this folder: the 16-byte vector of activations, conversions
// between X and fp32, warp sums, and the sizes of launches. One definition each, so that every
// kernel moves, converts and adds its values the same way.
//
// X, the activation type, is float, bf16 or fp16 (ops/cuda/ops.hpp); arithmetic is fp32 whatever
// X is, and X is only the storage.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

constexpr int kWarp = 32;

// W consecutive values of T moved as one access: 16 bytes for X on the vector path
// (W = kVecWidth<X>: 8 for bf16/fp16, 4 for fp32), and the same kernels run with W = 1 when a
// pointer or a row is not 16-byte aligned.
template <typename T, int W>
struct alignas(sizeof(T) * W) Vec {
  T v[W];
};

template <typename X>
constexpr int kVecWidth = 16 / sizeof(X);

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Null counts as aligned: an absent optional array does not force the one-element path.
inline bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}
inline bool aligned16(const void* p) { return aligned(p, 16); }

// The grid of a grid-stride loop over N items, PER_BLOCK items per block and step: enough blocks
// to cover the items once, at most kMaxGridStrideBlocks (the loop covers the rest).
constexpr size_t kMaxGridStrideBlocks = 1 << 16;
inline unsigned grid_stride_blocks(size_t n, size_t per_block) {
  return unsigned(std::min((n + per_block - 1) / per_block, kMaxGridStrideBlocks));
}

// The multiprocessors of the current device, which persistent and split grids are sized by.
inline int multiprocessors() {
  int device = 0, sms = 0;
  MEG_CUDA_CHECK(cudaGetDevice(&device));
  MEG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// The most dynamic shared memory a block of KERNEL can have on the current device (the device's
// limit for a block less the kernel's static shared memory), granted to the kernel: for kernels
// that size what they keep in shared memory by what fits. Call once per kernel.
template <typename Kernel>
size_t grant_most_shared_memory(Kernel* kernel) {
  int device = 0, optin = 0;
  MEG_CUDA_CHECK(cudaGetDevice(&device));
  MEG_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  MEG_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  const size_t bytes = size_t(optin) - attributes.sharedSizeBytes;
  MEG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  return bytes;
}

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(bf16 v) { return __bfloat162float(v); }
__device__ inline float to_float(fp16 v) { return __half2float(v); }

// Round to nearest even, as the host's __float2bfloat16 / __float2half.
template <typename X>
__device__ inline X from_float(float v) {
  if constexpr (std::is_same_v<X, float>) return v;
  else if constexpr (std::is_same_v<X, bf16>) return __float2bfloat16(v);
  else return __float2half(v);
}

// Sum of v over the 32 lanes of the warp, returned to every lane. The butterfly (xor) pattern adds
// in the same order on every run and leaves the same, identically rounded sum in every lane.
template <typename T>
__device__ inline T warp_sum(T v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

constexpr float kLog2e = 1.4426950408889634f;

// 2^x by the special-function unit (one MUFU.EX2, relative error about 2^-22) where expf takes
// seven instructions. Results under 2^-126 flush to zero; ex2(-inf) = 0 and ex2(NaN) = NaN.
__device__ inline float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace meg::cuda
