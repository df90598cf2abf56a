// SwiGLU (Llama's MLP activation) forward and backward on the GPU, for activations of type X (fp32,
// bf16 or fp16) with fp32 arithmetic.
//
// The CPU reference is ops/cpu/activations.cpp; the launchers are declared in ops/cuda/ops.hpp.
// The input row is [gate (H) | up (H)]: out = silu(gate) * up, silu(g) = g * sigmoid(g).
//
// Memory-bound and elementwise within a row, so the layout is chosen for the accesses: block
// (x, y) covers a tile of columns of rows y, y + gridDim.y, ...; each thread takes one 16-byte
// pack (4 floats, or 8 bf16/fp16 values) of gate, up and out at the same column. 16-byte accesses
// need H to be a multiple of the pack and 16-byte aligned pointers (then every row starts
// aligned); otherwise the launcher runs the same kernel one element at a time (W = 1).
//
// The backward needs sigmoid(g) and 1 - sigmoid(g): both come from one exp(-|g|), which can
// neither overflow (to inf * 0 = NaN for large |g|) nor cancel (1 - s when s rounds to 1).
//
// The backward may run in place with dinp == inp: each thread reads its gate and up values before
// writing their gradients at the same places.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "activations.cuh"
#include "common.cuh"
#include "overlapped_launch.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kMaxBlock = 256;
constexpr int kMaxGridY = 65535;  // CUDA's limit; the row loop covers the rest

// Packs per row: H / W. Threads per block: the packs of a row rounded up to whole warps, at most
// kMaxBlock, so that a narrow row does not leave most of a block idle.
struct Launch {
  dim3 grid, block;
};
Launch launch_for(int N, int packs) {
  const int threads = std::min(kMaxBlock, ceil_div(packs, kWarp) * kWarp);
  return {dim3(ceil_div(packs, threads), std::min(N, kMaxGridY)), dim3(threads)};
}

template <typename X, int W>
__global__ void swiglu_forward_kernel(X* out, const X* inp, int N, int H) {
  // Launched overlapped (kernels/overlapped_launch.cuh): its blocks are resident when the product
  // that wrote INP ends.
  wait_for_previous_kernel();
  allow_next_kernel();
  const int c = (blockIdx.x * blockDim.x + threadIdx.x) * W;  // first column of this thread's pack
  if (c >= H) return;
  for (int row = blockIdx.y; row < N; row += gridDim.y) {
    const X* gate = inp + size_t(row) * 2 * H + c;
    const Vec<X, W> g = *reinterpret_cast<const Vec<X, W>*>(gate);
    const Vec<X, W> u = *reinterpret_cast<const Vec<X, W>*>(gate + H);
    Vec<X, W> y;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float gk = to_float(g.v[k]);
      y.v[k] = from_float<X>(silu(gk) * to_float(u.v[k]));
    }
    *reinterpret_cast<Vec<X, W>*>(out + size_t(row) * H + c) = y;
  }
}

// d gate = dout * up * silu'(g),  silu'(g) = s (1 + g (1 - s)),  s = sigmoid(g);
// d up = dout * silu(g) = dout * g * s.
template <typename X, int W>
__global__ void swiglu_backward_kernel(X* dinp, const X* dout, const X* inp, int N, int H) {
  const int c = (blockIdx.x * blockDim.x + threadIdx.x) * W;
  if (c >= H) return;
  for (int row = blockIdx.y; row < N; row += gridDim.y) {
    const size_t in = size_t(row) * 2 * H + c;
    const Vec<X, W> g = *reinterpret_cast<const Vec<X, W>*>(inp + in);
    const Vec<X, W> u = *reinterpret_cast<const Vec<X, W>*>(inp + in + H);
    const Vec<X, W> dy = *reinterpret_cast<const Vec<X, W>*>(dout + size_t(row) * H + c);
    Vec<X, W> dg, du;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float gk = to_float(g.v[k]), dyk = to_float(dy.v[k]);
      // With t = exp(-|g|): sigmoid(|g|) = 1 / (1 + t), sigmoid(-|g|) = t / (1 + t).
      const float t = expf(-fabsf(gk));
      const float hi = 1.0f / (1.0f + t), lo = t * hi;
      const float s = gk >= 0.0f ? hi : lo, sc = gk >= 0.0f ? lo : hi;  // s and 1 - s
      dg.v[k] = from_float<X>(dyk * to_float(u.v[k]) * s * (1.0f + gk * sc));
      du.v[k] = from_float<X>(dyk * gk * s);
    }
    *reinterpret_cast<Vec<X, W>*>(dinp + in) = dg;
    *reinterpret_cast<Vec<X, W>*>(dinp + in + H) = du;
  }
}

}  // namespace

template <typename X>
void swiglu_forward(X* out, const X* inp, int N, int H, cudaStream_t stream) {
  if (N <= 0 || H <= 0) return;
  constexpr int W = kVecWidth<X>;
  if (H % W == 0 && aligned16(out) && aligned16(inp)) {
    const Launch l = launch_for(N, H / W);
    launch_overlapped(swiglu_forward_kernel<X, W>, l.grid, l.block, 0, stream, out, inp, N, H);
  } else {
    const Launch l = launch_for(N, H);
    launch_overlapped(swiglu_forward_kernel<X, 1>, l.grid, l.block, 0, stream, out, inp, N, H);
  }
}

template <typename X>
void swiglu_backward(X* dinp, const X* dout, const X* inp, int N, int H, cudaStream_t stream) {
  if (N <= 0 || H <= 0) return;
  constexpr int W = kVecWidth<X>;
  if (H % W == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp)) {
    const Launch l = launch_for(N, H / W);
    swiglu_backward_kernel<X, W><<<l.grid, l.block, 0, stream>>>(dinp, dout, inp, N, H);
  } else {
    const Launch l = launch_for(N, H);
    swiglu_backward_kernel<X, 1><<<l.grid, l.block, 0, stream>>>(dinp, dout, inp, N, H);
  }
  MEG_CUDA_CHECK(cudaGetLastError());
}

#define MEG_INSTANTIATE(X)                                                            \
  template void swiglu_forward<X>(X*, const X*, int, int, cudaStream_t);              \
  template void swiglu_backward<X>(X*, const X*, const X*, int, int, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
