#include "retro/pq.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "core/progress.hpp"
#include "retro/kmeans.hpp"

namespace meg {

ProductQuantizer::ProductQuantizer(size_t dim, size_t m, size_t ksub, std::vector<float> codebooks)
    : dim_(dim), m_(m), ksub_(ksub), codebooks_(std::move(codebooks)) {
  if (m == 0 || dim % m != 0 || ksub == 0 || ksub > 256 || codebooks_.size() != m * ksub * (dim / m))
    throw std::invalid_argument("ProductQuantizer: inconsistent shape");
}

ProductQuantizer ProductQuantizer::train(const VectorSet& train, size_t m, int iters, uint64_t seed) {
  const size_t dsub = train.dim / m, ksub = std::min<size_t>(256, train.n);
  std::vector<float> codebooks(m * ksub * dsub), sub(train.n * dsub);
  Progress progress(fmt::format("index: codebooks of {} centroids on {} residuals", ksub, train.n), m, "codebooks");
  for (size_t j = 0; j < m; ++j) {
    for (size_t i = 0; i < train.n; ++i) std::copy_n(train.row(i) + j * dsub, dsub, sub.data() + i * dsub);
    const std::vector<float> centroids = kmeans({sub.data(), train.n, dsub}, ksub, iters, seed + j);
    std::copy(centroids.begin(), centroids.end(), codebooks.begin() + ptrdiff_t(j * ksub * dsub));
    progress.add(1);
  }
  progress.finish();
  return ProductQuantizer(train.dim, m, ksub, std::move(codebooks));
}

void ProductQuantizer::encode(const VectorSet& x, uint8_t* codes) const {
  const size_t dsub = this->dsub();
  std::vector<float> sub(x.n * dsub);
  for (size_t j = 0; j < m_; ++j) {
    for (size_t i = 0; i < x.n; ++i) std::copy_n(x.row(i) + j * dsub, dsub, sub.data() + i * dsub);
    const std::vector<int64_t> nearest =
        nearest_centroids({codebooks_.data() + j * ksub_ * dsub, ksub_, dsub}, {sub.data(), x.n, dsub});
    for (size_t i = 0; i < x.n; ++i) codes[i * m_ + j] = uint8_t(nearest[i]);
  }
}

void ProductQuantizer::inner_table(const float* x, float* table) const {
  const size_t dsub = this->dsub();
  for (size_t j = 0; j < m_; ++j) {
    const float* centroids = codebooks_.data() + j * ksub_ * dsub;
    for (size_t s = 0; s < ksub_; ++s) {
      float dot = 0;
      for (size_t d = 0; d < dsub; ++d) dot += x[j * dsub + d] * centroids[s * dsub + d];
      table[j * ksub_ + s] = dot;
    }
  }
}

}  // namespace meg
