// The hnsw index: a hierarchical navigable small-world graph (Malkov and Yashunin, 2018), as
// FAISS's IndexHNSWFlat and hnswlib build it. Every node has a random top level (geometric, ratio
// 1/M); on each level up to its own it links to up to M neighbours (2M on level 0), chosen among
// the EF_CONSTRUCTION nearest found by a search of the graph with the diversity heuristic (a
// candidate is kept only when it is nearer to the new node than to every neighbour kept before
// it). A query descends greedily from the top entry point and searches level 0 with EF_SEARCH
// candidates; left-out ids are walked through but never returned.
//
// Building is parallel and still deterministic: nodes are inserted in waves (up to 1/32 of the
// graph so far, at most 4096), every node of a wave searches the graph as the wave found it, then
// each node's links are written, then the back-links are added target by target (a full list
// pruned by the same heuristic); nothing depends on which thread did what.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "retro/index.hpp"

namespace meg {

struct HnswGraph {
  size_t m = 0;                   // links per node above level 0; 2m on level 0
  std::vector<uint8_t> levels;    // [n]: each node's top level
  std::vector<int32_t> links0;    // [n, 2m]: level-0 links, -1 after the last
  std::vector<int32_t> upper;     // [sum of levels, m]: links on levels 1 .. levels[i], node after node
  std::vector<uint64_t> upper_at; // [n]: node i's first row in upper (from levels)
  int32_t entry = 0;              // the lowest-numbered node of the top level
  int top = 0;                    // the top level

  size_t size() const { return levels.size(); }
  size_t width(int level) const { return level == 0 ? 2 * m : m; }
  const int32_t* links(size_t node, int level) const {
    return level == 0 ? links0.data() + node * 2 * m : upper.data() + (upper_at[node] + size_t(level) - 1) * m;
  }
  int32_t* links(size_t node, int level) { return const_cast<int32_t*>(std::as_const(*this).links(node, level)); }
  // Fills upper_at, entry and top from levels.
  void index_levels();
};

HnswGraph build_hnsw(const VectorSet& base, size_t m, size_t ef_construction, uint64_t seed);

// levels.mat (u8 [n, 1]), links0.mat (i32 [n, 2M]), links.mat (i32 [sum of levels, M]).
std::vector<std::string> save_hnsw(const HnswGraph& graph, const std::string& dir, uint64_t fingerprint);
HnswGraph load_hnsw(const std::string& dir, size_t n);

class HnswIndex final : public VectorIndex {
 public:
  HnswIndex(const VectorSet& base, HnswGraph graph, size_t ef_search)
      : base_(base), graph_(std::move(graph)), ef_search_(ef_search) {}
  void search(const VectorSet& queries, size_t k, const IdRanges* exclude, int64_t* ids, float* dists) const override;

 private:
  VectorSet base_;
  HnswGraph graph_;
  size_t ef_search_;
};

}  // namespace meg
