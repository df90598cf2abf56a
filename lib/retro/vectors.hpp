// Vectors as the retrieval indexes see them: rows of a float matrix, squared L2 distances (the
// metric of Megatron's RETRO indexes, FAISS's default), and the ids a query must not return (the
// chunks of the documents it comes from).
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace meg {

// N vectors of DIM floats, row-major; not owned.
struct VectorSet {
  const float* data = nullptr;
  size_t n = 0, dim = 0;
  const float* row(size_t i) const { return data + i * dim; }
};

// Ids [begin, end) left out of a query's answer; empty when begin == end.
struct IdRange {
  int64_t begin = 0, end = 0;
  bool contains(int64_t id) const { return id >= begin && id < end; }
};

// The ids left out of one query's answer: a few ranges, one per document the query comes from (a
// training sample crosses document edges, and its documents' chunks lie apart in the database).
// Not owned.
struct IdRanges {
  std::span<const IdRange> ranges;
  bool contains(int64_t id) const {
    return std::any_of(ranges.begin(), ranges.end(), [id](const IdRange& r) { return r.contains(id); });
  }
};

// Squared L2 distance. Sixteen independent partial sums, added in a fixed order at the end: the
// compiler vectorizes the loop without reassociating anything, so the result is the same on every
// thread and every run.
inline float l2_sqr(const float* a, const float* b, size_t dim) {
  float acc[16] = {};
  size_t i = 0;
  for (; i + 16 <= dim; i += 16)
    for (size_t j = 0; j < 16; ++j) {
      const float d = a[i + j] - b[i + j];
      acc[j] += d * d;
    }
  for (size_t j = 0; i < dim; ++i, ++j) {
    const float d = a[i] - b[i];
    acc[j] += d * d;
  }
  for (size_t j = 8; j > 0; j /= 2)
    for (size_t l = 0; l < j; ++l) acc[l] += acc[l + j];
  return acc[0];
}

// Squared distances from their expansion, |q|^2 + |x_j|^2 - 2 q.x_j for j < N, into OUT: the
// dot products come from a GEMM. Never below zero, where rounding can take a tiny distance.
template <typename T>
void expanded_distances(T q_norm, const T* x_norms, const T* dots, size_t n, float* out) {
  for (size_t j = 0; j < n; ++j) {
    const T d = q_norm + x_norms[j] - 2 * dots[j];
    out[j] = d > 0 ? float(d) : 0.0f;
  }
}

// fp16 bit patterns (an embeddings matrix) widened to floats, over the threads.
std::vector<float> widen_fp16(const uint16_t* data, size_t n);

}  // namespace meg
