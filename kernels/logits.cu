// What the inference paths read off the logits [N, Vp] (X = fp32, bf16 or fp16; the real
// vocabulary is columns [0, V), the rest is padding):
//   - logits_to_float: the real columns in fp32, what meg-generate samples from on the host;
//   - argmax_rows: each row's greedy token, what meg-eval compares its targets with (their
//     log-probabilities come from cross_entropy_fused, kernels/cross_entropy.cu), so that no
//     [N, V] array crosses to the host;
//   - top_k_rows: each row's K largest logits and their columns, from which meg-generate's top-k
//     sampling draws on the host, so that K values a row cross rather than V.
// The launchers are declared in ops/cuda/ops.hpp.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "cluster.cuh"
#include "common.cuh"
#include "overlapped_launch.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kArgmaxBlock = 512;  // threads per row: ~12 packs each for 50304 bf16 columns

// out[r, j] = logits[r, j] for j < V. Rows of V values need not be 16-byte aligned (V is the
// tokenizer's, often odd), so this moves one value per thread and step; it runs on a handful of
// rows (a decode step's), small next to the product that made them.
template <typename X>
__global__ void logits_to_float_kernel(float* out, const X* logits, int N, int V, int Vp) {
  const size_t total = size_t(N) * V;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const size_t r = idx / V, j = idx % V;
    out[idx] = to_float(logits[r * Vp + j]);
  }
}

// A candidate for the maximum: its value and column. NaN logits never win (every comparison with
// NaN is false).
struct Best {
  float value;
  int index;
};

// Whether a beats b: a larger value, or an equal one at a lower column (torch.argmax's choice
// among equal maxima).
__device__ bool beats(Best a, Best b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

__device__ Best warp_best(Best b) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const Best o{__shfl_xor_sync(0xffffffffu, b.value, offset),
                 __shfl_xor_sync(0xffffffffu, b.index, offset)};
    if (beats(o, b)) b = o;
  }
  return b;
}

// Block per row. Each thread scans its packs of W columns in column order, keeping the first
// maximum it meets (from no candidate at all, so that a row whose largest value is -inf gives its
// first -inf column, as the host's greedy choice does); then the block's candidates are reduced
// through shuffles and shared memory. A row of NaN everywhere gives column 0.
template <typename X, int W>
__global__ void __launch_bounds__(kArgmaxBlock)
    argmax_kernel(int32_t* out, const X* logits, int V, int Vp) {
  const X* x = logits + size_t(blockIdx.x) * Vp;
  Best best{-INFINITY, INT_MAX};
  for (int p = threadIdx.x; p < Vp / W; p += kArgmaxBlock) {
    const Vec<X, W> v = reinterpret_cast<const Vec<X, W>*>(x)[p];
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const int j = p * W + k;
      const float f = to_float(v.v[k]);
      if (j < V && beats({f, j}, best)) best = {f, j};
    }
  }
  __shared__ Best warps[kArgmaxBlock / kWarp];
  best = warp_best(best);
  if (threadIdx.x % kWarp == 0) warps[threadIdx.x / kWarp] = best;
  __syncthreads();
  if (threadIdx.x < kWarp) {
    best = threadIdx.x < kArgmaxBlock / kWarp ? warps[threadIdx.x] : Best{-INFINITY, INT_MAX};
    best = warp_best(best);
    if (threadIdx.x == 0) out[blockIdx.x] = best.index == INT_MAX ? 0 : best.index;
  }
}

// Top-k by radix select. A logit's key orders like its value (-0 as +0, so that they tie, as they
// compare); NaN has none and is never a candidate.
__device__ uint32_t order_key(float f) {
  const uint32_t b = __float_as_uint(f == 0.0f ? 0.0f : f);
  return b & 0x80000000u ? ~b : b | 0x80000000u;
}

constexpr int kTopKBlock = 1024;
constexpr int kTopKCluster = 8;  // blocks a row at a decode step's few rows (the portable cluster size)
constexpr int kDigitBits = 8, kDigits = 1 << kDigitBits;

// Row blockIdx.x / PARTS, by a cluster of PARTS consecutive blocks (1: a block a row). The K-th
// largest key T is found a byte at a time from the top: each block's histogram of the next byte
// over its share of the keys that share the bytes found so far, the cluster's histograms added up
// (through distributed shared memory) by every block alike, and the byte where the count from the
// top reaches what is still wanted (integer counts: the same at any thread order). The keys of a
// row crowd into few bytes (the top byte of most logits is one of a handful), so a warp adds its
// lanes' equal bytes up first (__match_any_sync) and one lane adds the count. Then every key above
// T is a candidate, and of the keys equal to T the ones with the lowest columns, as many as are
// still wanted: for those the blocks, and their threads, take contiguous columns in order and
// count their equal keys through prefix sums. Candidates are written in no particular order (the
// caller sorts K values); where a row has fewer than K values that are not NaN, the rest of its K
// are column -1.
template <typename X>
__global__ void __launch_bounds__(kTopKBlock)
    top_k_kernel(int32_t* columns, float* values, const X* logits, int V, int Vp, int K, int parts) {
  const int row = blockIdx.x / parts, part = blockIdx.x % parts;
  const X* x = logits + size_t(row) * Vp;
  int32_t* row_columns = columns + size_t(row) * K;
  float* row_values = values + size_t(row) * K;
  __shared__ unsigned histogram[kDigits], totals[kDigits];
  __shared__ uint32_t prefix_found;
  __shared__ int wanted_left, written, block_equal, warp_counts[kTopKBlock / kWarp];
  wait_for_previous_kernel();

  uint32_t prefix = 0, mask = 0;
  int wanted = K;
  for (int shift = 32 - kDigitBits; shift >= 0; shift -= kDigitBits) {
    for (int i = threadIdx.x; i < kDigits; i += kTopKBlock) histogram[i] = 0;
    __syncthreads();
    const int step = parts * kTopKBlock;
    for (int base = part * kTopKBlock; base < V; base += step) {  // the same trips for every lane
      const int j = base + int(threadIdx.x);
      const float f = j < V ? to_float(x[j]) : NAN;
      const uint32_t key = order_key(f);
      const unsigned digit = f == f && (key & mask) == prefix ? (key >> shift) & (kDigits - 1) : kDigits;
      const unsigned peers = __match_any_sync(0xffffffffu, digit);
      if (digit < kDigits && threadIdx.x % kWarp == unsigned(__ffs(peers) - 1))
        atomicAdd(&histogram[digit], unsigned(__popc(peers)));
    }
    __syncthreads();
    cluster_barrier(parts);  // every block's histogram complete
    for (int i = threadIdx.x; i < kDigits; i += kTopKBlock) {
      unsigned total = 0;
      for (int r = 0; r < parts; ++r) total += cluster_shared(histogram, parts, r)[i];
      totals[i] = total;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int digit = kDigits - 1, above = 0;
      while (digit > 0 && above + int(totals[digit]) < wanted) above += totals[digit--];
      prefix_found = prefix | uint32_t(digit) << shift;
      wanted_left = wanted - above;
    }
    cluster_barrier(parts);  // every block has read the histograms before they are cleared
    __syncthreads();
    prefix = prefix_found;
    wanted = wanted_left;
    mask |= uint32_t(kDigits - 1) << shift;
  }
  // Keys above T: K - wanted of them. Keys equal to T: the first `wanted` by column, counted over
  // contiguous columns: the block's share of the row, the thread's of the block's.
  const int above = K - wanted;
  const int per_block = ceil_div(V, parts), block_begin = min(V, part * per_block);
  const int block_end = min(V, block_begin + per_block), per_thread = ceil_div(block_end - block_begin, kTopKBlock);
  const int begin = min(block_end, block_begin + int(threadIdx.x) * per_thread), end = min(block_end, begin + per_thread);
  int equal = 0;
  for (int j = begin; j < end; ++j) {
    const float f = to_float(x[j]);
    equal += f == f && order_key(f) == prefix;
  }
  // Exclusive prefix sum of EQUAL over the threads, in thread order, then over the blocks.
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int inclusive = equal;
  for (int offset = 1; offset < kWarp; offset *= 2) {
    const int v = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += v;
  }
  if (lane == kWarp - 1) warp_counts[warp] = inclusive;
  __syncthreads();
  int rank = inclusive - equal;
  if (threadIdx.x == 0) {
    int sum = 0;
    for (int w = 0; w < kTopKBlock / kWarp; ++w) sum += warp_counts[w];
    block_equal = sum;
    written = 0;
  }
  for (int w = 0; w < warp; ++w) rank += warp_counts[w];
  __syncthreads();
  cluster_barrier(parts);  // every block's count made, block 0's `written` cleared
  int equal_total = 0;
  for (int r = 0; r < parts; ++r) {
    const int count = *cluster_shared(&block_equal, parts, r);
    if (r < part) rank += count;
    equal_total += count;
  }
  int* slots_written = cluster_shared(&written, parts, 0);
  for (int j = begin; j < end; ++j) {
    const float f = to_float(x[j]);
    if (f != f) continue;
    const uint32_t key = order_key(f);
    int slot = -1;
    if (key > prefix) slot = atomicAdd(slots_written, 1);
    else if (key == prefix && rank < wanted) slot = above + rank++;
    if (slot >= 0) {
      row_columns[slot] = j;
      row_values[slot] = f;
    }
  }
  if (part == 0)
    for (int slot = above + min(wanted, equal_total) + int(threadIdx.x); slot < K; slot += kTopKBlock)
      row_columns[slot] = -1;
  cluster_barrier(parts);  // block 0's `written` outlives every block's additions
}

}  // namespace

template <typename X>
void logits_to_float(float* out, const X* logits, int N, int V, int Vp, cudaStream_t stream) {
  if (N <= 0 || V <= 0) return;
  logits_to_float_kernel<X>
      <<<grid_stride_blocks(size_t(N) * V, kBlock), kBlock, 0, stream>>>(out, logits, N, V, Vp);
  MEG_CUDA_CHECK(cudaGetLastError());
}

template <typename X>
void argmax_rows(int32_t* out, const X* logits, int N, int V, int Vp, cudaStream_t stream) {
  if (N <= 0) return;
  constexpr int W = kVecWidth<X>;
  if (Vp % W == 0 && aligned16(logits))
    argmax_kernel<X, W><<<N, kArgmaxBlock, 0, stream>>>(out, logits, V, Vp);
  else
    argmax_kernel<X, 1><<<N, kArgmaxBlock, 0, stream>>>(out, logits, V, Vp);
  MEG_CUDA_CHECK(cudaGetLastError());
}

template <typename X>
void top_k_rows(int32_t* columns, float* values, const X* logits, int N, int V, int Vp, int K, cudaStream_t stream) {
  if (N <= 0) return;
  if (K < 1 || K > kMaxTopK || V < 1 || V > Vp)
    throw std::invalid_argument("top_k_rows: K must be in [1, kMaxTopK] and V in [1, Vp]");
  // A cluster a row while the rows alone would not fill half the multiprocessors.
  const int parts = clusters_supported() && 2 * N < multiprocessors() ? kTopKCluster : 1;
  launch_overlapped_clusters(top_k_kernel<X>, dim3(unsigned(N) * parts), unsigned(parts), dim3(kTopKBlock), 0, stream,
                             columns, values, logits, V, Vp, K, parts);
}

#define MEG_INSTANTIATE(X)                                                                          \
  template void logits_to_float<X>(float*, const X*, int, int, int, cudaStream_t);                  \
  template void argmax_rows<X>(int32_t*, const X*, int, int, int, cudaStream_t);                    \
  template void top_k_rows<X>(int32_t*, float*, const X*, int, int, int, int, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
