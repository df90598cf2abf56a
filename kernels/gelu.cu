// GELU (tanh approximation, GPT-2's "gelu_new") forward and backward on the GPU, for activations
// of type X (fp32, bf16 or fp16) with fp32 arithmetic.
//
// The CPU reference is ops/cpu/activations.cpp; the launchers are declared in ops/cuda/ops.hpp.
//
// The formula. 0.5 x (1 + tanh u) is the same function as x * sigmoid(2u), and we compute the
// latter: for very negative x, 1 + tanh u cancels to a few ulps of 1 in fp32 while
// sigmoid(2u) = 1 / (1 + exp(-2u)) keeps its full relative precision, and the derivative
// simplifies the same way (below). The backward needs both sigmoid(2u) and 1 - sigmoid(2u); both
// come from one exp(-|2u|), which can neither overflow (to inf * 0 = NaN for large |x|) nor
// cancel.
//
// Purely elementwise and memory-bound, so the only thing that matters is moving bytes: each thread
// handles one 16-byte pack per step (4 floats, or 8 bf16/fp16 values) with one load/store per
// array, in a grid-stride loop. 16-byte accesses need 16-byte aligned addresses, so the launcher
// checks the pointers and falls back to one element per access (the same kernel with W = 1) when
// one is misaligned, e.g. a view that starts mid-tensor. The ragged tail (n not a multiple of W)
// is done one element at a time.
//
// In place: out may equal inp, and dinp may equal dout. Every element is read before it is
// written, by the same thread, so aliasing is safe (and the pointers are not __restrict__).
#include <cuda_runtime.h>

#include <cstddef>

#include "activations.cuh"
#include "common.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kBlock = 256;

// gelu'(x) = s + 2 x s (1 - s) du/dx,  du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// (the CPU's 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx, since 1 - tanh^2 u = 4 s (1 - s)).
// With t = exp(-|2u|): sigmoid(|2u|) = 1 / (1 + t) and sigmoid(-|2u|) = t / (1 + t).
__device__ float gelu_grad(float x) {
  const float u = kGeluK * (x + kGeluA * x * x * x);
  const float t = expf(-2.0f * fabsf(u));
  const float hi = 1.0f / (1.0f + t), lo = t * hi;
  const float s = u >= 0.0f ? hi : lo, sc = u >= 0.0f ? lo : hi;  // s and 1 - s
  const float du = kGeluK * (1.0f + 3.0f * kGeluA * x * x);
  return s + 2.0f * x * du * s * sc;
}

// Thread t handles elements [W t, W t + W) of each stride, as one pack when all W are in range.
template <typename X, int W>
__global__ void gelu_forward_kernel(X* out, const X* inp, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x * W;
  for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * W; i < n; i += stride) {
    if (i + W <= n) {
      Vec<X, W> x = *reinterpret_cast<const Vec<X, W>*>(inp + i);
#pragma unroll
      for (int k = 0; k < W; ++k) x.v[k] = from_float<X>(gelu(to_float(x.v[k])));
      *reinterpret_cast<Vec<X, W>*>(out + i) = x;
    } else {
      for (size_t j = i; j < n; ++j) out[j] = from_float<X>(gelu(to_float(inp[j])));
    }
  }
}

// dinp = gelu'(inp) * dout (written), same layout as the forward.
template <typename X, int W>
__global__ void gelu_backward_kernel(X* dinp, const X* dout, const X* inp, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x * W;
  for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * W; i < n; i += stride) {
    if (i + W <= n) {
      const Vec<X, W> x = *reinterpret_cast<const Vec<X, W>*>(inp + i);
      Vec<X, W> d = *reinterpret_cast<const Vec<X, W>*>(dout + i);
#pragma unroll
      for (int k = 0; k < W; ++k)
        d.v[k] = from_float<X>(gelu_grad(to_float(x.v[k])) * to_float(d.v[k]));
      *reinterpret_cast<Vec<X, W>*>(dinp + i) = d;
    } else {
      for (size_t j = i; j < n; ++j)
        dinp[j] = from_float<X>(gelu_grad(to_float(inp[j])) * to_float(dout[j]));
    }
  }
}

}  // namespace

template <typename X>
void gelu_forward(X* out, const X* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int W = kVecWidth<X>;
  if (aligned16(out) && aligned16(inp)) {
    gelu_forward_kernel<X, W>
        <<<grid_stride_blocks(n, kBlock * W), kBlock, 0, stream>>>(out, inp, n);
  } else {
    gelu_forward_kernel<X, 1><<<grid_stride_blocks(n, kBlock), kBlock, 0, stream>>>(out, inp, n);
  }
  MEG_CUDA_CHECK(cudaGetLastError());
}

template <typename X>
void gelu_backward(X* dinp, const X* dout, const X* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int W = kVecWidth<X>;
  if (aligned16(dinp) && aligned16(dout) && aligned16(inp)) {
    gelu_backward_kernel<X, W>
        <<<grid_stride_blocks(n, kBlock * W), kBlock, 0, stream>>>(dinp, dout, inp, n);
  } else {
    gelu_backward_kernel<X, 1>
        <<<grid_stride_blocks(n, kBlock), kBlock, 0, stream>>>(dinp, dout, inp, n);
  }
  MEG_CUDA_CHECK(cudaGetLastError());
}

#define MEG_INSTANTIATE(X)                                                    \
  template void gelu_forward<X>(X*, const X*, size_t, cudaStream_t);          \
  template void gelu_backward<X>(X*, const X*, const X*, size_t, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
