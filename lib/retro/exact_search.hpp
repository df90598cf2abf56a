// Exact nearest-neighbour search by brute force, as matrix products: |q - x|^2 = |q|^2 - 2 q.x +
// |x|^2, the q.x of a tile of queries against a block of base rows from one GEMM (OpenBLAS, with
// threads of its own), then each query's top K updated from the block over the threads. It is the
// ground truth the approximate indexes are measured against, the 'flat' index, and the assignment
// step of k-means. Its twin on the GPU (retro/cuda_exact_search_cuda.cpp, CUDA builds) forms the
// same fp64 distances from cuBLAS DGEMM products and keeps each query's top K on the device: the
// 'flat' index with --device cuda.
//
// The expansion cancels: embeddings crowd around a common mean, so their distances can be ten
// thousand times smaller than their squared norms, and in fp32 the rounding of the norms then
// outweighs the distances' differences. Exact answers are therefore computed in fp64 (products,
// norms and sums); fp32 serves where a near tie may go either way (k-means assignment).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "retro/index.hpp"
#include "retro/vectors.hpp"

namespace meg {

enum class SearchPrecision { fp32, fp64 };

// The K nearest rows of BASE to each row of QUERIES (squared L2, nearest first, equal distances by
// lower id) into IDS and DISTS [queries.n, K] (-1 and +inf past the candidates; DISTS may be
// null). EXCLUDE: null, or the left-out ids of each query.
void exact_search(const VectorSet& base, const VectorSet& queries, size_t k, const IdRanges* exclude, int64_t* ids,
                  float* dists, SearchPrecision precision = SearchPrecision::fp64);

// The 'flat' index: exact search over the vectors themselves, no files of its own.
class ExactIndex final : public VectorIndex {
 public:
  explicit ExactIndex(const VectorSet& base) : base_(base) {}
  void search(const VectorSet& queries, size_t k, const IdRanges* exclude, int64_t* ids, float* dists) const override {
    exact_search(base_, queries, k, exclude, ids, dists);
  }

 private:
  VectorSet base_;
};

// The 'flat' index over BASE (which must outlive it) on DEVICE: "cpu" (ExactIndex) or "cuda" (the
// GPU's exact search, which holds a copy of BASE on the device). InputError on another device, or
// --device cuda without CUDA or a GPU.
std::unique_ptr<VectorIndex> make_exact_index(const VectorSet& base, const std::string& device);

#if MEG_CUDA
std::unique_ptr<VectorIndex> make_cuda_exact_index(const VectorSet& base);
#endif

// Recall@K of an approximate search: the fraction of the exact search's TRUTH ids (K per query,
// row after row) that FOUND (the same shape) holds for the same query, in any order.
double recall_at_k(const std::vector<int64_t>& found, const std::vector<int64_t>& truth, size_t k);

}  // namespace meg
