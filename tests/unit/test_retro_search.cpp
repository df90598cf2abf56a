// Nearest-neighbour search: the exact search against brute force, each approximate index's
// recall@10 against the exact search on clustered vectors, left-out ids never returned, and
// builds that give the same files for a seed on any number of threads.
#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>

#include "catch.hpp"
#include "core/parallel.hpp"
#include "retro/exact_search.hpp"
#include "retro/index.hpp"
#include "retro/kmeans.hpp"
#include "retro/topk.hpp"
#include "retro_test_vectors.hpp"
#include "test_util.hpp"

using namespace meg;

namespace {

// Brute force in double: the K nearest by (distance, id), left-out ids skipped.
std::vector<int64_t> brute_force(const VectorSet& base, const float* q, size_t k, IdRanges skip) {
  std::vector<std::pair<double, int64_t>> all;
  for (size_t i = 0; i < base.n; ++i) {
    if (skip.contains(int64_t(i))) continue;
    double d = 0;
    for (size_t j = 0; j < base.dim; ++j) d += (double(q[j]) - base.row(i)[j]) * (double(q[j]) - base.row(i)[j]);
    all.push_back({d, int64_t(i)});
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> ids(k, -1);
  for (size_t i = 0; i < k && i < all.size(); ++i) ids[i] = all[i].second;
  return ids;
}

// Each base row's "document": the 4 ids around it.
std::vector<IdRange> document_ranges(size_t n) {
  std::vector<IdRange> skip(n);
  for (size_t i = 0; i < n; ++i) skip[i] = {int64_t(i / 4 * 4), int64_t(std::min(n, i / 4 * 4 + 4))};
  return skip;
}

std::vector<std::string> folder_bytes(const std::string& dir, const std::vector<std::string>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(read_file(dir + "/" + f));
  return out;
}

struct ThreadsGuard {
  ~ThreadsGuard() { set_num_threads(0); }
};

}  // namespace

TEST_CASE("retro: the top K keeps the nearest, equal distances by lower id", "[retro]") {
  TopK top(3);
  for (int64_t id : {9, 4, 7, 1, 8}) top.push(id == 1 ? 0.5f : 1.0f, id);
  int64_t ids[4];
  float dists[4];
  top.write(ids, dists);
  CHECK(std::vector<int64_t>(ids, ids + 3) == std::vector<int64_t>{1, 4, 7});
  CHECK(dists[0] == 0.5f);
  TopK few(4);
  few.push(2.0f, 3);
  few.write(ids, dists);
  CHECK(std::vector<int64_t>(ids, ids + 4) == std::vector<int64_t>{3, -1, -1, -1});
  CHECK(std::isinf(dists[3]));
}

TEST_CASE("retro: the exact search equals brute force, left-out ids included", "[retro]") {
  const size_t n = 3000, dim = 24, nq = 40, k = 10;
  const std::vector<float> points = clustered(n, dim, 12, 1), queries = clustered(nq, dim, 12, 2);
  const VectorSet base{points.data(), n, dim};
  // Two ranges a query, as for a training sample across a document edge.
  std::vector<IdRange> ranges(2 * nq);
  std::vector<IdRanges> skip(nq);
  for (size_t q = 0; q < nq; ++q) {
    ranges[2 * q] = {int64_t(q * 70), int64_t(q * 70 + 50)};
    ranges[2 * q + 1] = {int64_t(n - 40 - q * 60), int64_t(n - q * 60)};
    skip[q] = {std::span(ranges).subspan(2 * q, 2)};
  }
  std::vector<int64_t> ids(nq * k);
  std::vector<float> dists(nq * k);
  exact_search(base, {queries.data(), nq, dim}, k, skip.data(), ids.data(), dists.data());
  for (size_t q = 0; q < nq; ++q) {
    INFO("query " << q);
    const std::vector<int64_t> want = brute_force(base, queries.data() + q * dim, k, skip[q]);
    CHECK(std::vector<int64_t>(ids.begin() + ptrdiff_t(q * k), ids.begin() + ptrdiff_t((q + 1) * k)) == want);
    for (size_t j = 0; j < k; ++j)
      CHECK(std::abs(dists[q * k + j] - l2_sqr(queries.data() + q * dim, base.row(size_t(want[j])), dim)) <=
            1e-5f * dists[q * k + j]);
  }
  // Fewer rows than K outside the left-out range: the rest is -1 and +inf.
  const IdRange all_but_two_range{2, int64_t(n)};
  const IdRanges all_but_two{std::span(&all_but_two_range, 1)};
  exact_search(base, {queries.data(), 1, dim}, k, &all_but_two, ids.data(), dists.data());
  CHECK(std::vector<int64_t>(ids.begin(), ids.begin() + 3) == std::vector<int64_t>{ids[0], ids[1], -1});
  CHECK(std::set<int64_t>{ids[0], ids[1]} == std::set<int64_t>{0, 1});
  CHECK(std::isinf(dists[2]));
}

TEST_CASE("retro: the flat index on the CPU is the exact search; other devices are refused", "[retro]") {
  const size_t n = 500, dim = 8, nq = 5, k = 4;
  const std::vector<float> points = clustered(n, dim, 5, 6), queries = clustered(nq, dim, 5, 7);
  const VectorSet base{points.data(), n, dim};
  std::vector<int64_t> want(nq * k), got(nq * k);
  exact_search(base, {queries.data(), nq, dim}, k, nullptr, want.data(), nullptr);
  make_exact_index(base, "cpu")->search({queries.data(), nq, dim}, k, nullptr, got.data(), nullptr);
  CHECK(got == want);
  CHECK(input_error_of([&] { make_exact_index(base, "tpu"); }) == "--device 'tpu': expected cpu or cuda");
#if !MEG_CUDA
  CHECK(input_error_of([&] { make_exact_index(base, "cuda"); }).find("no CUDA") != std::string::npos);
#endif
}

TEST_CASE("retro: each approximate index finds 9 of the exact 10 nearest, never a left-out id", "[retro]") {
  const size_t n = 20000, dim = 32, k = 10, nq = 500;
  const std::vector<float> points = clustered(n, dim, 2000, 3);
  const VectorSet base{points.data(), n, dim};
  // Queries: base rows spread over the set, each with its own document and one far away left out.
  std::vector<size_t> rows(nq);
  for (size_t q = 0; q < nq; ++q) rows[q] = q * (n / nq) + q % 7;
  const std::vector<float> queries = gather_rows(base, rows);
  const std::vector<IdRange> all_skips = document_ranges(n);
  std::vector<IdRange> ranges(2 * nq);
  std::vector<IdRanges> skip(nq);
  for (size_t q = 0; q < nq; ++q) {
    ranges[2 * q] = all_skips[rows[q]];
    ranges[2 * q + 1] = all_skips[(rows[q] + n / 2) % n];
    skip[q] = {std::span(ranges).subspan(2 * q, 2)};
  }
  std::vector<int64_t> truth(nq * k), found(nq * k);
  exact_search(base, {queries.data(), nq, dim}, k, skip.data(), truth.data(), nullptr);

  TempDir dir;
  for (IndexType type : {IndexType::ivf, IndexType::ivf_pq, IndexType::hnsw}) {
    INFO(index_type_name(type));
    IndexOptions o;
    o.type = type;
    o.hnsw_m = 16;
    const IndexOptions resolved = resolve_index_options(o, n, dim);
    const std::string folder = dir.path(index_type_name(type));
    std::filesystem::create_directories(folder);
    build_index(base, resolved, folder, 1);
    const auto index = load_index(base, resolved, folder);
    index->search({queries.data(), nq, dim}, k, skip.data(), found.data(), nullptr);
    const double r = recall_at_k(found, truth, k);
    INFO("recall@10 " << r);
    CHECK(r >= 0.9);
    for (size_t q = 0; q < nq; ++q)
      for (size_t j = 0; j < k; ++j) {
        CHECK(found[q * k + j] >= 0);
        CHECK_FALSE(skip[q].contains(found[q * k + j]));
      }
  }
}

TEST_CASE("retro: index builds give the same files for a seed on any number of threads", "[retro]") {
  ThreadsGuard guard;
  const size_t n = 6000, dim = 16;
  const std::vector<float> points = clustered(n, dim, 20, 4);
  const VectorSet base{points.data(), n, dim};
  TempDir dir;
  for (IndexType type : {IndexType::ivf, IndexType::ivf_pq, IndexType::hnsw}) {
    INFO(index_type_name(type));
    IndexOptions o;
    o.type = type;
    o.hnsw_m = 8;
    const IndexOptions resolved = resolve_index_options(o, n, dim);
    std::vector<std::vector<std::string>> builds;
    for (unsigned threads : {1u, 3u}) {
      set_num_threads(threads);
      const std::string folder = dir.path(std::string(index_type_name(type)) + std::to_string(threads));
      std::filesystem::create_directories(folder);
      builds.push_back(folder_bytes(folder, build_index(base, resolved, folder, 9)));
    }
    CHECK(builds[0] == builds[1]);
    IndexOptions reseeded = resolved;
    reseeded.seed = 99;
    const std::string folder = dir.path(std::string(index_type_name(type)) + "-99");
    std::filesystem::create_directories(folder);
    CHECK(folder_bytes(folder, build_index(base, reseeded, folder, 9)) != builds[0]);
  }
}

TEST_CASE("retro: k-means finds separated clusters; rows are drawn the same for a seed", "[retro]") {
  const std::vector<size_t> rows = choose_rows(100, 30, 5);
  CHECK(rows == choose_rows(100, 30, 5));
  CHECK(rows != choose_rows(100, 30, 6));
  CHECK(std::set<size_t>(rows.begin(), rows.end()).size() == 30);

  // Four tight clusters far apart: each centroid lands on one, and k-means agrees with itself.
  std::vector<float> points;
  const float centres[4][2] = {{0, 0}, {100, 0}, {0, 100}, {100, 100}};
  for (int i = 0; i < 400; ++i) points.insert(points.end(), {centres[i % 4][0] + float(i % 7) * 0.01f, centres[i % 4][1]});
  const VectorSet set{points.data(), 400, 2};
  const std::vector<float> c = kmeans(set, 4, 10, 1);
  CHECK(c == kmeans(set, 4, 10, 1));
  std::set<std::pair<int, int>> found;
  for (size_t i = 0; i < 4; ++i) found.insert({int(std::lround(c[2 * i])), int(std::lround(c[2 * i + 1]))});
  CHECK(found == std::set<std::pair<int, int>>{{0, 0}, {100, 0}, {0, 100}, {100, 100}});
}

TEST_CASE("retro: index options resolve from the data and refuse what cannot work", "[retro]") {
  IndexOptions o;
  o.type = IndexType::ivf_pq;
  const IndexOptions r = resolve_index_options(o, 1000000, 768);
  CHECK(r.nlist == 2000);
  CHECK(r.nprobe == 125);
  CHECK(r.pq_m == 96);
  CHECK(r.train_size == 128000);
  CHECK(resolve_index_options(o, 100, 30).pq_m == 15);
  o.pq_m = 7;
  CHECK_THROWS_AS(resolve_index_options(o, 1000, 64), InputError);
  o = IndexOptions{};
  o.nlist = 50;
  CHECK_THROWS_AS(resolve_index_options(o, 40, 8), InputError);
  o.type = IndexType::hnsw;
  o.hnsw_m = 1;
  CHECK_THROWS_AS(resolve_index_options(o, 40, 8), InputError);
  CHECK_THROWS_AS(parse_index_type("lsh"), InputError);
}
