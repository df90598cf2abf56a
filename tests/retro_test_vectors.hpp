// Test vectors for the nearest-neighbour searches (tests/unit/test_retro_search.cpp, and the GPU's
// in tests/gpu/test_retro_cuda.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace meg {

// N points around CLUSTERS centres: embeddings crowd around a common mean, so the centres sit
// near an offset far larger than their spread (which is what makes fp32 expansions cancel).
inline std::vector<float> clustered(size_t n, size_t dim, size_t clusters, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> centres(clusters * dim);
  for (size_t i = 0; i < centres.size(); ++i) centres[i] = 20.0f + normal(rng);
  std::vector<float> points(n * dim);
  for (size_t i = 0; i < n; ++i) {
    const size_t c = rng() % clusters;
    for (size_t d = 0; d < dim; ++d) points[i * dim + d] = centres[c * dim + d] + 0.3f * normal(rng);
  }
  return points;
}

}  // namespace meg
