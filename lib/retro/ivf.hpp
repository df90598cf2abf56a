// Inverted-file indexes: a k-means coarse quantizer whose lists file every vector under its
// nearest centroid; a query scans only its NPROBE nearest lists. The lists are shared by ivf
// (exact distances to the listed vectors) and ivf-pq (retro/ivf_pq.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "retro/index.hpp"
#include "retro/vectors.hpp"

namespace meg {

struct InvertedLists {
  size_t dim = 0;
  std::vector<float> centroids;  // [nlist, dim]
  std::vector<int64_t> offsets;  // [nlist + 1]: list c is ids[offsets[c] .. offsets[c + 1])
  std::vector<int64_t> ids;      // every vector once, list after list, ascending within a list
  size_t nlist() const { return offsets.size() - 1; }
};

// NLIST centroids trained by k-means on TRAIN (ITERS rounds, SEED), and every row of BASE filed
// under its nearest. ASSIGN, when given, receives the list of each base row.
InvertedLists build_inverted_lists(const VectorSet& base, const VectorSet& train, size_t nlist, int iters,
                                   uint64_t seed, std::vector<int64_t>* assign = nullptr);

// centroids.mat (f32 [nlist, dim]), lists.mat (i64 [nlist + 1, 1]) and ids.mat (i64 [n, 1]) in
// DIR; the reader checks them against each other and against N vectors of DIM.
std::vector<std::string> save_inverted_lists(const InvertedLists& lists, const std::string& dir, uint64_t fingerprint);
InvertedLists load_inverted_lists(const std::string& dir, size_t n, size_t dim);

// The NPROBE nearest lists of every query, [queries.n, nprobe], nearest first, with their squared
// distances (fp32: a list's rank matters, not its last bits).
struct Probes {
  std::vector<int64_t> lists;
  std::vector<float> dists;
};
Probes probe_lists(const InvertedLists& lists, const VectorSet& queries, size_t nprobe);

// The ivf index scans a block of queries list by list: a list's residuals (its vectors minus its
// centroid, kept contiguous) against the residuals of the queries that probe it, in one GEMM. A
// list is thus read once per block rather than once per query, and the expansion |q - x|^2 =
// |q - c|^2 + |x - c|^2 - 2 (q - c).(x - c) stays at the small scale of the residuals, where fp32
// does not cancel.
class IvfIndex final : public VectorIndex {
 public:
  IvfIndex(const VectorSet& base, InvertedLists lists, size_t nprobe);
  void search(const VectorSet& queries, size_t k, const IdRanges* exclude, int64_t* ids, float* dists) const override;

 private:
  InvertedLists lists_;
  size_t nprobe_;
  std::vector<float> residuals_;       // [n, dim] in the lists' order: row p is vector ids[p] minus its centroid
  std::vector<float> residual_norms_;  // [n]
};

}  // namespace meg
