// Rotary position embedding (RoPE, "rotate_half" layout) on the GPU, in place on the q and k
// columns of the fused QKV activation, for X = fp32, bf16 or fp16 (fp32 arithmetic).
//
// The CPU reference is ops/cpu/rope.cpp; the launchers are declared in ops/cuda/ops.hpp.
//
// In each head of size HS, element i pairs with element i + HS/2, and the pair at position t turns
// by the angle t * inv_freq[i] (ops/rope_frequencies.hpp: theta^(-2i/HS) without scaling):
//   y[i] = x[i] cos - x[i+HS/2] sin,   y[i+HS/2] = x[i+HS/2] cos + x[i] sin.
// The angles' cos and sin come from a table the host computes once in double (rope_table), as
// the CPU does, so the GPU spends no time on transcendentals and agrees with the CPU's angles to
// fp32 rounding. Each thread rotates W consecutive pairs of one head (W = 8 for bf16/fp16, 4 for
// fp32): one 16-byte load and store for each half of the head, and the W (cos, sin) pairs. Both
// halves are read before either is written, by the same thread, so the rotation is in place. When
// HS/2 is not a multiple of W or qkv is misaligned, the same kernel runs with W = 1.
//
// A rotation is orthogonal, so the backward is the rotation by the opposite angle: the same kernel
// with sin negated.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "common.cuh"
#include "rotary.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"
#include "ops/rope_frequencies.hpp"

namespace meg::cuda {

namespace {

constexpr int kBlock = 256;

// Thread work item (row, head, vector i of W pairs) over the N rows and the NH + NKV rotated heads
// of each row. SIGN is +1 for the forward, -1 for the backward.
template <typename X, int W>
__global__ void rope_kernel(X* qkv, const float2* table, int N, int T, int NH, int NKV, int HS,
                            float sign) {
  using V = Vec<X, W>;
  const int half = HS / 2;
  const int vecs = half / W;                   // vectors per half head
  const int heads = NH + NKV;                  // q and k heads, which are adjacent in the row
  const size_t row_width = size_t(NH + 2 * NKV) * HS;
  const size_t total = size_t(N) * heads * vecs;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int i = int(idx % vecs) * W;
    const size_t head = idx / vecs;  // row * heads + h
    const int row = int(head / heads), h = int(head % heads);
    X* x = qkv + row * row_width + size_t(h) * HS + i;
    const Vec<float2, W> cs = *reinterpret_cast<const Vec<float2, W>*>(table + size_t(row % T) * half + i);
    const V a = *reinterpret_cast<const V*>(x);
    const V b = *reinterpret_cast<const V*>(x + half);
    V ya, yb;
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const float c = cs.v[j].x, s = sign * cs.v[j].y;
      const float x1 = float(a.v[j]), x2 = float(b.v[j]);
      const float2 y = rotate_pair(x1, x2, c, s);
      ya.v[j] = X(y.x);
      yb.v[j] = X(y.y);
    }
    *reinterpret_cast<V*>(x) = ya;
    *reinterpret_cast<V*>(x + half) = yb;
  }
}

template <typename X>
void rotate(X* qkv, const float* table, int B, int T, int NH, int NKV, int HS, float sign,
            cudaStream_t stream) {
  if (HS % 2 != 0) throw std::invalid_argument("rope: head size must be even");
  const int N = B * T;
  if (N <= 0 || NH + NKV <= 0 || HS <= 0) return;
  const auto* tab = reinterpret_cast<const float2*>(table);
  constexpr int W = kVecWidth<X>;
  const bool vec =
      (HS / 2) % W == 0 && aligned16(qkv) && aligned(table, sizeof(Vec<float2, W>));
  const size_t total = size_t(N) * (NH + NKV) * (HS / 2 / (vec ? W : 1));
  const unsigned grid = grid_stride_blocks(total, kBlock);
  if (vec)
    rope_kernel<X, W><<<grid, kBlock, 0, stream>>>(qkv, tab, N, T, NH, NKV, HS, sign);
  else
    rope_kernel<X, 1><<<grid, kBlock, 0, stream>>>(qkv, tab, N, T, NH, NKV, HS, sign);
  MEG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

std::vector<float> rope_table(int T, const std::vector<double>& inv_freq) {
  const int half = int(inv_freq.size());
  std::vector<float> table(size_t(std::max(T, 0)) * half * 2);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      // The CPU reference's angle, to the bit (ops/cpu/rope.cpp).
      const double angle = t * inv_freq[size_t(i)];
      table[(size_t(t) * half + i) * 2] = float(std::cos(angle));
      table[(size_t(t) * half + i) * 2 + 1] = float(std::sin(angle));
    }
  }
  return table;
}

std::vector<float> rope_table(int T, int HS, double theta) {
  if (HS % 2 != 0) throw std::invalid_argument("rope: head size must be even");
  return rope_table(T, rope_inv_freq(HS, theta));
}

template <typename X>
void rope_forward(X* qkv, const float* table, int B, int T, int NH, int NKV, int HS,
                  cudaStream_t stream) {
  rotate(qkv, table, B, T, NH, NKV, HS, 1.0f, stream);
}

template <typename X>
void rope_backward(X* dqkv, const float* table, int B, int T, int NH, int NKV, int HS,
                   cudaStream_t stream) {
  rotate(dqkv, table, B, T, NH, NKV, HS, -1.0f, stream);
}

#define MEG_INSTANTIATE(X)                                                                      \
  template void rope_forward<X>(X*, const float*, int, int, int, int, int, cudaStream_t);      \
  template void rope_backward<X>(X*, const float*, int, int, int, int, int, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
