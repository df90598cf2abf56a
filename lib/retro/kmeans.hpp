// Training-row sampling and Lloyd's k-means, deterministic for a seed: the coarse quantizer of the
// IVF indexes and the codebooks of product quantization.
#pragma once

#include <cstdint>
#include <vector>

#include "core/progress.hpp"
#include "retro/vectors.hpp"

namespace meg {

// M distinct rows of N (M <= N) chosen by SEED, in the order drawn: a partial Fisher-Yates shuffle
// driven by std::mt19937_64, whose output the C++ standard fixes, so every platform draws the same.
std::vector<size_t> choose_rows(size_t n, size_t m, uint64_t seed);

// The rows ROWS of SET, copied into one matrix.
std::vector<float> gather_rows(const VectorSet& set, const std::vector<size_t>& rows);

// The nearest row of CENTROIDS to every row of POINTS (exact search in fp32: a near tie may go
// either way).
std::vector<int64_t> nearest_centroids(const VectorSet& centroids, const VectorSet& points);

// K centroids [K, dim] of POINTS (K <= points.n): started from K distinct points chosen by SEED,
// then ITERS rounds of assigning every point to its nearest centroid and moving each centroid to
// the mean of its points. A cluster left empty splits the largest one in two, as FAISS does: the
// two centroids are the big one scaled by 1 + eps and 1 - eps on alternate coordinates.
// PROGRESS, when given, counts the iterations.
std::vector<float> kmeans(const VectorSet& points, size_t k, int iters, uint64_t seed, Progress* progress = nullptr);

}  // namespace meg
