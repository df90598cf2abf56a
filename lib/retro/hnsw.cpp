#include "retro/hnsw.hpp"

#include <algorithm>
#include <cmath>
#include <queue>
#include <tuple>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/philox.hpp"
#include "core/progress.hpp"
#include "retro/matrix_file.hpp"
#include "retro/topk.hpp"

namespace meg {
namespace {

constexpr int kMaxLevel = 16;

// Node I's top level: floor(-ln(u) / ln(M)) for u uniform in (0, 1], from Philox keyed by SEED.
int random_level(uint64_t seed, uint64_t i, size_t m) {
  const PhiloxCounter c = philox4x32_10({uint32_t(i), uint32_t(i >> 32), 0, 0}, {uint32_t(seed), uint32_t(seed >> 32)});
  const double u = (double(c[0]) + 1.0) / 4294967296.0;
  return std::min(kMaxLevel, int(std::floor(-std::log(u) / std::log(double(std::max<size_t>(m, 2))))));
}

// Marks of the nodes a search has visited: a tag per node, the search's number when visited, so
// starting a search costs nothing. One per thread, reused across searches.
class Visited {
 public:
  void start(size_t n) {
    if (tags_.size() < n || ++epoch_ == 0) {
      tags_.assign(std::max(n, tags_.size()), 0);
      epoch_ = 1;
    }
  }
  bool insert(int32_t node) {  // true when NODE was not visited yet
    if (tags_[size_t(node)] == epoch_) return false;
    tags_[size_t(node)] = epoch_;
    return true;
  }

 private:
  std::vector<uint32_t> tags_;
  uint32_t epoch_ = 0;
};

thread_local Visited visited;

class Searcher {
 public:
  Searcher(const HnswGraph& graph, const VectorSet& base) : g_(graph), base_(base) {}

  float dist(const float* q, int32_t node) const { return l2_sqr(q, base_.row(size_t(node)), base_.dim); }

  // From EP, moves to the nearest neighbour on LEVEL while that gets nearer to Q.
  Neighbor greedy(const float* q, Neighbor ep, int level) const {
    for (bool moved = true; moved;) {
      moved = false;
      const int32_t* links = g_.links(size_t(ep.id), level);
      for (size_t i = 0; i < g_.width(level) && links[i] >= 0; ++i) {
        const Neighbor n{dist(q, links[i]), links[i]};
        if (n < ep) ep = n, moved = true;
      }
    }
    return ep;
  }

  // The EF nearest nodes to Q on LEVEL reachable from ENTRIES, nearest first; nodes in SKIP are
  // walked through but not returned.
  std::vector<Neighbor> search_level(const float* q, const std::vector<Neighbor>& entries, size_t ef, int level,
                                     IdRanges skip = {}) const {
    visited.start(g_.size());
    std::priority_queue<Neighbor, std::vector<Neighbor>, std::greater<Neighbor>> frontier;
    TopK best(ef);
    for (const Neighbor& e : entries) {
      visited.insert(int32_t(e.id));
      frontier.push(e);
      if (!skip.contains(e.id)) best.push(e.dist, e.id);
    }
    while (!frontier.empty()) {
      const Neighbor c = frontier.top();
      frontier.pop();
      if (best.full() && c.dist > best.bound()) break;
      const int32_t* links = g_.links(size_t(c.id), level);
      for (size_t i = 0; i < g_.width(level) && links[i] >= 0; ++i) {
        if (!visited.insert(links[i])) continue;
        const float d = dist(q, links[i]);
        if (best.full() && d > best.bound()) continue;
        frontier.push({d, links[i]});
        if (!skip.contains(links[i])) best.push(d, links[i]);
      }
    }
    return best.take_sorted();
  }

  // Up to M of CANDIDATES (nearest first) by the diversity heuristic of the header comment.
  std::vector<int32_t> select(const std::vector<Neighbor>& candidates, size_t m) const {
    std::vector<int32_t> kept;
    for (const Neighbor& c : candidates) {
      if (kept.size() == m) break;
      const float* x = base_.row(size_t(c.id));
      bool diverse = true;
      for (int32_t s : kept)
        if (dist(x, s) < c.dist) {
          diverse = false;
          break;
        }
      if (diverse) kept.push_back(int32_t(c.id));
    }
    return kept;
  }

 private:
  const HnswGraph& g_;
  const VectorSet& base_;
};

// A back-link to add: SOURCE joins TARGET's list on LEVEL.
struct BackLink {
  int level;
  int32_t target, source;
  auto key() const { return std::tuple(level, target, source); }
};

// The neighbours of a new node at Q on each level up to LEVEL (at most the graph's top), found by
// searching G from its entry point with EF candidates.
std::vector<std::vector<int32_t>> connect(const HnswGraph& g, const Searcher& s, const float* q, int level,
                                          size_t ef) {
  Neighbor ep{s.dist(q, g.entry), g.entry};
  for (int l = g.top; l > level; --l) ep = s.greedy(q, ep, l);
  std::vector<Neighbor> entries{ep};
  std::vector<std::vector<int32_t>> found(size_t(level) + 1);
  for (int l = level; l >= 0; --l) {
    entries = s.search_level(q, entries, ef, l);
    found[size_t(l)] = s.select(entries, g.m);
  }
  return found;
}

// Adds BACK to G's lists, one thread per target list: appended while the list has room, else the
// list and the newcomers pruned together by the heuristic.
void add_back_links(HnswGraph& g, const Searcher& s, const VectorSet& base, std::vector<BackLink>& back) {
  std::sort(back.begin(), back.end(), [](const BackLink& a, const BackLink& b) { return a.key() < b.key(); });
  std::vector<size_t> groups;
  for (size_t i = 0; i < back.size(); ++i)
    if (i == 0 || back[i].level != back[i - 1].level || back[i].target != back[i - 1].target) groups.push_back(i);
  groups.push_back(back.size());
  parallel_for(groups.size() - 1, 16, [&](size_t begin, size_t end) {
    for (size_t gi = begin; gi < end; ++gi) {
      const size_t from = groups[gi], to = groups[gi + 1];
      const int level = back[from].level;
      int32_t* links = g.links(size_t(back[from].target), level);
      const size_t width = g.width(level);
      size_t used = 0;
      while (used < width && links[used] >= 0) ++used;
      if (used + (to - from) <= width) {
        for (size_t i = from; i < to; ++i) links[used++] = back[i].source;
        continue;
      }
      const float* x = base.row(size_t(back[from].target));
      std::vector<Neighbor> candidates;
      for (size_t i = 0; i < used; ++i) candidates.push_back({s.dist(x, links[i]), links[i]});
      for (size_t i = from; i < to; ++i) candidates.push_back({s.dist(x, back[i].source), back[i].source});
      std::sort(candidates.begin(), candidates.end());
      const std::vector<int32_t> kept = s.select(candidates, width);
      std::fill_n(links, width, -1);
      std::copy(kept.begin(), kept.end(), links);
    }
  });
}

}  // namespace

void HnswGraph::index_levels() {
  upper_at.resize(levels.size());
  uint64_t rows = 0;
  top = 0;
  entry = 0;
  for (size_t i = 0; i < levels.size(); ++i) {
    upper_at[i] = rows;
    rows += levels[i];
    if (levels[i] > top) top = levels[i], entry = int32_t(i);
  }
}

HnswGraph build_hnsw(const VectorSet& base, size_t m, size_t ef_construction, uint64_t seed) {
  HnswGraph g;
  g.m = m;
  g.levels.resize(base.n);
  for (size_t i = 0; i < base.n; ++i) g.levels[i] = uint8_t(random_level(seed, i, m));
  g.index_levels();
  g.upper.assign((g.upper_at.empty() ? 0 : g.upper_at.back() + g.levels.back()) * m, -1);
  g.links0.assign(base.n * 2 * m, -1);
  // The graph grows from node 0; entry and top follow the nodes inserted so far.
  g.entry = 0;
  g.top = base.n > 0 ? g.levels[0] : 0;
  const Searcher s(g, base);
  Progress progress("index: hnsw", base.n, "vectors");

  std::vector<std::vector<std::vector<int32_t>>> found;  // per wave node, per level: its neighbours
  std::vector<BackLink> back;
  for (size_t first = 1; first < base.n;) {
    const size_t wave = std::min(base.n - first, std::clamp<size_t>(first / 32, 1, 4096));
    found.assign(wave, {});
    // 1. Every node of the wave searches the graph as it stands (nothing writes to it meanwhile).
    parallel_for(wave, 4, [&](size_t begin, size_t end) {
      for (size_t w = begin; w < end; ++w)
        found[w] = connect(g, s, base.row(first + w), std::min<int>(g.levels[first + w], g.top), ef_construction);
    });
    // 2. Their own links; 3. the back-links.
    back.clear();
    for (size_t w = 0; w < wave; ++w)
      for (size_t l = 0; l < found[w].size(); ++l) {
        std::copy(found[w][l].begin(), found[w][l].end(), g.links(first + w, int(l)));
        for (int32_t t : found[w][l]) back.push_back({int(l), t, int32_t(first + w)});
      }
    add_back_links(g, s, base, back);
    // 4. A node above the top becomes the entry point (the first such node, as in one by one).
    for (size_t p = first; p < first + wave; ++p)
      if (g.levels[p] > g.top) g.top = g.levels[p], g.entry = int32_t(p);
    first += wave;
    progress.set(first);
  }
  progress.finish();
  return g;
}

std::vector<std::string> save_hnsw(const HnswGraph& g, const std::string& dir, uint64_t fingerprint) {
  write_matrix<uint8_t>(dir + "/levels.mat", g.size(), 1, g.levels, fingerprint);
  write_matrix<int32_t>(dir + "/links0.mat", g.size(), 2 * g.m, g.links0, fingerprint);
  write_matrix<int32_t>(dir + "/links.mat", g.upper.size() / g.m, g.m, g.upper, fingerprint);
  return {"levels.mat", "links0.mat", "links.mat"};
}

HnswGraph load_hnsw(const std::string& dir, size_t n) {
  const MatrixFile levels(dir + "/levels.mat", MatrixDtype::kU8);
  const MatrixFile links0(dir + "/links0.mat", MatrixDtype::kI32);
  const MatrixFile upper(dir + "/links.mat", MatrixDtype::kI32);
  check_matrix_shape(levels, n, 1, "the level list");
  if (links0.cols() == 0 || links0.cols() % 2 != 0) input_error("{}: {} links a node is not 2M", links0.path(), links0.cols());
  check_matrix_shape(links0, n, 0, "the level-0 links");
  HnswGraph g;
  g.m = links0.cols() / 2;
  g.levels.assign(levels.data<uint8_t>().begin(), levels.data<uint8_t>().end());
  for (uint8_t l : g.levels)
    if (l > kMaxLevel) input_error("{}: level {} is above the highest, {}", levels.path(), l, kMaxLevel);
  g.index_levels();
  check_matrix_shape(upper, n == 0 ? 0 : g.upper_at.back() + g.levels.back(), g.m, "the upper-level links");
  g.links0.assign(links0.data<int32_t>().begin(), links0.data<int32_t>().end());
  g.upper.assign(upper.data<int32_t>().begin(), upper.data<int32_t>().end());
  for (const MatrixFile* f : {&links0, &upper})
    for (int32_t id : f->data<int32_t>())
      if (id < -1 || id >= int64_t(n)) input_error("{}: link to node {} of {}", f->path(), id, n);
  return g;
}

void HnswIndex::search(const VectorSet& queries, size_t k, const IdRanges* exclude, int64_t* ids, float* dists) const {
  const Searcher s(graph_, base_);
  const size_t ef = std::max(ef_search_, k);
  parallel_for(queries.n, 8, [&](size_t begin, size_t end) {
    for (size_t q = begin; q < end; ++q) {
      const float* x = queries.row(q);
      TopK top(k);
      if (graph_.size() > 0) {
        Neighbor ep{s.dist(x, graph_.entry), graph_.entry};
        for (int l = graph_.top; l > 0; --l) ep = s.greedy(x, ep, l);
        for (const Neighbor& n : s.search_level(x, {ep}, ef, 0, exclude ? exclude[q] : IdRanges{})) {
          if (top.full()) break;
          top.push(n.dist, n.id);
        }
      }
      top.write(ids + q * k, dists ? dists + q * k : nullptr);
    }
  });
}

}  // namespace meg
