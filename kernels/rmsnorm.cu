// RMSNorm (Llama) forward and backward on the GPU, for activations X = fp32, bf16 or fp16; the
// arithmetic and the saved rstd are fp32 whatever X is.
//
// The CPU reference is ops/cpu/norms.cpp; the launchers are declared in ops/cuda/ops.hpp.
//
// The method is that of kernels/layernorm.cu, less the mean and the bias:
//   - a row is taken by a group of blockDim.x threads (one warp, or several for wide rows), which
//     hold it in registers as 16-byte vectors of W channels (W = 1 when C is not a multiple of W
//     or a pointer is not 16-byte aligned), so it is read from memory once;
//   - row sums end with warp shuffles and, across a group's warps, shared memory in warp order,
//     the group meeting at a barrier of its own;
//   - dweight, a sum over all rows, takes no atomics: a fixed grid of blocks each adds its rows'
//     terms into per-row-lane slices of shared memory, then writes one partial row (the lanes
//     added in order) to SCRATCH, and a second kernel adds the partial rows in a fixed order. The
//     same pass computes dinp, so inp and dout are read once.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kWarp = 32;
// Threads of a block, unless one row needs more: the forward's blocks hold 8 one-warp rows, the
// backward's 4 (its blocks also hold their rows' channel sums, and smaller ones pack the
// multiprocessors closer to their limits).
constexpr int kForwardBlock = 256;
constexpr int kBackwardBlock = 128;
constexpr int kMaxRowThreads = 512;  // threads of one row group; the register budget caps it
constexpr int kMaxParamBlocks = 1024;  // partial rows of dweight: several waves of blocks
constexpr int kReduceLanes = 32;      // row lanes of the partial-row reduction
constexpr int kReduceAhead = 8;       // partial rows loaded ahead of their adds

// W consecutive values of X moved as one access (16 bytes on the fast path).
template <typename X, int W>
struct alignas(sizeof(X) * W) Vec {
  X v[W];
};

template <typename X>
constexpr int kVecWidth = 16 / sizeof(X);

// Vectors held per thread (the "slots"), within the register budget of kMaxRowThreads threads
// (128 registers each). The forward holds one row: 4 vectors of 16 bytes, or 16 single elements on
// the unaligned path. The backward holds three (inp, dout and dinp): 3 vectors for bf16/fp16 (a
// GPT-2 row of 768 channels on one warp), 4 for fp32 (rows up to 8192 channels), or 16 elements.
template <int W>
constexpr int kForwardSlots = W == 1 ? 16 : 4;
template <int W>
constexpr int kBackwardSlots = W == 1 ? 16 : W == 4 ? 4 : 3;

// Shared memory a block can have at most (the opt-in limit of Hopper), and without opting in.
constexpr size_t kMaxSharedBytes = 227 * 1024;
constexpr size_t kDefaultSharedBytes = 48 * 1024;

int ceil_div(int a, int b) { return (a + b - 1) / b; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

int param_blocks(int N) { return std::min(N, kMaxParamBlocks); }

// Sum of v over the 32 lanes of the warp, returned to every lane. The butterfly (xor) pattern adds
// in the same order on every run.
__device__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Synchronises the blockDim.x threads of this row group only (named barrier 1 + threadIdx.y; 0 is
// __syncthreads'), so the rows of a block never wait for one another.
__device__ __forceinline__ void sync_row_group() {
  asm volatile("bar.sync %0, %1;" ::"r"(1 + threadIdx.y), "r"(blockDim.x) : "memory");
}

// Sum of v over the blockDim.x threads of this row group, returned to all of them: a warp sum,
// then the group's warps added in warp order through shared memory. With kOwnBarrier the group
// meets at a barrier of its own and only its threads must call it; without, at __syncthreads and
// every thread of the block must call it (a barrier id computed at run time makes the compiler
// reserve all 16 of the block's barriers, so the forward, which does not need one, does without).
template <bool kOwnBarrier>
__device__ float row_sum(float v, float (*warp_sums)[kMaxRowThreads / kWarp]) {
  v = warp_sum(v);
  const int warps = blockDim.x / kWarp;
  if (warps == 1) return v;
  if (threadIdx.x % kWarp == 0) warp_sums[threadIdx.y][threadIdx.x / kWarp] = v;
  if constexpr (kOwnBarrier) sync_row_group();
  else __syncthreads();
  float s = 0.0f;
  for (int w = 0; w < warps; ++w) s += warp_sums[threadIdx.y][w];
  // Everyone has read the sums before the next call overwrites them.
  if constexpr (kOwnBarrier) sync_row_group();
  else __syncthreads();
  return s;
}

// One row per group of blockDim.x threads, blockDim.y rows per block.
template <typename X, int W, int S>
__global__ void __launch_bounds__(kMaxRowThreads)
    rmsnorm_forward_kernel(X* out, float* rstd, const X* inp, const X* weight, int N, int C,
                           float eps) {
  using V = Vec<X, W>;
  __shared__ float warp_sums[kForwardBlock / kWarp][kMaxRowThreads / kWarp];

  const int nvec = C / W;
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  // Rows past the end still take part in the group's reduction (it synchronises the block).
  const bool live = row < N;
  const V* x = reinterpret_cast<const V*>(inp) + size_t(row) * nvec;

  // All loads first, so they are in flight together.
  V xv[S];
#pragma unroll
  for (int k = 0; k < S; ++k) {
    const int i = k * blockDim.x + threadIdx.x;
    if (live && i < nvec) xv[k] = x[i];
  }

  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < S; ++k) {
    if (live && k * blockDim.x + threadIdx.x < nvec) {
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float v = float(xv[k].v[j]);
        sq += v * v;
      }
    }
  }
  const float s = rsqrtf(row_sum<false>(sq, warp_sums) / C + eps);

  if (!live) return;  // no reduction follows
  V* y = reinterpret_cast<V*>(out) + size_t(row) * nvec;
  const V* w = reinterpret_cast<const V*>(weight);
#pragma unroll
  for (int k = 0; k < S; ++k) {
    const int i = k * blockDim.x + threadIdx.x;
    if (i < nvec) {
      const V wv = w[i];
      V yv;
#pragma unroll
      for (int j = 0; j < W; ++j) yv.v[j] = X(float(xv[k].v[j]) * s * float(wv.v[j]));
      y[i] = yv;
    }
  }
  if (rstd && threadIdx.x == 0) rstd[row] = s;
}

// Keeps vectors held in registers as they were loaded (16-bit values for bf16/fp16) across the
// passes over a row: left alone, the compiler keeps their fp32 conversions from the first pass for
// the second, twice the registers, and fewer rows fit in flight. The empty asm "changes" each
// word, so the fp32 copies are stale and the second pass converts again (one instruction).
// (Single 16-bit values, on the unaligned path, are left alone.)
template <typename V, int S>
__device__ __forceinline__ void keep_packed(V (&v)[S]) {
  if constexpr (sizeof(V) % 4 == 0) {
#pragma unroll
    for (int k = 0; k < S; ++k) {
      auto* words = reinterpret_cast<uint32_t*>(&v[k]);
#pragma unroll
      for (int i = 0; i < int(sizeof(V) / 4); ++i) asm volatile("" : "+r"(words[i]));
    }
  }
}

// acc[0..W) += v[0..W), in shared memory: 16 bytes at a time where W allows (ACC is then 16-byte
// aligned: C and the slot offsets are multiples of W).
template <int W>
__device__ __forceinline__ void add_to(float* acc, const float (&v)[W]) {
  if constexpr (W % 4 == 0) {
#pragma unroll
    for (int j = 0; j < W; j += 4) {
      float4& a = *reinterpret_cast<float4*>(acc + j);
      a.x += v[j], a.y += v[j + 1], a.z += v[j + 2], a.w += v[j + 3];
    }
  } else {
#pragma unroll
    for (int j = 0; j < W; ++j) acc[j] += v[j];
  }
}

// Block g takes rows [g N / G, (g+1) N / G), blockDim.y at a time. With norm = x * rstd and
// dnorm = weight * dout, the gradient through rstd reduces to
//   dinp += rstd * (dnorm - norm * mean_c(dnorm * norm)),
// and dweight = sum_rows norm * dout. Row lane y adds its rows' terms into its slice of the
// dynamic shared memory, [blockDim.y][C] floats, present when partial_dweight is not null; the
// block then writes partial row g. The partial row is written whether or not dinp is.
template <typename X, int W>
__global__ void __launch_bounds__(kMaxRowThreads)
    rmsnorm_backward_kernel(X* dinp, float* partial_dweight, const X* dout, const X* inp,
                            const X* weight, const float* rstd, int N, int C) {
  using V = Vec<X, W>;
  constexpr int S = kBackwardSlots<W>;
  __shared__ float warp_sums[kBackwardBlock / kWarp][kMaxRowThreads / kWarp];
  extern __shared__ float4 channel_sums_[];  // float4: 16-byte aligned
  float* channel_sums = reinterpret_cast<float*>(channel_sums_);

  const int nvec = C / W;
  const int g = blockIdx.x;
  const int row_begin = int(int64_t(g) * N / gridDim.x);
  const int row_end = int(int64_t(g + 1) * N / gridDim.x);
  float* dw_sums = channel_sums + threadIdx.y * C;
  const V* w = reinterpret_cast<const V*>(weight);

  if (partial_dweight) {
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const int i = k * blockDim.x + threadIdx.x;
      if (i < nvec)
#pragma unroll
        for (int j = 0; j < W; ++j) dw_sums[i * W + j] = 0.0f;
    }
  }

  for (int r0 = row_begin; r0 < row_end; r0 += blockDim.y) {
    const int row = r0 + threadIdx.y;
    // The loop count is the same for the whole block, which meets at a barrier after it: a row
    // group past the end stays in the loop, idle, rather than leave.
    const bool live = row < row_end;
    const size_t offset = size_t(row) * nvec;
    const V* x = reinterpret_cast<const V*>(inp) + offset;
    const V* dy = reinterpret_cast<const V*>(dout) + offset;
    V* dx = reinterpret_cast<V*>(dinp);  // + offset, below: dinp may be null

    // All loads first, dinp's too, so they are in flight together.
    V xv[S], dyv[S], dxv[S];
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const int i = k * blockDim.x + threadIdx.x;
      if (live && i < nvec) {
        xv[k] = x[i];
        dyv[k] = dy[i];
        if (dinp) dxv[k] = dx[offset + i];
      }
    }
    const float s = live ? rstd[row] : 0.0f;

    float dnorm_norm_sum = 0.0f;
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const int i = k * blockDim.x + threadIdx.x;
      if (live && i < nvec) {
        const V wv = w[i];
        float dw[W];
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float norm = float(xv[k].v[j]) * s;
          const float g_out = float(dyv[k].v[j]);
          dnorm_norm_sum += float(wv.v[j]) * g_out * norm;
          dw[j] = norm * g_out;
        }
        if (partial_dweight) add_to<W>(dw_sums + i * W, dw);
      }
    }
    if (!dinp) continue;
    keep_packed(xv), keep_packed(dyv);
    const float dnorm_norm_mean = row_sum<true>(dnorm_norm_sum, warp_sums) / C;
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const int i = k * blockDim.x + threadIdx.x;
      if (live && i < nvec) {
        const V wv = w[i];
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float norm = float(xv[k].v[j]) * s;
          const float dnorm = float(wv.v[j]) * float(dyv[k].v[j]);
          dxv[k].v[j] = X(float(dxv[k].v[j]) + s * (dnorm - norm * dnorm_norm_mean));  // accumulate
        }
        dx[offset + i] = dxv[k];
      }
    }
  }
  if (!partial_dweight) return;

  // Partial row g: the row lanes' slices added in lane order, by the whole block.
  __syncthreads();
  const int lanes = blockDim.y;
  for (int c = threadIdx.y * blockDim.x + threadIdx.x; c < C; c += blockDim.x * lanes) {
    float dw = 0.0f;
    for (int lane = 0; lane < lanes; ++lane) dw += channel_sums[lane * C + c];
    partial_dweight[size_t(g) * C + c] = dw;
  }
}

// out[c] += the sum of partial[g][c] over the G partial rows. Block = 32 channels x kReduceLanes
// row lanes: lane y adds the contiguous rows [y G / L, (y + 1) G / L) in order, its loads
// kReduceAhead rows ahead of the adds so that they overlap; then the lanes are added in lane
// order. The order depends on G alone.
__global__ void accumulate_partials_kernel(float* out, const float* partial, int G, int C) {
  __shared__ float lane_sums[kReduceLanes][kWarp];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  float s = 0.0f;
  if (c < C) {
    const int g_end = (threadIdx.y + 1) * G / kReduceLanes;
    int g = threadIdx.y * G / kReduceLanes;
    for (; g + kReduceAhead <= g_end; g += kReduceAhead) {
      float v[kReduceAhead];
#pragma unroll
      for (int u = 0; u < kReduceAhead; ++u) v[u] = partial[size_t(g + u) * C + c];
#pragma unroll
      for (int u = 0; u < kReduceAhead; ++u) s += v[u];
    }
    for (; g < g_end; ++g) s += partial[size_t(g) * C + c];
  }
  lane_sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int y = 1; y < kReduceLanes; ++y) s += lane_sums[y][threadIdx.x];
    out[c] += s;
  }
}

// The thread block of the row kernels for rows of C channels in vectors of W, S per thread: the
// fewest whole warps per row that hold the row, and as many rows as fit in BLOCK threads.
dim3 row_block(int C, int W, int S, int block) {
  const int threads = std::max(kWarp, ceil_div(ceil_div(C / W, S), kWarp) * kWarp);
  if (threads > kMaxRowThreads)
    throw std::invalid_argument("rmsnorm: C = " + std::to_string(C) + " is too wide a row");
  return dim3(threads, std::max(1, block / threads));
}

template <typename X, int W>
void launch_forward(X* out, float* rstd, const X* inp, const X* weight, int N, int C, float eps,
                    cudaStream_t stream) {
  constexpr int S = kForwardSlots<W>;
  const dim3 block = row_block(C, W, S, kForwardBlock);
  rmsnorm_forward_kernel<X, W, S><<<ceil_div(N, block.y), block, 0, stream>>>(out, rstd, inp, weight,
                                                                         N, C, eps);
  MEG_CUDA_CHECK(cudaGetLastError());
}

template <typename X, int W>
void launch_backward(X* dinp, float* partial_dweight, const X* dout, const X* inp, const X* weight,
                     const float* rstd, int N, int C, cudaStream_t stream) {
  const dim3 block = row_block(C, W, kBackwardSlots<W>, kBackwardBlock);
  const size_t smem = partial_dweight ? size_t(block.y) * C * sizeof(float) : 0;
  if (smem > kMaxSharedBytes)
    throw std::invalid_argument("rmsnorm: C = " + std::to_string(C) + " is too wide a row");
  if (smem > kDefaultSharedBytes)
    MEG_CUDA_CHECK(cudaFuncSetAttribute(rmsnorm_backward_kernel<X, W>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  rmsnorm_backward_kernel<X, W><<<param_blocks(N), block, smem, stream>>>(
      dinp, partial_dweight, dout, inp, weight, rstd, N, C);
  MEG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

template <typename X>
void rmsnorm_forward(X* out, float* rstd, const X* inp, const X* weight, int N, int C, float eps,
                     cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  constexpr int W = kVecWidth<X>;
  if (C % W == 0 && aligned16(out) && aligned16(inp) && aligned16(weight))
    launch_forward<X, W>(out, rstd, inp, weight, N, C, eps, stream);
  else
    launch_forward<X, 1>(out, rstd, inp, weight, N, C, eps, stream);
}

size_t rmsnorm_backward_scratch(int N, int C) {
  return N <= 0 || C <= 0 ? 0 : size_t(param_blocks(N)) * C;
}

template <typename X>
void rmsnorm_backward(X* dinp, float* dweight, const X* dout, const X* inp, const X* weight,
                      const float* rstd, int N, int C, float* scratch, cudaStream_t stream) {
  if (N <= 0 || C <= 0 || (!dinp && !dweight)) return;
  float* partial_dweight = dweight ? scratch : nullptr;
  constexpr int W = kVecWidth<X>;
  if (C % W == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight))
    launch_backward<X, W>(dinp, partial_dweight, dout, inp, weight, rstd, N, C, stream);
  else
    launch_backward<X, 1>(dinp, partial_dweight, dout, inp, weight, rstd, N, C, stream);
  if (dweight) {
    accumulate_partials_kernel<<<ceil_div(C, kWarp), dim3(kWarp, kReduceLanes), 0, stream>>>(
        dweight, partial_dweight, param_blocks(N), C);
    MEG_CUDA_CHECK(cudaGetLastError());
  }
}

#define MEG_INSTANTIATE(X)                                                                       \
  template void rmsnorm_forward<X>(X*, float*, const X*, const X*, int, int, float, cudaStream_t); \
  template void rmsnorm_backward<X>(X*, float*, const X*, const X*, const X*, const float*, int,  \
                                    int, float*, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
