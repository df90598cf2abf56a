// The exact nearest-neighbour search on the GPU, around its DGEMM (retro/cuda_exact_search_cuda.cpp):
// fp64 copies and squared norms of the vectors, and the top-K update of each query from a block of
// its products with the base.
//
// topk_update, a block of kThreads per query:
//   1. every candidate of the base block gets its key (retro/cuda_kernels.hpp) from the expanded
//      distance, exactly as the CPU rounds it; those below the query's current K-th key and not
//      left out are appended to the query's scratch row, a warp at a time. Once the first blocks
//      have filled the list, few candidates pass, and most updates end here.
//   2. the survivors and the current K are merged: sorted together in shared memory when they fit
//      (a bitonic network), else the K smallest found by a radix select over the 64-bit keys (8
//      bits a pass, most significant first) and then sorted.
// Keys are unique (ids are), so the K smallest are one set, whatever order the survivors were
// appended in: the result is the same on every run.
#include <cuda_runtime.h>

#include "common.cuh"
#include "ops/cuda/check.hpp"
#include "retro/cuda_kernels.hpp"

namespace meg::cuda {

namespace {

constexpr int kThreads = 256;     // a query's block (whole warps: the appends vote by warp)
constexpr int kSortKeys = 2048;   // keys sorted in shared memory (16 KiB)
constexpr int kDigitBits = 8, kBins = 1 << kDigitBits;

__device__ inline uint64_t key_of(float dist, int64_t id) {
  return uint64_t(__float_as_uint(dist)) << 32 | uint64_t(uint32_t(id));
}

__device__ inline bool left_out(int64_t id, const int64_t* ranges, int n) {
  for (int r = 0; r < n; ++r)
    if (id >= ranges[2 * r] && id < ranges[2 * r + 1]) return true;
  return false;
}

// Sorts A[0, N) ascending with the whole block. The bitonic network over the next power of two,
// in the form where every comparison puts the smaller key at the lower index: the keys missing
// past N then count as larger than all, and their comparisons are skipped. A is shared memory or
// the block's own global memory (__syncthreads orders both); the caller synchronises before.
__device__ void sort_keys(uint64_t* a, int n) {
  int p = 1;
  while (p < n) p *= 2;
  for (int size = 2; size <= p; size *= 2)
    for (int stride = size / 2; stride > 0; stride /= 2) {
      for (int t = threadIdx.x; t < p / 2; t += blockDim.x) {
        const int i = 2 * stride * (t / stride) + t % stride;  // the pair's lower index: bit STRIDE clear
        const int j = stride == size / 2 ? i ^ (size - 1) : i + stride;
        if (j < n && a[j] < a[i]) {
          const uint64_t v = a[i];
          a[i] = a[j];
          a[j] = v;
        }
      }
      __syncthreads();
    }
}

// The K smallest of KEYS[0, M) (M >= K) into OUT[0, K), in no order. The K-th smallest is found a
// digit at a time, from the top: a histogram of the digit over the keys that share the digits found
// so far picks the bin it lies in. Then the keys below it are gathered, and the rest of OUT is it
// (more than one copy only of kNoNeighbor, the one key that repeats).
__device__ void select_smallest(uint64_t* out, const uint64_t* keys, int m, int k) {
  __shared__ unsigned hist[kBins];
  __shared__ uint64_t next_prefix;
  __shared__ int next_rank, gathered;
  uint64_t prefix = 0, mask = 0;
  int rank = k;  // of the K-th smallest among the keys that match PREFIX under MASK, from 1
  if (threadIdx.x == 0) gathered = 0;
  for (int shift = 64 - kDigitBits; shift >= 0; shift -= kDigitBits) {
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
      const uint64_t key = keys[i];
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & (kBins - 1)], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int digit = 0, below = 0;
      for (; digit < kBins - 1 && below + int(hist[digit]) < rank; ++digit) below += int(hist[digit]);
      next_prefix = prefix | uint64_t(digit) << shift;
      next_rank = rank - below;
    }
    __syncthreads();
    prefix = next_prefix;
    rank = next_rank;
    mask |= uint64_t(kBins - 1) << shift;
  }
  for (int i = threadIdx.x; i < m; i += blockDim.x)
    if (keys[i] < prefix) out[atomicAdd(&gathered, 1)] = keys[i];
  __syncthreads();
  for (int i = gathered + threadIdx.x; i < k; i += blockDim.x) out[i] = prefix;
  __syncthreads();
}

// blockIdx.x: the query. SCRATCH_ROW: topk_scratch_row(NB, K).
__global__ void topk_update_kernel(uint64_t* best, uint64_t* scratch, size_t scratch_row, const double* products,
                                   const double* qnorms, const double* xnorms, int nb, int64_t first, int k,
                                   const int32_t* range_offsets, const int64_t* ranges) {
  __shared__ uint64_t sorted[kSortKeys];
  __shared__ int count;
  const int q = blockIdx.x, lane = threadIdx.x % kWarp;
  uint64_t* list = best + size_t(q) * k;
  uint64_t* found = scratch + size_t(q) * scratch_row;
  const double* dots = products + size_t(q) * nb;
  const double qnorm = qnorms[q];
  const int64_t* left = ranges + 2 * size_t(range_offsets[q]);
  const int nleft = range_offsets[q + 1] - range_offsets[q];
  const uint64_t bound = list[k - 1];  // the current K-th: a candidate must be below it
  if (threadIdx.x == 0) count = 0;
  __syncthreads();

  // Every thread runs the same number of rounds, so that whole warps vote.
  for (int j0 = 0; j0 < nb; j0 += blockDim.x) {
    const int j = j0 + threadIdx.x;
    uint64_t key = kNoNeighbor;
    if (j < nb) {
      const double d = qnorm + xnorms[j] - 2 * dots[j];
      key = key_of(d > 0 ? float(d) : 0.0f, first + j);
    }
    const bool keep = key < bound && !left_out(first + j, left, nleft);
    const unsigned votes = __ballot_sync(0xffffffffu, keep);
    int at = 0;
    if (lane == 0 && votes != 0) at = atomicAdd(&count, __popc(votes));
    at = __shfl_sync(0xffffffffu, at, 0);
    if (keep) found[at + __popc(votes & ((1u << lane) - 1))] = key;
  }
  __syncthreads();
  const int c = count;
  if (c == 0) return;

  const int m = c + k;
  if (m <= kSortKeys) {
    for (int i = threadIdx.x; i < m; i += blockDim.x) sorted[i] = i < c ? found[i] : list[i - c];
    __syncthreads();
    sort_keys(sorted, m);
    for (int i = threadIdx.x; i < k; i += blockDim.x) list[i] = sorted[i];
    return;
  }
  for (int i = threadIdx.x; i < k; i += blockDim.x) found[c + i] = list[i];
  __syncthreads();
  select_smallest(list, found, m, k);
  if (k > kSortKeys) {
    sort_keys(list, k);
    return;
  }
  for (int i = threadIdx.x; i < k; i += blockDim.x) sorted[i] = list[i];
  __syncthreads();
  sort_keys(sorted, k);
  for (int i = threadIdx.x; i < k; i += blockDim.x) list[i] = sorted[i];
}

__global__ void widen_kernel(double* out, const float* in, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = double(in[i]);
}

// A warp per row.
__global__ void squared_norms_kernel(double* norms, const float* x, size_t n, int dim) {
  const size_t row = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= n) return;  // the whole warp: a warp shares its row
  const float* r = x + row * dim;
  double sum = 0;
  for (int d = lane; d < dim; d += kWarp) sum += double(r[d]) * double(r[d]);
  sum = warp_sum(sum);
  if (lane == 0) norms[row] = sum;
}

}  // namespace

size_t topk_scratch_row(int nb, int k) { return size_t(nb) + size_t(k); }

void topk_update(uint64_t* best, uint64_t* scratch, const double* products, const double* qnorms,
                 const double* xnorms, int nq, int nb, int64_t first, int k, const int32_t* range_offsets,
                 const int64_t* ranges, cudaStream_t stream) {
  if (nq == 0 || nb == 0 || k == 0) return;
  topk_update_kernel<<<nq, kThreads, 0, stream>>>(best, scratch, topk_scratch_row(nb, k), products, qnorms, xnorms,
                                                  nb, first, k, range_offsets, ranges);
  MEG_CUDA_CHECK(cudaGetLastError());
}

void widen_to_double(double* out, const float* in, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kBlock = 256;
  widen_kernel<<<grid_stride_blocks(n, kBlock), kBlock, 0, stream>>>(out, in, n);
  MEG_CUDA_CHECK(cudaGetLastError());
}

void squared_norms(double* norms, const float* x, size_t n, int dim, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kBlock = 256, kRowsPerBlock = kBlock / kWarp;
  squared_norms_kernel<<<unsigned((n + kRowsPerBlock - 1) / kRowsPerBlock), kBlock, 0, stream>>>(norms, x, n, dim);
  MEG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meg::cuda
