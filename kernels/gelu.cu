// GELU (tanh approximation, GPT-2's "gelu_new") forward and backward on the GPU, fp32.
//
// The CPU reference is ops/cpu/activations.cpp; the launchers are declared in ops/cuda/ops.hpp.
//
// Purely elementwise and memory-bound, so the only thing that matters is moving bytes: each thread
// handles 4 consecutive floats per step with one 16-byte load/store (float4) per array, in a
// grid-stride loop. float4 accesses need 16-byte aligned addresses, so the launcher checks the
// pointers and falls back to scalar accesses (same kernel, kVec = false) when one is misaligned,
// e.g. a view that starts mid-tensor. The ragged tail (n not a multiple of 4) is done scalar too.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kVecWidth = 4;            // floats per float4
constexpr size_t kMaxBlocks = 1 << 16;  // the grid-stride loop covers the rest

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

// gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
__device__ float gelu(float x) {
  const float u = kGeluK * (x + kGeluA * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx,  du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
__device__ float gelu_grad(float x) {
  const float u = kGeluK * (x + kGeluA * x * x * x);
  const float th = tanhf(u);
  const float du = kGeluK * (1.0f + 3.0f * kGeluA * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

unsigned grid_for(size_t n) {
  const size_t per_block = size_t(kBlock) * kVecWidth;
  return unsigned(std::min((n + per_block - 1) / per_block, kMaxBlocks));
}

// Thread t handles elements [4t, 4t + 4) of each stride. With kVec the 4 move as one float4; out
// may equal inp since each element is read before it is written, by the same thread.
template <bool kVec>
__global__ void gelu_forward_kernel(float* out, const float* inp, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x * kVecWidth;
  for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVecWidth; i < n; i += stride) {
    if (kVec && i + kVecWidth <= n) {
      float4 x = *reinterpret_cast<const float4*>(inp + i);
      x.x = gelu(x.x);
      x.y = gelu(x.y);
      x.z = gelu(x.z);
      x.w = gelu(x.w);
      *reinterpret_cast<float4*>(out + i) = x;
    } else {
      const size_t end = i + kVecWidth < n ? i + kVecWidth : n;
      for (size_t j = i; j < end; ++j) out[j] = gelu(inp[j]);
    }
  }
}

// dinp += gelu'(inp) * dout, same layout as the forward.
template <bool kVec>
__global__ void gelu_backward_kernel(float* dinp, const float* dout, const float* inp, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x * kVecWidth;
  for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVecWidth; i < n; i += stride) {
    if (kVec && i + kVecWidth <= n) {
      const float4 x = *reinterpret_cast<const float4*>(inp + i);
      const float4 dy = *reinterpret_cast<const float4*>(dout + i);
      float4 dx = *reinterpret_cast<const float4*>(dinp + i);
      dx.x += gelu_grad(x.x) * dy.x;
      dx.y += gelu_grad(x.y) * dy.y;
      dx.z += gelu_grad(x.z) * dy.z;
      dx.w += gelu_grad(x.w) * dy.w;
      *reinterpret_cast<float4*>(dinp + i) = dx;
    } else {
      const size_t end = i + kVecWidth < n ? i + kVecWidth : n;
      for (size_t j = i; j < end; ++j) dinp[j] += gelu_grad(inp[j]) * dout[j];
    }
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (aligned16(out) && aligned16(inp)) {
    gelu_forward_kernel<true><<<grid_for(n), kBlock, 0, stream>>>(out, inp, n);
  } else {
    gelu_forward_kernel<false><<<grid_for(n), kBlock, 0, stream>>>(out, inp, n);
  }
  MEG_CUDA_CHECK(cudaGetLastError());
}

void gelu_backward(float* dinp, const float* dout, const float* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (aligned16(dinp) && aligned16(dout) && aligned16(inp)) {
    gelu_backward_kernel<true><<<grid_for(n), kBlock, 0, stream>>>(dinp, dout, inp, n);
  } else {
    gelu_backward_kernel<false><<<grid_for(n), kBlock, 0, stream>>>(dinp, dout, inp, n);
  }
  MEG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meg::cuda
