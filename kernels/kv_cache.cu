// Appending a batch of tokens' keys and values to the KV cache of the inference path, for X = fp32,
// bf16 or fp16 (fp32 arithmetic).
//
// The cache (ops/cuda/ops.hpp): per layer, K and V arrays [slots, NKV, max_length, HS]. Each
// sequence (slot) keeps a kv head's keys contiguous in position order, so that the attention of a
// query (kernels/cached_attention.cu) streams them with coalesced 16-byte loads.
//
// A batch of the inference path mixes tokens of several slots at their own positions (a prompt
// here, one decoded token there), so the training's RoPE (kernels/rope.cu), which turns row t of a
// sequence by position t, does not fit: this kernel takes each token's position from an array.
// In one pass over the fused QKV projection qkv [N, (NH + 2*NKV) * HS] it
//   - rotates q and k in place by the token's position, with rope.cu's rotation ("rotate_half":
//     element i pairs with i + HS/2) and its cos/sin table (rope_table), when a table is given;
//   - writes the (rotated) k and the v of the token into the cache at (slot, position).
// q stays in qkv for the attention. k and v stay there too: a fresh prompt's attention reads them
// from qkv (attention_forward over its rows) rather than from the cache.
//
// Each thread takes W pairs of one head of one token (W = 8 for bf16/fp16, 4 for fp32): one
// 16-byte load and store for each half of the head, the same access pattern as rope.cu. Without a
// table the q heads are not visited at all. When HS/2 is not a multiple of W or an array is
// misaligned, the same kernel runs with W = 1. The launch overlaps the kernel before it
// (kernels/overlapped_launch.cuh), as the decode step's other kernels.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "common.cuh"
#include "overlapped_launch.cuh"
#include "rotary.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kBlock = 256;

// Work item (token row, head, vector i of W pairs) over the heads [first, NH + 2*NKV) of each row:
// first = 0 with RoPE (q is rotated), NH without (only k and v move).
template <typename X, int W>
__global__ void kv_cache_append_kernel(X* qkv, X* k_cache, X* v_cache, const int32_t* slots,
                                       const int32_t* positions, const float2* table, int N, int NH,
                                       int NKV, int HS, int max_length) {
  using V = Vec<X, W>;
  wait_for_previous_kernel();  // the projection that wrote qkv
  allow_next_kernel();
  const int half = HS / 2;
  const int vecs = half / W;  // vectors per half head
  const int first = table ? 0 : NH;
  const int heads = NH + 2 * NKV - first;
  const size_t row_width = size_t(NH + 2 * NKV) * HS;
  const size_t total = size_t(N) * heads * vecs;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int i = int(idx % vecs) * W;
    const size_t item = idx / vecs;  // row * heads + (h - first)
    const int row = int(item / heads), h = first + int(item % heads);
    const int pos = positions[row];
    X* x = qkv + row * row_width + size_t(h) * HS + i;
    V a = *reinterpret_cast<const V*>(x);
    V b = *reinterpret_cast<const V*>(x + half);
    if (table && h < NH + NKV) {  // q or k: rotated in place
      const Vec<float2, W> cs =
          *reinterpret_cast<const Vec<float2, W>*>(table + size_t(pos) * half + i);
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float c = cs.v[j].x, s = cs.v[j].y;
        const float x1 = float(a.v[j]), x2 = float(b.v[j]);
        const float2 y = rotate_pair(x1, x2, c, s);
        a.v[j] = X(y.x);
        b.v[j] = X(y.y);
      }
      *reinterpret_cast<V*>(x) = a;
      *reinterpret_cast<V*>(x + half) = b;
    }
    if (h >= NH) {  // k or v: into the cache
      const bool key = h < NH + NKV;
      const int g = key ? h - NH : h - NH - NKV;
      X* dst =
          (key ? k_cache : v_cache) + ((size_t(slots[row]) * NKV + g) * max_length + pos) * HS + i;
      *reinterpret_cast<V*>(dst) = a;
      *reinterpret_cast<V*>(dst + half) = b;
    }
  }
}

template <typename X, int W>
void launch(X* qkv, X* k_cache, X* v_cache, const int32_t* slots, const int32_t* positions,
            const float* table, int N, int NH, int NKV, int HS, int max_length,
            cudaStream_t stream) {
  const int heads = NH + 2 * NKV - (table ? 0 : NH);
  const unsigned grid = grid_stride_blocks(size_t(N) * heads * (HS / 2 / W), kBlock);
  launch_overlapped(kv_cache_append_kernel<X, W>, dim3(grid), dim3(kBlock), 0, stream, qkv, k_cache, v_cache, slots,
                    positions, reinterpret_cast<const float2*>(table), N, NH, NKV, HS, max_length);
}

}  // namespace

template <typename X>
void kv_cache_append(X* qkv, X* k_cache, X* v_cache, const int32_t* slots, const int32_t* positions,
                     const float* rope_table, int N, int NH, int NKV, int HS, int max_length,
                     cudaStream_t stream) {
  if (HS % 2 != 0) throw std::invalid_argument("kv_cache_append: head size must be even");
  if (N <= 0) return;
  constexpr int W = kVecWidth<X>;
  const bool vec = (HS / 2) % W == 0 && aligned16(qkv) && aligned16(k_cache) &&
                   aligned16(v_cache) && aligned(rope_table, sizeof(Vec<float2, W>));
  if (vec)
    launch<X, W>(qkv, k_cache, v_cache, slots, positions, rope_table, N, NH, NKV, HS, max_length,
                 stream);
  else
    launch<X, 1>(qkv, k_cache, v_cache, slots, positions, rope_table, N, NH, NKV, HS, max_length,
                 stream);
}

#define MEG_INSTANTIATE(X)                                                                        \
  template void kv_cache_append<X>(X*, X*, X*, const int32_t*, const int32_t*, const float*, int, \
                                   int, int, int, int, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
