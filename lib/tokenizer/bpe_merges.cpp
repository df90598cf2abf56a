#include "tokenizer/bpe_merges.hpp"

#include <algorithm>
#include <bit>
#include <functional>

namespace meg {

namespace {

uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }

}  // namespace

void BpeMerges::reserve(size_t rules) {
  size_t cap = 16;
  while (cap < 2 * rules) cap *= 2;
  if (cap <= keys_.size()) return;
  const std::vector<Rule> rules_before = std::move(rules_);
  keys_.assign(cap, kEmpty);
  ranks_.assign(cap, -1);
  shift_ = 64 - std::countr_zero(cap);
  used_ = 0;
  rules_.clear();
  rules_.reserve(rules);
  for (const Rule& r : rules_before) add(r.left, r.right, r.merged);
}

size_t BpeMerges::slot(uint64_t key) const {
  size_t i = (key * 0x9E3779B97F4A7C15ULL) >> shift_;
  while (keys_[i] != key && keys_[i] != kEmpty) i = (i + 1) & (keys_.size() - 1);
  return i;
}

void BpeMerges::add(int32_t left, int32_t right, int32_t merged) {
  if (2 * (used_ + 1) > keys_.size()) reserve(std::max<size_t>(2 * rules_.size(), 16));
  const uint64_t key = pair_key(left, right);
  const size_t i = slot(key);
  if (keys_[i] == kEmpty) keys_[i] = key, ++used_;
  ranks_[i] = static_cast<int32_t>(rules_.size());
  rules_.push_back({left, right, merged});
}

int32_t BpeMerges::rank(int32_t a, int32_t b) const {
  if (keys_.empty()) return -1;
  const size_t i = slot(pair_key(a, b));
  return keys_[i] == kEmpty ? -1 : ranks_[i];
}

// The symbols form a linked list over their first positions; the queue holds (rank, position) of
// the pairs that have a rule, as a min-heap. An entry goes stale when a neighbour merges first:
// the pair at its position is then no longer its rule's. (Hugging Face's word.rs asks whether the
// pair now there merges into the same token: a pair changes only by one of its tokens growing,
// which makes the merged token longer, so the two tests agree.)
void BpeMerges::apply(std::vector<int32_t>& symbols) const {
  struct Scratch {
    std::vector<int32_t> next, prev;
    std::vector<uint64_t> heap;
  };
  thread_local Scratch w;
  const auto n = static_cast<int32_t>(symbols.size());
  if (n < 2 || rules_.empty()) return;
  std::vector<int32_t>& token = symbols;
  w.next.resize(n), w.prev.resize(n);
  w.heap.clear();
  const auto push_pair = [&](int32_t pos) {
    const int32_t r = rank(token[pos], token[w.next[pos]]);
    if (r >= 0) {
      w.heap.push_back(uint64_t(r) << 32 | uint32_t(pos));
      std::push_heap(w.heap.begin(), w.heap.end(), std::greater<>());
    }
  };
  for (int32_t i = 0; i < n; ++i) w.next[i] = i + 1, w.prev[i] = i - 1;
  for (int32_t i = 0; i + 1 < n; ++i)  // the first pairs make the heap at once, in linear time
    if (const int32_t r = rank(token[i], token[i + 1]); r >= 0) w.heap.push_back(uint64_t(r) << 32 | uint32_t(i));
  std::make_heap(w.heap.begin(), w.heap.end(), std::greater<>());

  while (!w.heap.empty()) {
    const uint64_t top = w.heap.front();
    std::pop_heap(w.heap.begin(), w.heap.end(), std::greater<>());
    w.heap.pop_back();
    const Rule& rule = rules_[top >> 32];
    const auto pos = static_cast<int32_t>(uint32_t(top));
    const int32_t right = w.next[pos];
    if (right >= n || token[pos] != rule.left || token[right] != rule.right) continue;
    token[pos] = rule.merged;
    token[right] = -1;
    w.next[pos] = w.next[right];
    if (w.next[pos] < n) w.prev[w.next[pos]] = pos;
    if (w.prev[pos] >= 0) push_pair(w.prev[pos]);
    if (w.next[pos] < n) push_pair(pos);
  }
  int32_t out = 0;
  for (int32_t i = 0; i < n; i = w.next[i]) token[out++] = token[i];
  symbols.resize(out);
}

}  // namespace meg
