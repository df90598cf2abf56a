#include "retro/kmeans.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

#include "core/parallel.hpp"
#include "retro/exact_search.hpp"

namespace meg {

std::vector<size_t> choose_rows(size_t n, size_t m, uint64_t seed) {
  if (m > n) throw std::invalid_argument("choose_rows: more rows than there are");
  std::vector<size_t> perm(n);
  std::iota(perm.begin(), perm.end(), size_t(0));
  std::mt19937_64 rng(seed);
  // The modulo's bias is at most n / 2^64: nothing a sample could show.
  for (size_t i = 0; i < m; ++i) std::swap(perm[i], perm[i + rng() % (n - i)]);
  perm.resize(m);
  return perm;
}

std::vector<float> gather_rows(const VectorSet& set, const std::vector<size_t>& rows) {
  std::vector<float> out(rows.size() * set.dim);
  parallel_for(rows.size(), 1024, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) std::copy_n(set.row(rows[i]), set.dim, out.data() + i * set.dim);
  });
  return out;
}

std::vector<int64_t> nearest_centroids(const VectorSet& centroids, const VectorSet& points) {
  std::vector<int64_t> nearest(points.n);
  exact_search(centroids, points, 1, nullptr, nearest.data(), nullptr, SearchPrecision::fp32);
  return nearest;
}

std::vector<float> kmeans(const VectorSet& points, size_t k, int iters, uint64_t seed, Progress* progress) {
  if (k == 0 || k > points.n) throw std::invalid_argument("kmeans: need 1 <= k <= points");
  const size_t dim = points.dim;
  std::vector<float> centroids = gather_rows(points, choose_rows(points.n, k, seed));
  std::vector<double> sums(k * dim);
  std::vector<size_t> counts(k);
  for (int it = 0; it < iters; ++it) {
    const std::vector<int64_t> assign = nearest_centroids({centroids.data(), k, dim}, points);
    std::fill(counts.begin(), counts.end(), size_t(0));
    for (int64_t c : assign) ++counts[size_t(c)];
    // Each thread sums its own coordinates over all points in order: the same sums on any threads.
    std::fill(sums.begin(), sums.end(), 0.0);
    parallel_for(dim, 8, [&](size_t d0, size_t d1) {
      for (size_t i = 0; i < points.n; ++i) {
        const float* x = points.row(i);
        double* s = sums.data() + size_t(assign[i]) * dim;
        for (size_t d = d0; d < d1; ++d) s[d] += x[d];
      }
    });
    for (size_t c = 0; c < k; ++c)
      if (counts[c] > 0)
        for (size_t d = 0; d < dim; ++d) centroids[c * dim + d] = float(sums[c * dim + d] / double(counts[c]));
    for (size_t c = 0; c < k; ++c) {
      if (counts[c] > 0) continue;
      const size_t big = size_t(std::max_element(counts.begin(), counts.end()) - counts.begin());
      constexpr float kEps = 1.0f / 1024;
      for (size_t d = 0; d < dim; ++d) {
        const float v = centroids[big * dim + d], e = d % 2 == 0 ? kEps : -kEps;
        centroids[c * dim + d] = v * (1 + e);
        centroids[big * dim + d] = v * (1 - e);
      }
      counts[c] = counts[big] / 2;
      counts[big] -= counts[c];
    }
    if (progress) progress->add(1);
  }
  return centroids;
}

}  // namespace meg
