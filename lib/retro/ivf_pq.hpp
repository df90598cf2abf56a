// The ivf-pq index: inverted lists (retro/ivf.hpp) whose entries are product-quantized residuals
// (the vector minus its list's centroid; retro/pq.hpp), FAISS's IVF..,PQ.. as Megatron's RETRO
// builds it. A query scans its NPROBE nearest lists by table look-up, keeps the REFINE * K best
// codes and re-ranks them by their exact distance, as FAISS's refinement stage does, which lifts
// the recall of the top K from that of the codes to nearly that of the lists.
//
// The look-up tables come from FAISS's decomposition of the distance from query q to the code y
// of a residual in list c:  |q - c - y|^2 = |q - c|^2 + sum_j (|y_j|^2 + 2 c_j.y_j) - 2 sum_j q_j.y_j.
// The first term is the list's distance from the coarse search; the second, per list and
// sub-centroid, is computed once when the index is loaded; the third once per query. A list's
// table is then the sum of two tables, not M * 256 distances.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "retro/index.hpp"
#include "retro/ivf.hpp"
#include "retro/pq.hpp"

namespace meg {

struct IvfPq {
  InvertedLists lists;
  ProductQuantizer pq;
  std::vector<uint8_t> codes;  // [n, pq.m()], in the lists' order: row p is the code of lists.ids[p]
};

// Lists of NLIST trained on TRAIN, codebooks of M sub-vectors trained on the residuals of TRAIN's
// first 16384 rows (64 per sub-centroid: TRAIN is in random order), and every row of BASE encoded.
IvfPq build_ivf_pq(const VectorSet& base, const VectorSet& train, size_t nlist, size_t m, int iters, uint64_t seed);

// The lists' files and codebooks.mat (f32 [M * KSUB, DIM / M]), codes.mat (u8 [n, M]).
std::vector<std::string> save_ivf_pq(const IvfPq& index, const std::string& dir, uint64_t fingerprint);
IvfPq load_ivf_pq(const std::string& dir, size_t n, size_t dim);

class IvfPqIndex final : public VectorIndex {
 public:
  IvfPqIndex(const VectorSet& base, IvfPq index, size_t nprobe, size_t refine);
  void search(const VectorSet& queries, size_t k, const IdRanges* exclude, int64_t* ids, float* dists) const override;

 private:
  VectorSet base_;
  IvfPq index_;
  size_t nprobe_, refine_;
  std::vector<float> list_terms_;  // [nlist, M, KSUB]: |y_j|^2 + 2 c_j.y_j
};

}  // namespace meg
