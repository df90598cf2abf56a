#include "retro/ivf.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/progress.hpp"
#include "ops/cpu/ops.hpp"
#include "retro/exact_search.hpp"
#include "retro/kmeans.hpp"
#include "retro/matrix_file.hpp"
#include "retro/topk.hpp"

namespace meg {
namespace {

// Positions 0 .. KEYS.size() - 1 grouped by their key (below GROUPS), a stable counting sort:
// group g is members[offsets[g] .. offsets[g + 1]), ascending.
struct Groups {
  std::vector<int64_t> offsets, members;
};
Groups group_by(const std::vector<int64_t>& keys, size_t groups) {
  Groups g{std::vector<int64_t>(groups + 1, 0), std::vector<int64_t>(keys.size())};
  for (int64_t k : keys) ++g.offsets[size_t(k) + 1];
  for (size_t i = 0; i < groups; ++i) g.offsets[i + 1] += g.offsets[i];
  std::vector<int64_t> fill(g.offsets.begin(), g.offsets.end() - 1);
  for (size_t i = 0; i < keys.size(); ++i) g.members[size_t(fill[size_t(keys[i])]++)] = int64_t(i);
  return g;
}

// The rows ROWS minus CENTROID into OUT, and their squared norms into NORMS.
void residuals_of(const float* const* rows, size_t n, const float* centroid, size_t dim, float* out, float* norms) {
  for (size_t i = 0; i < n; ++i) {
    float norm = 0;
    for (size_t d = 0; d < dim; ++d) {
      out[i * dim + d] = rows[i][d] - centroid[d];
      norm += out[i * dim + d] * out[i * dim + d];
    }
    norms[i] = norm;
  }
}

}  // namespace

InvertedLists build_inverted_lists(const VectorSet& base, const VectorSet& train, size_t nlist, int iters,
                                   uint64_t seed, std::vector<int64_t>* assign) {
  InvertedLists lists;
  lists.dim = base.dim;
  Progress iterations(fmt::format("index: k-means of {} rows into {} lists", train.n, nlist), uint64_t(iters),
                      "iterations");
  lists.centroids = kmeans(train, nlist, iters, seed, &iterations);
  iterations.finish();
  const VectorSet centroids{lists.centroids.data(), nlist, base.dim};

  // Assignment in blocks, for the progress line: it is a product of every row with every centroid.
  std::vector<int64_t> list_of(base.n);
  constexpr size_t kBlock = 65536;
  Progress progress("index: assign", base.n, "vectors");
  for (size_t b = 0; b < base.n; b += kBlock) {
    const size_t n = std::min(kBlock, base.n - b);
    const std::vector<int64_t> nearest = nearest_centroids(centroids, {base.row(b), n, base.dim});
    std::copy(nearest.begin(), nearest.end(), list_of.begin() + ptrdiff_t(b));
    progress.add(n);
  }
  progress.finish();

  Groups by_list = group_by(list_of, nlist);
  lists.offsets = std::move(by_list.offsets);
  lists.ids = std::move(by_list.members);
  if (assign) *assign = std::move(list_of);
  return lists;
}

std::vector<std::string> save_inverted_lists(const InvertedLists& lists, const std::string& dir, uint64_t fingerprint) {
  write_matrix<float>(dir + "/centroids.mat", lists.nlist(), lists.dim, lists.centroids, fingerprint);
  write_matrix<int64_t>(dir + "/lists.mat", lists.offsets.size(), 1, lists.offsets, fingerprint);
  write_matrix<int64_t>(dir + "/ids.mat", lists.ids.size(), 1, lists.ids, fingerprint);
  return {"centroids.mat", "lists.mat", "ids.mat"};
}

InvertedLists load_inverted_lists(const std::string& dir, size_t n, size_t dim) {
  const MatrixFile centroids(dir + "/centroids.mat", MatrixDtype::kF32);
  const MatrixFile offsets(dir + "/lists.mat", MatrixDtype::kI64);
  const MatrixFile ids(dir + "/ids.mat", MatrixDtype::kI64);
  check_matrix_shape(centroids, 0, dim, "the centroid matrix");
  check_matrix_shape(offsets, centroids.rows() + 1, 1, "the list offsets");
  check_matrix_shape(ids, n, 1, "the list ids");
  InvertedLists lists;
  lists.dim = dim;
  lists.centroids.assign(centroids.data<float>().begin(), centroids.data<float>().end());
  lists.offsets.assign(offsets.data<int64_t>().begin(), offsets.data<int64_t>().end());
  lists.ids.assign(ids.data<int64_t>().begin(), ids.data<int64_t>().end());
  for (size_t c = 0; c < lists.nlist(); ++c)
    if (lists.offsets[c] > lists.offsets[c + 1]) input_error("{}: list {} ends before it starts", offsets.path(), c);
  if (lists.offsets.front() != 0 || lists.offsets.back() != int64_t(n))
    input_error("{}: the lists do not cover the {} vectors", offsets.path(), n);
  for (int64_t id : lists.ids)
    if (id < 0 || id >= int64_t(n)) input_error("{}: id {} is not one of the {} vectors", ids.path(), id, n);
  return lists;
}

Probes probe_lists(const InvertedLists& lists, const VectorSet& queries, size_t nprobe) {
  const VectorSet centroids{lists.centroids.data(), lists.nlist(), lists.dim};
  Probes p{std::vector<int64_t>(queries.n * nprobe), std::vector<float>(queries.n * nprobe)};
  exact_search(centroids, queries, nprobe, nullptr, p.lists.data(), p.dists.data(), SearchPrecision::fp32);
  return p;
}

IvfIndex::IvfIndex(const VectorSet& base, InvertedLists lists, size_t nprobe)
    : lists_(std::move(lists)), nprobe_(nprobe), residuals_(base.n * base.dim), residual_norms_(base.n) {
  parallel_for(lists_.nlist(), 1, [&](size_t begin, size_t end) {
    std::vector<const float*> rows;
    for (size_t c = begin; c < end; ++c) {
      const size_t first = size_t(lists_.offsets[c]), n = size_t(lists_.offsets[c + 1]) - first;
      rows.clear();
      for (size_t p = first; p < first + n; ++p) rows.push_back(base.row(size_t(lists_.ids[p])));
      residuals_of(rows.data(), n, lists_.centroids.data() + c * base.dim, base.dim,
                   residuals_.data() + first * base.dim, residual_norms_.data() + first);
    }
  });
}

void IvfIndex::search(const VectorSet& queries, size_t k, const IdRanges* exclude, int64_t* ids, float* dists) const {
  const size_t dim = lists_.dim, nlist = lists_.nlist();
  // The probes of each list, in query order (probe i is of query i / nprobe).
  const Groups probes = group_by(probe_lists(lists_, queries, nprobe_).lists, nlist);
  const auto query_of = [&](size_t c, size_t i) { return size_t(probes.members[size_t(probes.offsets[c]) + i]) / nprobe_; };

  // A query's heap is updated by one list at a time, so one thread at a time.
  std::vector<TopK> best(queries.n, TopK(k));
  std::vector<const float*> rows;
  std::vector<float> q_residuals, q_norms, products;
  for (size_t c = 0; c < nlist; ++c) {
    const size_t m = size_t(probes.offsets[c + 1] - probes.offsets[c]), at = size_t(lists_.offsets[c]),
                 n = size_t(lists_.offsets[c + 1]) - at;
    if (m == 0 || n == 0) continue;
    rows.clear();
    for (size_t i = 0; i < m; ++i) rows.push_back(queries.row(query_of(c, i)));
    q_residuals.resize(m * dim);
    q_norms.resize(m);
    residuals_of(rows.data(), m, lists_.centroids.data() + c * dim, dim, q_residuals.data(), q_norms.data());
    products.resize(m * n);
    // products[m, n] = query residuals @ list residuals^T
    cpu::linear_forward<float>(products.data(), q_residuals.data(), residuals_.data() + at * dim, nullptr, int(m),
                               int(dim), int(n));
    parallel_for(m, 4, [&](size_t begin, size_t end) {
      std::vector<float> d(n);
      for (size_t i = begin; i < end; ++i) {
        const size_t q = query_of(c, i);
        expanded_distances(q_norms[i], residual_norms_.data() + at, products.data() + i * n, n, d.data());
        best[q].offer(d.data(), n, exclude ? exclude[q] : IdRanges{}, [&](size_t j) { return lists_.ids[at + j]; });
      }
    });
  }
  parallel_for(queries.n, 64, [&](size_t begin, size_t end) {
    for (size_t q = begin; q < end; ++q) best[q].write(ids + q * k, dists ? dists + q * k : nullptr);
  });
}

}  // namespace meg
