#include "retro/exact_search.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <type_traits>

#include "core/device.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "ops/cpu/ops.hpp"
#include "retro/topk.hpp"

namespace meg {
namespace {

// Rows [FIRST, FIRST + N) of SET as T: in place for float, converted into BUF for double.
template <typename T>
const T* rows_as(const VectorSet& set, size_t first, size_t n, std::vector<T>& buf) {
  if constexpr (std::is_same_v<T, float>) {
    return set.row(first);
  } else {
    buf.resize(n * set.dim);
    parallel_for(n, 64, [&](size_t begin, size_t end) {
      std::copy(set.row(first + begin), set.row(first + end), buf.begin() + ptrdiff_t(begin * set.dim));
    });
    return buf.data();
  }
}

// Squared norms of N rows of DIM values.
template <typename T>
std::vector<T> norms_of(const T* rows, size_t n, size_t dim) {
  std::vector<T> out(n);
  parallel_for(n, 256, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      T s = 0;
      for (size_t d = 0; d < dim; ++d) s += rows[i * dim + d] * rows[i * dim + d];
      out[i] = s;
    }
  });
  return out;
}

template <typename T>
void search(const VectorSet& base, const VectorSet& queries, size_t k, const IdRanges* exclude, int64_t* ids,
            float* dists) {
  // A tile of 2^20 products (256 queries x 4096 rows, or more queries against fewer rows, as
  // k-means has them) stays in cache while the heaps read it, and keeps the GEMMs large.
  constexpr size_t kBaseBlock = 4096, kProducts = size_t(1) << 20;
  const size_t dim = base.dim, query_tile = kProducts / std::min(kBaseBlock, std::max<size_t>(base.n, 1));
  std::vector<T> products(kProducts), query_buf, base_buf;
  std::vector<TopK> best;
  for (size_t q0 = 0; q0 < queries.n; q0 += query_tile) {
    const size_t nq = std::min(query_tile, queries.n - q0);
    const T* q = rows_as<T>(queries, q0, nq, query_buf);
    const std::vector<T> qnorms = norms_of(q, nq, dim);
    best.assign(nq, TopK(k));
    for (size_t b0 = 0; b0 < base.n; b0 += kBaseBlock) {
      const size_t nb = std::min(kBaseBlock, base.n - b0);
      const T* x = rows_as<T>(base, b0, nb, base_buf);
      const std::vector<T> xnorms = norms_of(x, nb, dim);
      // products[nq, nb] = q @ x^T
      cpu::linear_forward<T>(products.data(), q, x, nullptr, int(nq), int(dim), int(nb));
      parallel_for(nq, 4, [&](size_t begin, size_t end) {
        std::vector<float> d(nb);
        for (size_t i = begin; i < end; ++i) {
          expanded_distances(qnorms[i], xnorms.data(), products.data() + i * nb, nb, d.data());
          best[i].offer(d.data(), nb, exclude ? exclude[q0 + i] : IdRanges{}, [&](size_t j) { return int64_t(b0 + j); });
        }
      });
    }
    parallel_for(nq, 64, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) best[i].write(ids + (q0 + i) * k, dists ? dists + (q0 + i) * k : nullptr);
    });
  }
}

}  // namespace

void exact_search(const VectorSet& base, const VectorSet& queries, size_t k, const IdRanges* exclude, int64_t* ids,
                  float* dists, SearchPrecision precision) {
  if (precision == SearchPrecision::fp64)
    search<double>(base, queries, k, exclude, ids, dists);
  else
    search<float>(base, queries, k, exclude, ids, dists);
}

std::unique_ptr<VectorIndex> make_exact_index(const VectorSet& base, const std::string& device) {
  // Both devices search in fp64: no precision for the CPU to refuse.
  if (checked_device(device, Precision::fp32) == Device::cpu) return std::make_unique<ExactIndex>(base);
#if MEG_CUDA
  return make_cuda_exact_index(base);
#else
  throw std::logic_error("make_exact_index: checked_device let cuda through in a build without CUDA");
#endif
}

double recall_at_k(const std::vector<int64_t>& found, const std::vector<int64_t>& truth, size_t k) {
  size_t hits = 0;
  for (size_t q = 0; q < truth.size() / k; ++q) {
    const std::set<int64_t> want(truth.begin() + ptrdiff_t(q * k), truth.begin() + ptrdiff_t((q + 1) * k));
    for (size_t j = 0; j < k; ++j) hits += want.count(found[q * k + j]);
  }
  return truth.empty() ? 1.0 : double(hits) / double(truth.size());
}

}  // namespace meg
