// Product quantization (Jegou, Douze and Schmid, 2011): a vector cut into M sub-vectors of
// DIM / M floats, each replaced by the index of its nearest of KSUB (at most 256) centroids
// trained by k-means on that sub-space: M bytes a vector. A distance from a query to a code is
// then a sum of M look-ups in a table of the query's terms for every sub-centroid.
#pragma once

#include <cstdint>
#include <vector>

#include "retro/vectors.hpp"

namespace meg {

class ProductQuantizer {
 public:
  // CODEBOOKS [M * KSUB, DIM / M]: sub-space j's centroids are rows j * KSUB .. (j + 1) * KSUB.
  ProductQuantizer(size_t dim, size_t m, size_t ksub, std::vector<float> codebooks);

  // Codebooks trained on TRAIN (KSUB = min(256, rows)), ITERS rounds each, seeded by SEED + j.
  static ProductQuantizer train(const VectorSet& train, size_t m, int iters, uint64_t seed);

  size_t dim() const { return dim_; }
  size_t m() const { return m_; }
  size_t dsub() const { return dim_ / m_; }
  size_t ksub() const { return ksub_; }
  const std::vector<float>& codebooks() const { return codebooks_; }

  // The codes [X.n, M] of X's rows: each sub-vector's nearest sub-centroid, found by matrix
  // products (the exact search in fp32), sub-space by sub-space.
  void encode(const VectorSet& x, uint8_t* codes) const;
  // TABLE [M, KSUB]: the dot product of each sub-vector of X with each of its sub-centroids.
  void inner_table(const float* x, float* table) const;
  // The sum of CODE's entries of TABLE [M, KSUB].
  float distance(const float* table, const uint8_t* code) const {
    float d = 0;
    for (size_t j = 0; j < m_; ++j) d += table[j * ksub_ + code[j]];
    return d;
  }

 private:
  size_t dim_, m_, ksub_;
  std::vector<float> codebooks_;
};

}  // namespace meg
