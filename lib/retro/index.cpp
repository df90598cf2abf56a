#include "retro/index.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "retro/exact_search.hpp"
#include "retro/hnsw.hpp"
#include "retro/ivf.hpp"
#include "retro/ivf_pq.hpp"
#include "retro/kmeans.hpp"

namespace meg {

IndexType parse_index_type(const std::string& name) {
  for (IndexType t : {IndexType::flat, IndexType::ivf, IndexType::ivf_pq, IndexType::hnsw})
    if (name == index_type_name(t)) return t;
  input_error("--index-type {}: unknown (flat, ivf, ivf-pq or hnsw)", name);
}

const char* index_type_name(IndexType type) {
  switch (type) {
    case IndexType::flat: return "flat";
    case IndexType::ivf: return "ivf";
    case IndexType::ivf_pq: return "ivf-pq";
    case IndexType::hnsw: return "hnsw";
  }
  return "unknown";
}

namespace {

bool has_lists(IndexType t) { return t == IndexType::ivf || t == IndexType::ivf_pq; }

}  // namespace

IndexOptions resolve_index_options(IndexOptions o, size_t n, size_t dim) {
  if (n == 0) input_error("no vectors to index");
  if (has_lists(o.type)) {
    if (o.nlist == 0) o.nlist = std::clamp<size_t>(size_t(std::lround(2 * std::sqrt(double(n)))), 1, std::max<size_t>(1, n / 16));
    if (o.nlist > n) input_error("--nlist {}: more lists than the {} vectors", o.nlist, n);
    if (o.train_size == 0) o.train_size = std::max<size_t>(64 * o.nlist, 16384);
    o.train_size = std::min(o.train_size, n);
    if (o.train_size < o.nlist) input_error("--train-size {}: fewer training rows than the {} lists", o.train_size, o.nlist);
    if (o.nprobe == 0) o.nprobe = std::min(o.nlist, std::max<size_t>(8, o.nlist / 16));
    if (o.nprobe > o.nlist) input_error("--nprobe {}: more than the {} lists", o.nprobe, o.nlist);
    if (o.kmeans_iters < 0) input_error("--kmeans-iters {}: must not be negative", o.kmeans_iters);
  }
  if (o.type == IndexType::ivf_pq) {
    for (size_t dsub : {8, 4, 2, 1})
      if (o.pq_m == 0 && dim % dsub == 0) o.pq_m = dim / dsub;
    if (o.pq_m > dim || dim % o.pq_m != 0)
      input_error("--pq-m {}: the {} dimensions do not split into that many sub-vectors", o.pq_m, dim);
  }
  if (o.type == IndexType::hnsw) {
    if (o.hnsw_m < 2) input_error("--hnsw-m {}: a node needs at least 2 links", o.hnsw_m);
    if (o.ef_construction == 0 || o.ef_search == 0) input_error("--ef-construction and --ef-search must be positive");
  }
  return o;
}

nlohmann::ordered_json index_build_settings(const IndexOptions& o) {
  nlohmann::ordered_json j = {{"type", index_type_name(o.type)}};
  if (has_lists(o.type)) {
    j["seed"] = o.seed;
    j["nlist"] = o.nlist;
    j["train_size"] = o.train_size;
    j["kmeans_iters"] = o.kmeans_iters;
  }
  if (o.type == IndexType::ivf_pq) j["pq_m"] = o.pq_m;
  if (o.type == IndexType::hnsw) {
    j["seed"] = o.seed;
    j["hnsw_m"] = o.hnsw_m;
    j["ef_construction"] = o.ef_construction;
  }
  return j;
}

nlohmann::ordered_json index_search_settings(const IndexOptions& o) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (has_lists(o.type)) j["nprobe"] = o.nprobe;
  if (o.type == IndexType::ivf_pq) j["refine"] = o.refine;
  if (o.type == IndexType::hnsw) j["ef_search"] = o.ef_search;
  return j;
}

std::vector<std::string> build_index(const VectorSet& base, const IndexOptions& o, const std::string& dir,
                                     uint64_t fingerprint) {
  switch (o.type) {
    case IndexType::flat: return {};
    case IndexType::hnsw: return save_hnsw(build_hnsw(base, o.hnsw_m, o.ef_construction, o.seed), dir, fingerprint);
    case IndexType::ivf:
    case IndexType::ivf_pq: break;
  }
  const std::vector<float> train = gather_rows(base, choose_rows(base.n, o.train_size, o.seed));
  const VectorSet train_set{train.data(), o.train_size, base.dim};
  if (o.type == IndexType::ivf)
    return save_inverted_lists(build_inverted_lists(base, train_set, o.nlist, o.kmeans_iters, o.seed), dir, fingerprint);
  return save_ivf_pq(build_ivf_pq(base, train_set, o.nlist, o.pq_m, o.kmeans_iters, o.seed), dir, fingerprint);
}

std::unique_ptr<VectorIndex> load_index(const VectorSet& base, const IndexOptions& o, const std::string& dir,
                                        const std::string& device) {
  switch (o.type) {
    case IndexType::flat: return make_exact_index(base, device);
    case IndexType::ivf: {
      InvertedLists lists = load_inverted_lists(dir, base.n, base.dim);
      const size_t nprobe = std::min(o.nprobe, lists.nlist());
      return std::make_unique<IvfIndex>(base, std::move(lists), nprobe);
    }
    case IndexType::ivf_pq: {
      IvfPq index = load_ivf_pq(dir, base.n, base.dim);
      const size_t nprobe = std::min(o.nprobe, index.lists.nlist());
      return std::make_unique<IvfPqIndex>(base, std::move(index), nprobe, o.refine);
    }
    case IndexType::hnsw: return std::make_unique<HnswIndex>(base, load_hnsw(dir, base.n), o.ef_search);
  }
  return nullptr;
}

}  // namespace meg
