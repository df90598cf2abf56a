// The row kernels of LayerNorm (kernels/layernorm.cu) and RMSNorm (kernels/rmsnorm.cu), for
// activations X = fp32, bf16 or fp16; the arithmetic and the saved statistics are fp32 whatever X
// is. RMSNorm is LayerNorm less the mean and the bias, so one kernel serves both: the tag type
// NORM (LayerNorm or RMSNorm, which also names the kernels in a profile) switches the mean, the
// bias and dbias on or off at compile time, and each norm's kernels are those of the other with
// that code left out.
//
// Row layout. Each row of C channels is taken by a group of blockDim.x threads (one warp, or
// several for wide rows), and a block holds blockDim.y such rows. The row is cut into vectors of W
// channels, 16 bytes each (W = 8 for bf16/fp16, 4 for fp32); thread x of the group holds vectors
// x, x + blockDim.x, ... in registers (its "slots", a few per thread). So the row is read from
// memory once, with 16-byte loads that are coalesced across the warp, and every later pass over it
// (the mean, the squared deviations, the output) runs on registers. The group is sized on the
// host so that its slots cover C. When C is not a multiple of W, or a pointer is not 16-byte
// aligned, the same kernels run with W = 1 (one element per "vector", more slots per thread).
//
// Row sums (mean, variance, the sums of the backward) are finished with warp shuffles and, across
// the warps of a group, in shared memory in warp order: the same order on every run. LayerNorm's
// statistics take two passes (the mean, then squared deviations from it), as the CPU reference:
// E[x^2] - E[x]^2 cancels badly when the mean is large against the spread.
//
// dweight and dbias are sums over all N rows. There are no atomics: fp32 atomics add in whatever
// order the blocks arrive, and meg is reproducible bit for bit. Instead the backward runs a fixed
// grid of param_blocks(N) blocks, block g taking a contiguous range of rows, blockDim.y at a time.
// Each row lane of the block adds its rows' terms into its own slice of shared memory (each thread
// into its own channels, so no two threads share a word and nothing needs a barrier); at the end
// the lanes' slices are added in lane order into partial row g of SCRATCH. accumulate_column_sums
// (kernels/column_sums.cuh) then adds the partial rows in a fixed order into dweight and dbias.
// The same pass computes dinp, so inp and dout are read once for all the gradients. Keeping these
// sums in shared memory rather than registers leaves few enough registers per thread for about 20
// warps per multiprocessor, and the backward's row groups meet at barriers of their own rather
// than the block's, so that many rows are in flight at once: what the memory system needs to run
// near its bandwidth.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "column_sums.cuh"
#include "common.cuh"
#include "overlapped_launch.cuh"
#include "ops/cuda/check.hpp"

namespace meg::cuda::norm_rows {

// The tags: kLayerNorm turns on the mean, the bias and dbias.
struct LayerNorm {
  static constexpr bool kLayerNorm = true;
  static constexpr const char* kName = "layernorm";
};
struct RMSNorm {
  static constexpr bool kLayerNorm = false;
  static constexpr const char* kName = "rmsnorm";
};

// Threads of a block, unless one row needs more: the forward's blocks hold 8 one-warp rows, the
// backward's 4 (its blocks also hold their rows' channel sums, and smaller ones pack the
// multiprocessors closer to their limits).
constexpr int kForwardBlock = 256;
constexpr int kBackwardBlock = 128;
constexpr int kMaxRowThreads = 512;  // threads of one row group; the register budget caps it
constexpr int kMaxParamBlocks = 1024;  // partial rows of dweight/dbias: several waves of blocks
constexpr int kReduceLanes = 32;       // row lanes of accumulate_column_sums over them

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

inline int param_blocks(int N) { return std::min(N, kMaxParamBlocks); }

// Channel sums of the backward: dweight's, and LayerNorm's dbias.
template <typename Norm>
constexpr int kParamSums = Norm::kLayerNorm ? 2 : 1;

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

// The normalised value: (x - mean) * rstd for LayerNorm, x * rstd for RMSNorm.
template <bool kLayerNorm>
__device__ __forceinline__ float normalize(float x, float mean, float rstd) {
  if constexpr (kLayerNorm) return (x - mean) * rstd;
  else return x * rstd;
}

// One row per group of blockDim.x threads, blockDim.y rows per block. out = norm * weight (+ bias);
// MEAN (LayerNorm) and RSTD receive the row statistics where not null. With PART (not null) the
// row is first inp + part, rounded to X as add() rounds it, and written back to inp (SUM, the same
// array): a residual add and the norm after it in one launch.
template <typename Norm, typename X, int W, int S>
__global__ void __launch_bounds__(kMaxRowThreads)
    forward_kernel(X* out, float* mean, float* rstd, const X* inp, X* sum, const X* part,
                   const X* weight, const X* bias, int N, int C, float eps) {
  constexpr bool kLayerNorm = Norm::kLayerNorm;
  using V = Vec<X, W>;
  __shared__ float warp_sums[kForwardBlock / kWarp][kMaxRowThreads / kWarp];

  const int nvec = C / W;
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  // Rows past the end still take part in the group's reductions (they synchronise the block).
  const bool live = row < N;
  const V* x = reinterpret_cast<const V*>(inp) + size_t(row) * nvec;

  // The weight and bias, which no kernel before writes, are requested before the wait for the
  // kernel that wrote the row (launch_forward overlaps it).
  const V* w = reinterpret_cast<const V*>(weight);
  const V* b = reinterpret_cast<const V*>(bias);
  V wv[S], bv[S];
#pragma unroll
  for (int k = 0; k < S; ++k) {
    const int i = k * blockDim.x + threadIdx.x;
    if (i < nvec) {
      wv[k] = w[i];
      if (kLayerNorm && bias) bv[k] = b[i];
    }
  }
  wait_for_previous_kernel();
  allow_next_kernel();

  // All loads first, so they are in flight together.
  V xv[S];
#pragma unroll
  for (int k = 0; k < S; ++k) {
    const int i = k * blockDim.x + threadIdx.x;
    if (live && i < nvec) xv[k] = x[i];
  }
  if (part) {
    const V* p = reinterpret_cast<const V*>(part) + size_t(row) * nvec;
    V* y = reinterpret_cast<V*>(sum) + size_t(row) * nvec;
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const int i = k * blockDim.x + threadIdx.x;
      if (live && i < nvec) {
        const V pv = p[i];
#pragma unroll
        for (int j = 0; j < W; ++j) xv[k].v[j] = X(float(xv[k].v[j]) + float(pv.v[j]));
        y[i] = xv[k];
      }
    }
  }

  float m = 0.0f;
  if constexpr (kLayerNorm) {
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < S; ++k) {
      if (live && k * blockDim.x + threadIdx.x < nvec) {
#pragma unroll
        for (int j = 0; j < W; ++j) sum += float(xv[k].v[j]);
      }
    }
    m = row_sum<false>(sum, warp_sums) / C;
  }

  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < S; ++k) {
    if (live && k * blockDim.x + threadIdx.x < nvec) {
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float d = kLayerNorm ? float(xv[k].v[j]) - m : float(xv[k].v[j]);
        sq += d * d;
      }
    }
  }
  const float s = rsqrtf(row_sum<false>(sq, warp_sums) / C + eps);  // biased variance, as PyTorch

  if (!live) return;  // no reduction follows
  V* y = reinterpret_cast<V*>(out) + size_t(row) * nvec;
#pragma unroll
  for (int k = 0; k < S; ++k) {
    const int i = k * blockDim.x + threadIdx.x;
    if (i < nvec) {
      V yv;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float norm = normalize<kLayerNorm>(float(xv[k].v[j]), m, s);
        if constexpr (kLayerNorm)
          yv.v[j] = X(norm * float(wv[k].v[j]) + (bias ? float(bv[k].v[j]) : 0.0f));
        else
          yv.v[j] = X(norm * float(wv[k].v[j]));
      }
      y[i] = yv;
    }
  }
  // Two spellings on purpose: one for both changes the compiled code of one norm or the other.
  if constexpr (kLayerNorm) {
    if (threadIdx.x == 0) {
      if (mean) mean[row] = m;
      if (rstd) rstd[row] = s;
    }
  } else {
    if (rstd && threadIdx.x == 0) rstd[row] = s;
  }
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

// Block g takes rows [g N / G, (g+1) N / G), blockDim.y at a time. With norm = (x - mean) * rstd
// and dnorm = weight * dout, the gradient through the mean and the variance reduces to
//   dinp += rstd * (dnorm - mean_c(dnorm) - norm * mean_c(dnorm * norm)),
// and the parameter gradients are dweight = sum_rows norm * dout, dbias = sum_rows dout. For
// RMSNorm, norm = x * rstd, and the gradient through rstd alone drops the mean_c(dnorm) term.
// Row lane y adds its rows' terms into its slices of the dynamic shared memory,
// [kParamSums][blockDim.y][C] floats (dweight's, then LayerNorm's dbias's), present when
// partial_dweight or partial_dbias is not null; the block then writes partial row g of each
// (either may be null). The partial rows are written whether or not dinp is.
template <typename Norm, typename X, int W>
__global__ void __launch_bounds__(kMaxRowThreads)
    backward_kernel(X* dinp, float* partial_dweight, float* partial_dbias, const X* dout,
                    const X* inp, const X* weight, const float* mean, const float* rstd, int N,
                    int C) {
  constexpr bool kLayerNorm = Norm::kLayerNorm;
  using V = Vec<X, W>;
  constexpr int S = kBackwardSlots<W>;
  __shared__ float warp_sums[kBackwardBlock / kWarp][kMaxRowThreads / kWarp];
  extern __shared__ float4 channel_sums_[];  // float4: 16-byte aligned
  float* channel_sums = reinterpret_cast<float*>(channel_sums_);

  const int nvec = C / W;
  const int g = blockIdx.x;
  const int row_begin = int(int64_t(g) * N / gridDim.x);
  const int row_end = int(int64_t(g + 1) * N / gridDim.x);
  const bool params = partial_dweight || (kLayerNorm && partial_dbias);
  float* dw_sums = channel_sums + threadIdx.y * C;
  float* db_sums = channel_sums + (blockDim.y + threadIdx.y) * C;
  const V* w = reinterpret_cast<const V*>(weight);

  if (params) {
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const int i = k * blockDim.x + threadIdx.x;
      if (i < nvec)
#pragma unroll
        for (int j = 0; j < W; ++j) {
          if constexpr (kLayerNorm) dw_sums[i * W + j] = db_sums[i * W + j] = 0.0f;
          else dw_sums[i * W + j] = 0.0f;
        }
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
    const float m = kLayerNorm && live ? mean[row] : 0.0f;
    const float s = live ? rstd[row] : 0.0f;

    float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const int i = k * blockDim.x + threadIdx.x;
      if (live && i < nvec) {
        const V wv = w[i];
        float dw[W], db[W];
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float norm = normalize<kLayerNorm>(float(xv[k].v[j]), m, s);
          const float g_out = float(dyv[k].v[j]);
          const float dnorm = float(wv.v[j]) * g_out;
          dnorm_sum += dnorm;
          dnorm_norm_sum += dnorm * norm;
          dw[j] = norm * g_out;
          db[j] = g_out;
        }
        // PARAMS spelt out on purpose: with the bool here, the compiler lays RMSNorm's loop out
        // with more registers (and more spills on the W = 1 path).
        if (partial_dweight || (kLayerNorm && partial_dbias)) {
          add_to<W>(dw_sums + i * W, dw);
          if constexpr (kLayerNorm) add_to<W>(db_sums + i * W, db);
        }
      }
    }
    if (!dinp) continue;
    keep_packed(xv), keep_packed(dyv);
    const float dnorm_mean = kLayerNorm ? row_sum<true>(dnorm_sum, warp_sums) / C : 0.0f;
    const float dnorm_norm_mean = row_sum<true>(dnorm_norm_sum, warp_sums) / C;
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const int i = k * blockDim.x + threadIdx.x;
      if (live && i < nvec) {
        const V wv = w[i];
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float norm = normalize<kLayerNorm>(float(xv[k].v[j]), m, s);
          const float dnorm = float(wv.v[j]) * float(dyv[k].v[j]);
          // Accumulated, as on the CPU. Two spellings on purpose: one for both changes the
          // compiled code of one norm or the other.
          if constexpr (kLayerNorm) {
            const float grad = s * (dnorm - dnorm_mean - norm * dnorm_norm_mean);
            dxv[k].v[j] = X(float(dxv[k].v[j]) + grad);
          } else {
            dxv[k].v[j] = X(float(dxv[k].v[j]) + s * (dnorm - norm * dnorm_norm_mean));
          }
        }
        dx[offset + i] = dxv[k];
      }
    }
  }
  if (!params) return;

  // Partial row g: the row lanes' slices added in lane order, by the whole block.
  __syncthreads();
  const int lanes = blockDim.y;
  for (int c = threadIdx.y * blockDim.x + threadIdx.x; c < C; c += blockDim.x * lanes) {
    float dw = 0.0f, db = 0.0f;
    for (int lane = 0; lane < lanes; ++lane) {
      dw += channel_sums[lane * C + c];
      if constexpr (kLayerNorm) db += channel_sums[(lanes + lane) * C + c];
    }
    if (partial_dweight) partial_dweight[size_t(g) * C + c] = dw;
    if (kLayerNorm && partial_dbias) partial_dbias[size_t(g) * C + c] = db;
  }
}

// The thread block of the row kernels for rows of C channels in vectors of W, S per thread: the
// fewest whole warps per row that hold the row, and as many rows as fit in BLOCK threads.
template <typename Norm>
dim3 row_block(int C, int W, int S, int block) {
  const int threads = std::max(kWarp, ceil_div(ceil_div(C / W, S), kWarp) * kWarp);
  if (threads > kMaxRowThreads)
    throw std::invalid_argument(std::string(Norm::kName) + ": C = " + std::to_string(C) +
                                " is too wide a row");
  return dim3(threads, std::max(1, block / threads));
}

template <typename Norm, typename X, int W>
void launch_forward(X* out, float* mean, float* rstd, const X* inp, X* sum, const X* part, const X* weight,
                    const X* bias, int N, int C, float eps, cudaStream_t stream) {
  constexpr int S = kForwardSlots<W>;
  const dim3 block = row_block<Norm>(C, W, S, kForwardBlock);
  launch_overlapped(forward_kernel<Norm, X, W, S>, dim3(ceil_div(N, block.y)), block, 0, stream, out, mean, rstd, inp,
                    sum, part, weight, bias, N, C, eps);
}

template <typename Norm, typename X, int W>
void launch_backward(X* dinp, float* partial_dweight, float* partial_dbias, const X* dout,
                     const X* inp, const X* weight, const float* mean, const float* rstd, int N,
                     int C, cudaStream_t stream) {
  const dim3 block = row_block<Norm>(C, W, kBackwardSlots<W>, kBackwardBlock);
  const size_t smem = partial_dweight || partial_dbias
                          ? kParamSums<Norm> * size_t(block.y) * C * sizeof(float)
                          : 0;
  if (smem > kMaxSharedBytes)
    throw std::invalid_argument(std::string(Norm::kName) + ": C = " + std::to_string(C) +
                                " is too wide a row");
  const auto kernel = backward_kernel<Norm, X, W>;
  if (smem > kDefaultSharedBytes)
    MEG_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<param_blocks(N), block, smem, stream>>>(dinp, partial_dweight, partial_dbias, dout, inp,
                                                   weight, mean, rstd, N, C);
  MEG_CUDA_CHECK(cudaGetLastError());
}

// The launchers of both norms: RMSNorm's pass null MEAN, BIAS and DBIAS. The forward's PART (may
// be null) is added into INP first (forward_kernel).
template <typename Norm, typename X>
void forward(X* out, float* mean, float* rstd, const X* inp, const X* weight, const X* bias, int N,
             int C, float eps, cudaStream_t stream, X* sum = nullptr, const X* part = nullptr) {
  if (N <= 0 || C <= 0) return;
  constexpr int W = kVecWidth<X>;
  if (C % W == 0 && aligned16(out) && aligned16(inp) && aligned16(weight) && aligned16(bias) && aligned16(part))
    launch_forward<Norm, X, W>(out, mean, rstd, inp, sum, part, weight, bias, N, C, eps, stream);
  else
    launch_forward<Norm, X, 1>(out, mean, rstd, inp, sum, part, weight, bias, N, C, eps, stream);
}

template <typename Norm>
size_t backward_scratch(int N, int C) {
  return N <= 0 || C <= 0 ? 0 : kParamSums<Norm> * size_t(param_blocks(N)) * C;
}

template <typename Norm, typename X>
void backward(X* dinp, float* dweight, float* dbias, const X* dout, const X* inp, const X* weight,
              const float* mean, const float* rstd, int N, int C, float* scratch,
              cudaStream_t stream) {
  if (N <= 0 || C <= 0 || (!dinp && !dweight && !dbias)) return;
  const int G = param_blocks(N);
  float* partial_dweight = dweight ? scratch : nullptr;
  float* partial_dbias = dbias ? scratch + size_t(G) * C : nullptr;
  constexpr int W = kVecWidth<X>;
  if (C % W == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight))
    launch_backward<Norm, X, W>(dinp, partial_dweight, partial_dbias, dout, inp, weight,
                                      mean, rstd, N, C, stream);
  else
    launch_backward<Norm, X, 1>(dinp, partial_dweight, partial_dbias, dout, inp, weight,
                                      mean, rstd, N, C, stream);
  // Both reductions in one launch: dweight's first, or dbias's alone.
  if (dweight)
    accumulate_column_sums<kReduceLanes>(dweight, partial_dweight, dbias, partial_dbias, G, C,
                                         stream);
  else if (dbias)
    accumulate_column_sums<kReduceLanes>(dbias, partial_dbias, nullptr, nullptr, G, C, stream);
}

}  // namespace meg::cuda::norm_rows
