#include "retro/ivf_pq.hpp"

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/progress.hpp"
#include "retro/kmeans.hpp"
#include "retro/matrix_file.hpp"
#include "retro/topk.hpp"

namespace meg {
namespace {

// X minus centroid C of LISTS, into OUT.
void residual(const InvertedLists& lists, const float* x, int64_t c, float* out) {
  const float* centroid = lists.centroids.data() + size_t(c) * lists.dim;
  for (size_t d = 0; d < lists.dim; ++d) out[d] = x[d] - centroid[d];
}

}  // namespace

IvfPq build_ivf_pq(const VectorSet& base, const VectorSet& train, size_t nlist, size_t m, int iters, uint64_t seed) {
  std::vector<int64_t> assign;
  InvertedLists lists = build_inverted_lists(base, train, nlist, iters, seed, &assign);
  const size_t dim = base.dim;

  const VectorSet pq_train{train.data, std::min<size_t>(train.n, 64 * 256), dim};
  const std::vector<int64_t> train_lists = nearest_centroids({lists.centroids.data(), nlist, dim}, pq_train);
  std::vector<float> residuals(pq_train.n * dim);
  for (size_t i = 0; i < pq_train.n; ++i) residual(lists, pq_train.row(i), train_lists[i], residuals.data() + i * dim);
  ProductQuantizer pq = ProductQuantizer::train({residuals.data(), pq_train.n, dim}, m, iters, seed + 1);

  // Encoded in the lists' order, a block of residuals at a time.
  std::vector<uint8_t> codes(base.n * m);
  std::vector<float> block;
  Progress progress("index: encode", base.n, "vectors");
  constexpr size_t kBlock = 16384;
  for (size_t b = 0; b < base.n; b += kBlock) {
    const size_t n = std::min(kBlock, base.n - b);
    block.resize(n * dim);
    parallel_for(n, 256, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        const int64_t id = lists.ids[b + i];
        residual(lists, base.row(size_t(id)), assign[size_t(id)], block.data() + i * dim);
      }
    });
    pq.encode({block.data(), n, dim}, codes.data() + b * m);
    progress.add(n);
  }
  progress.finish();
  return {std::move(lists), std::move(pq), std::move(codes)};
}

std::vector<std::string> save_ivf_pq(const IvfPq& index, const std::string& dir, uint64_t fingerprint) {
  std::vector<std::string> files = save_inverted_lists(index.lists, dir, fingerprint);
  const ProductQuantizer& pq = index.pq;
  write_matrix<float>(dir + "/codebooks.mat", pq.m() * pq.ksub(), pq.dsub(), pq.codebooks(), fingerprint);
  write_matrix<uint8_t>(dir + "/codes.mat", index.lists.ids.size(), pq.m(), index.codes, fingerprint);
  files.insert(files.end(), {"codebooks.mat", "codes.mat"});
  return files;
}

IvfPq load_ivf_pq(const std::string& dir, size_t n, size_t dim) {
  InvertedLists lists = load_inverted_lists(dir, n, dim);
  const MatrixFile codebooks(dir + "/codebooks.mat", MatrixDtype::kF32);
  const MatrixFile codes(dir + "/codes.mat", MatrixDtype::kU8);
  check_matrix_shape(codes, n, 0, "the code matrix");
  const size_t m = codes.cols();
  if (m == 0 || dim % m != 0 || codebooks.cols() != dim / m || codebooks.rows() % m != 0 ||
      codebooks.rows() / m == 0 || codebooks.rows() / m > 256)
    input_error("{}: {} x {} codebooks do not fit {} sub-vectors of {} dimensions", codebooks.path(), codebooks.rows(),
                codebooks.cols(), m, dim);
  const size_t ksub = codebooks.rows() / m;
  for (uint8_t c : codes.data<uint8_t>())
    if (c >= ksub) input_error("{}: code {} is past the {} centroids of the codebooks", codes.path(), c, ksub);
  ProductQuantizer pq(dim, m, ksub, {codebooks.data<float>().begin(), codebooks.data<float>().end()});
  return {std::move(lists), std::move(pq), {codes.data<uint8_t>().begin(), codes.data<uint8_t>().end()}};
}

IvfPqIndex::IvfPqIndex(const VectorSet& base, IvfPq index, size_t nprobe, size_t refine)
    : base_(base), index_(std::move(index)), nprobe_(nprobe), refine_(refine) {
  const ProductQuantizer& pq = index_.pq;
  const size_t table = pq.m() * pq.ksub();
  std::vector<float> norms(table, 0.0f);
  for (size_t t = 0; t < table; ++t)
    for (size_t d = 0; d < pq.dsub(); ++d) norms[t] += pq.codebooks()[t * pq.dsub() + d] * pq.codebooks()[t * pq.dsub() + d];
  list_terms_.resize(index_.lists.nlist() * table);
  parallel_for(index_.lists.nlist(), 16, [&](size_t begin, size_t end) {
    for (size_t c = begin; c < end; ++c) {
      float* terms = list_terms_.data() + c * table;
      pq.inner_table(index_.lists.centroids.data() + c * index_.lists.dim, terms);
      for (size_t t = 0; t < table; ++t) terms[t] = norms[t] + 2 * terms[t];
    }
  });
}

void IvfPqIndex::search(const VectorSet& queries, size_t k, const IdRanges* exclude, int64_t* ids, float* dists) const {
  const InvertedLists& lists = index_.lists;
  const ProductQuantizer& pq = index_.pq;
  const Probes probes = probe_lists(lists, queries, nprobe_);
  const size_t candidates = refine_ > 0 ? refine_ * k : k, table_size = pq.m() * pq.ksub();
  parallel_for(queries.n, 8, [&](size_t begin, size_t end) {
    std::vector<float> query_terms(table_size), table(table_size);
    for (size_t q = begin; q < end; ++q) {
      const float* x = queries.row(q);
      const IdRanges skip = exclude ? exclude[q] : IdRanges{};
      pq.inner_table(x, query_terms.data());
      TopK best(candidates);
      for (size_t p = 0; p < nprobe_; ++p) {
        const size_t c = size_t(probes.lists[q * nprobe_ + p]);
        const float* terms = list_terms_.data() + c * table_size;
        for (size_t t = 0; t < table_size; ++t) table[t] = terms[t] - 2 * query_terms[t];
        const float list_dist = probes.dists[q * nprobe_ + p];
        for (int64_t at = lists.offsets[c]; at < lists.offsets[c + 1]; ++at) {
          const int64_t id = lists.ids[size_t(at)];
          if (skip.contains(id)) continue;
          best.push(list_dist + pq.distance(table.data(), index_.codes.data() + size_t(at) * pq.m()), id);
        }
      }
      if (refine_ == 0) {
        best.write(ids + q * k, dists ? dists + q * k : nullptr);
        continue;
      }
      TopK top(k);
      for (const Neighbor& n : best.take_sorted()) top.push(l2_sqr(x, base_.row(size_t(n.id)), lists.dim), n.id);
      top.write(ids + q * k, dists ? dists + q * k : nullptr);
    }
  });
}

}  // namespace meg
