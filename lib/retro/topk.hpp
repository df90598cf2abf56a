// The K nearest candidates seen so far: a bounded max-heap of (distance, id) pairs. Pairs compare
// by distance, then by id, so equal distances always resolve to the lower id and every search
// gives the same answer whatever order its candidates come in.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "retro/vectors.hpp"

namespace meg {

struct Neighbor {
  float dist;
  int64_t id;
  bool operator<(const Neighbor& o) const { return dist < o.dist || (dist == o.dist && id < o.id); }
  bool operator>(const Neighbor& o) const { return o < *this; }
};

class TopK {
 public:
  explicit TopK(size_t k) : k_(k) { heap_.reserve(k); }  // K >= 1

  size_t k() const { return k_; }
  size_t size() const { return heap_.size(); }
  bool full() const { return heap_.size() == k_; }
  // The distance a candidate must beat (by the pair order) to get in.
  float bound() const { return full() ? heap_.front().dist : std::numeric_limits<float>::infinity(); }

  void push(float dist, int64_t id) {
    const Neighbor n{dist, id};
    if (!full()) {
      heap_.push_back(n);
      std::push_heap(heap_.begin(), heap_.end());
    } else if (n < heap_.front()) {
      std::pop_heap(heap_.begin(), heap_.end());
      heap_.back() = n;
      std::push_heap(heap_.begin(), heap_.end());
    }
  }

  // Offers N candidates, candidate j being ID_OF(j) at distance DISTS[j], and passes over the ids
  // in SKIP.
  template <typename IdOf>
  void offer(const float* dists, size_t n, IdRanges skip, IdOf id_of) {
    float b = bound();
    for (size_t j = 0; j < n; ++j) {
      if (dists[j] > b) continue;
      const int64_t id = id_of(j);
      if (skip.contains(id)) continue;
      push(dists[j], id);
      b = bound();
    }
  }

  // Nearest first; empties the heap.
  std::vector<Neighbor> take_sorted() {
    std::sort_heap(heap_.begin(), heap_.end());
    std::vector<Neighbor> out;
    out.swap(heap_);
    return out;
  }

  // Nearest first into IDS and DISTS (k() each; -1 and +inf past the candidates); empties the heap.
  void write(int64_t* ids, float* dists) {
    std::sort_heap(heap_.begin(), heap_.end());
    for (size_t i = 0; i < k_; ++i) {
      ids[i] = i < heap_.size() ? heap_[i].id : -1;
      if (dists) dists[i] = i < heap_.size() ? heap_[i].dist : std::numeric_limits<float>::infinity();
    }
    heap_.clear();
  }

 private:
  size_t k_;
  std::vector<Neighbor> heap_;
};

}  // namespace meg
