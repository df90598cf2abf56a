// Nearest-neighbour indexes over chunk embeddings, by squared L2 distance (the metric of Megatron's
// RETRO indexes, which leave FAISS's default in place):
//
//   flat    exact search by matrix products (retro/exact_search.hpp); the ground truth. On the
//           CPU (OpenBLAS) or, with --device cuda, on the GPU (cuBLAS DGEMM)
//   ivf     k-means coarse quantizer, inverted lists, the NPROBE nearest lists scanned exactly
//           (a block of queries list by list, each list against its queries in one GEMM)
//   ivf-pq  the same lists holding product-quantized residuals (M sub-vectors of 8 bits), scanned
//           by table look-up; the REFINE * K best re-ranked by exact distance
//   hnsw    a hierarchical navigable small-world graph (M links a node, 2M on level 0)
//
// Every build is deterministic for its seed and the same on any number of threads: training rows
// and initial centroids come from a seeded std::mt19937_64, HNSW node levels from Philox keyed by
// the seed, and all parallel work is split so that no result depends on which thread did it.
// An index is a folder of matrix files (retro/matrix_file.hpp); the embeddings themselves stay in
// their own file, which every index reads (flat and hnsw search them, ivf copies them into its
// lists' order when loaded, ivf-pq re-ranks with them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "retro/vectors.hpp"

namespace meg {

class VectorIndex {
 public:
  virtual ~VectorIndex() = default;
  // The K nearest base vectors to each row of QUERIES, nearest first (equal distances by lower id),
  // into IDS and DISTS [queries.n, K]: -1 and +inf past the last one found; DISTS may be null.
  // EXCLUDE: null, or the left-out ids of each query. Parallel over the queries.
  virtual void search(const VectorSet& queries, size_t k, const IdRanges* exclude, int64_t* ids,
                      float* dists) const = 0;
};

enum class IndexType { flat, ivf, ivf_pq, hnsw };
IndexType parse_index_type(const std::string& name);  // InputError listing the names
const char* index_type_name(IndexType type);

// Zero means "choose from the data" (resolve_index_options()).
struct IndexOptions {
  IndexType type = IndexType::ivf_pq;
  uint64_t seed = 1234;
  size_t train_size = 0;   // ivf, ivf-pq: rows k-means trains on (default 64 per list, at least 16384)
  int kmeans_iters = 10;   // ivf, ivf-pq: Lloyd iterations (also of each PQ codebook)
  size_t nlist = 0;        // ivf, ivf-pq: lists (default 2 sqrt(N), at most N / 16)
  size_t nprobe = 0;       // ivf, ivf-pq: lists scanned per query (default nlist / 16, at least 8)
  size_t pq_m = 0;         // ivf-pq: sub-vectors (default DIM / 8, or DIM / 4, DIM / 2, DIM)
  size_t refine = 8;       // ivf-pq: candidates re-ranked exactly, per neighbour asked for (0: none)
  size_t hnsw_m = 32;      // hnsw: links per node above level 0
  size_t ef_construction = 40;  // hnsw: candidates kept while linking a new node
  size_t ef_search = 64;        // hnsw: candidates kept while searching (at least K)
};

// OPTIONS with every zero filled in for N vectors of DIM floats; InputError on a value that
// cannot work (more lists than vectors, sub-vectors that do not divide DIM, ...).
IndexOptions resolve_index_options(IndexOptions options, size_t n, size_t dim);

// The options the built files depend on, and those a search depends on, as given (zeros kept:
// the data they resolve against is fingerprinted upstream); the index and query stages
// fingerprint them. Only those of OPTIONS.type appear.
nlohmann::ordered_json index_build_settings(const IndexOptions& options);
nlohmann::ordered_json index_search_settings(const IndexOptions& options);

// Builds the index of OPTIONS.type (resolved) over BASE and writes its files into DIR, stamped
// with FINGERPRINT. Returns the names of the files written.
std::vector<std::string> build_index(const VectorSet& base, const IndexOptions& options, const std::string& dir,
                                     uint64_t fingerprint);

// The index build_index() wrote into DIR, over the same BASE (which must outlive it), with
// OPTIONS' search settings. InputError on missing, corrupt or mismatched files. DEVICE ("cpu" or
// "cuda") is where flat searches; the approximate indexes search on the CPU.
std::unique_ptr<VectorIndex> load_index(const VectorSet& base, const IndexOptions& options, const std::string& dir,
                                        const std::string& device = "cpu");

}  // namespace meg
