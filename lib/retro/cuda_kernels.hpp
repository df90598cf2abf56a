// The launchers of the retrieval kernels (kernels/retro_pool.cu, kernels/retro_search.cu): the
// chunk embedder's mean over each chunk's real tokens, and the pieces of the exact search on the
// GPU (retro/cuda_exact_search_cuda.cpp) around its cuBLAS DGEMM. As ops/cuda/ops.hpp's: device
// pointers, asynchronous on STREAM, launches checked with MEG_CUDA_CHECK.
//
// Only for code built with CUDA (MEG_CUDA).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace meg::cuda {

// ---- kernels/retro_pool.cu ---------------------------------------------------------------------

// out[i, c] (fp32) = the mean of x[i, t, c] over t < lengths[i], for N chunks of x [N, T, C]
// (lengths in [1, T]), summed in fp32 in position order.
template <typename X>
void mean_over_lengths(float* out, const X* x, const int32_t* lengths, int N, int T, int C, cudaStream_t stream);

// ---- kernels/retro_search.cu -------------------------------------------------------------------
//
// A candidate of a query is one 64-bit key: the bits of its distance (an fp32 of at least +0, so
// that the bits order as the values do) above its id (32 bits). Keys order as the CPU's Neighbor
// pairs do (distance, then the lower id), and kNoNeighbor, above every key, fills a list that has
// fewer candidates than its length.
inline constexpr uint64_t kNoNeighbor = ~uint64_t(0);

// out[i] = double(in[i]) for N values.
void widen_to_double(double* out, const float* in, size_t n, cudaStream_t stream);

// norms[i] = the sum of x[i, d]^2 over d < DIM, in fp64, for N rows of x [N, DIM].
void squared_norms(double* norms, const float* x, size_t n, int dim, cudaStream_t stream);

// For each query q < NQ of a tile, BEST[q] (K keys, ascending) becomes the K smallest of itself
// and the candidates of one base block: rows [FIRST, FIRST + NB) of the base, at the distances
//   d = qnorms[q] + xnorms[j] - 2 products[q, j]   (fp64, as the CPU's expanded_distances)
// rounded to fp32 (0 where d is not positive), less those whose id lies in one of the query's
// left-out ranges: ranges[2r] <= id < ranges[2r + 1] for r in [range_offsets[q], range_offsets[q + 1]).
// products [NQ, NB]; xnorms are the block's; SCRATCH holds NQ rows of topk_scratch_row(NB, K) keys.
// Ids below 2^32.
void topk_update(uint64_t* best, uint64_t* scratch, const double* products, const double* qnorms,
                 const double* xnorms, int nq, int nb, int64_t first, int k, const int32_t* range_offsets,
                 const int64_t* ranges, cudaStream_t stream);
size_t topk_scratch_row(int nb, int k);

}  // namespace meg::cuda
