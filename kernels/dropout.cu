// Inverted dropout on the GPU with the CPU's counter-based mask, for X = fp32, bf16 or fp16.
//
// The CPU reference is ops/cpu/dropout.cpp; the launcher is declared in ops/cuda/ops.hpp.
//
// Element i is kept iff dropout_bits(stream, first + i) >= floor(p 2^32) (FIRST: the index of
// element 0 in the whole array the mask is defined on), and kept values are scaled by 1 / (1 - p).
// The mask is a pure function of the key and the index (ops/cpu/dropout_mask.hpp,
// the same header the CPU uses, compiled here for the device too), so the GPU drops exactly the
// elements the CPU drops, whatever the launch shape, and the backward regenerates the forward's
// mask instead of storing it. The scale is the CPU's fp32 scale, float(1 / (1 - p)), so fp32
// results equal the CPU's bit for bit.
//
// Elementwise and memory-bound: each thread takes W consecutive values (one 16-byte access per
// array; W = 8 for bf16/fp16, 4 for fp32) in a grid-stride loop, or one at a time when a pointer is
// misaligned. out may equal inp: each value is read before it is written, by the same thread.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common.cuh"
#include "ops/cpu/dropout_mask.hpp"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kBlock = 256;

template <typename X>
__device__ X keep_or_drop(X x, uint64_t stream_key, size_t index, uint64_t threshold, float scale) {
  return cpu::dropout_bits(stream_key, index) >= threshold ? X(float(x) * scale) : X(0.0f);
}

template <typename X, int W>
__global__ void dropout_kernel(X* out, const X* inp, size_t n, uint64_t stream_key, uint64_t first,
                               uint64_t threshold, float scale) {
  using V = Vec<X, W>;
  const size_t stride = size_t(gridDim.x) * blockDim.x * W;
  for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * W; i < n; i += stride) {
    if (i + W <= n) {
      V v = *reinterpret_cast<const V*>(inp + i);
#pragma unroll
      for (int j = 0; j < W; ++j) v.v[j] = keep_or_drop(v.v[j], stream_key, first + i + j, threshold, scale);
      *reinterpret_cast<V*>(out + i) = v;
    } else {
      for (size_t j = i; j < n; ++j) out[j] = keep_or_drop(inp[j], stream_key, first + j, threshold, scale);
    }
  }
}

}  // namespace

template <typename X>
void dropout_apply(X* out, const X* inp, size_t n, double p, uint64_t stream_key,
                   cudaStream_t stream, uint64_t first) {
  if (n == 0) return;
  const uint64_t threshold = cpu::dropout_threshold(p);
  const float scale = float(1.0 / (1.0 - p));
  constexpr int W = kVecWidth<X>;
  const bool vec = aligned16(out) && aligned16(inp);
  const unsigned grid = grid_stride_blocks(n, size_t(kBlock) * (vec ? W : 1));
  if (vec)
    dropout_kernel<X, W><<<grid, kBlock, 0, stream>>>(out, inp, n, stream_key, first, threshold, scale);
  else
    dropout_kernel<X, 1><<<grid, kBlock, 0, stream>>>(out, inp, n, stream_key, first, threshold, scale);
  MEG_CUDA_CHECK(cudaGetLastError());
}

template void dropout_apply<float>(float*, const float*, size_t, double, uint64_t, cudaStream_t, uint64_t);
template void dropout_apply<bf16>(bf16*, const bf16*, size_t, double, uint64_t, cudaStream_t, uint64_t);
template void dropout_apply<fp16>(fp16*, const fp16*, size_t, double, uint64_t, cudaStream_t, uint64_t);

}  // namespace meg::cuda
