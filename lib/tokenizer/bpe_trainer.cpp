#include "tokenizer/bpe_trainer.hpp"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace meg {
namespace {

// A pair of adjacent tokens as one key: left id in the high half.
using Pair = uint64_t;
Pair pair_of(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }
int32_t left_of(Pair p) { return int32_t(p >> 32); }
int32_t right_of(Pair p) { return int32_t(uint32_t(p)); }

// One occurrence of a pair gained (+1) or lost (-1) in one word.
struct Change {
  Pair pair;
  int delta;
};

// Merges each (A, B) of WORD into C, left to right (in "a a a" the first two), and appends the
// changes to the pairs around each merge. The left neighbour is read after its own merge, so in
// "a b a b" the pairs lost and gained add up to what the final word holds.
void merge_word(std::vector<int32_t>& word, int32_t a, int32_t b, int32_t c, std::vector<Change>& changes) {
  size_t out = 0;
  for (size_t i = 0; i < word.size(); ++i) {
    if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
      if (out > 0) {
        changes.push_back({pair_of(word[out - 1], a), -1});
        changes.push_back({pair_of(word[out - 1], c), +1});
      }
      if (i + 2 < word.size()) {
        changes.push_back({pair_of(b, word[i + 2]), -1});
        changes.push_back({pair_of(c, word[i + 2]), +1});
      }
      word[out++] = c;
      ++i;
    } else {
      word[out++] = word[i];
    }
  }
  word.resize(out);
}

// A pair in the queue with its count when it was pushed.
struct Entry {
  int64_t count;
  Pair pair;
};

}  // namespace

BpeTraining train_bpe(const std::vector<std::pair<std::string, uint64_t>>& words, size_t max_tokens,
                      const std::function<bool(std::string_view)>& allowed) {
  BpeTraining t;
  std::unordered_map<std::string, int32_t> id_of;
  for (int b = 0; b < 256; ++b) {
    t.tokens.emplace_back(1, static_cast<char>(b));
    id_of.emplace(t.tokens.back(), b);
  }

  // Every word as its tokens; each pair's count, and the words it occurs in (a word may be listed
  // more than once or after it lost the pair: merging it again then finds nothing).
  std::vector<std::vector<int32_t>> symbols(words.size());
  std::unordered_map<Pair, int64_t> counts;
  std::unordered_map<Pair, std::vector<uint32_t>> where;
  const auto occurs_in = [&](Pair p, uint32_t w) {
    auto& list = where[p];
    if (list.empty() || list.back() != w) list.push_back(w);
  };
  for (uint32_t w = 0; w < words.size(); ++w) {
    const std::string& word = words[w].first;
    symbols[w].assign(reinterpret_cast<const uint8_t*>(word.data()),
                      reinterpret_cast<const uint8_t*>(word.data()) + word.size());
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const Pair p = pair_of(symbols[w][i], symbols[w][i + 1]);
      counts[p] += static_cast<int64_t>(words[w].second);
      occurs_in(p, w);
    }
  }

  // The top of the queue: the highest count, then the lowest left token's bytes, then right's.
  const auto ranks_below = [&](const Entry& x, const Entry& y) {
    if (x.count != y.count) return x.count < y.count;
    const int order = t.tokens[left_of(x.pair)].compare(t.tokens[left_of(y.pair)]);
    if (order != 0) return order > 0;
    return t.tokens[right_of(x.pair)] > t.tokens[right_of(y.pair)];
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(ranks_below)> queue(ranks_below);
  for (const auto& [pair, count] : counts) queue.push({count, pair});

  std::unordered_set<Pair> refused;  // pairs whose token ALLOWED turned down
  std::vector<Change> changes;
  std::vector<Pair> grown;
  while (t.tokens.size() < max_tokens && !queue.empty()) {
    const Entry top = queue.top();
    queue.pop();
    const auto it = counts.find(top.pair);
    const int64_t count = it == counts.end() ? 0 : it->second;
    if (count <= 0 || refused.contains(top.pair)) continue;
    if (count != top.count) {  // changed since it was pushed: back in its place
      queue.push({count, top.pair});
      continue;
    }
    const int32_t a = left_of(top.pair), b = right_of(top.pair);
    std::string merged = t.tokens[a] + t.tokens[b];
    if (allowed && !allowed(merged)) {
      refused.insert(top.pair);
      continue;
    }
    const auto [slot, fresh] = id_of.try_emplace(merged, static_cast<int32_t>(t.tokens.size()));
    if (fresh) t.tokens.push_back(std::move(merged));
    const int32_t c = slot->second;
    t.merges.emplace_back(a, b);

    const std::vector<uint32_t> holders = std::move(where[top.pair]);
    where.erase(top.pair);
    counts.erase(top.pair);
    grown.clear();
    for (const uint32_t w : holders) {
      changes.clear();
      merge_word(symbols[w], a, b, c, changes);
      for (const Change& change : changes) {
        if (change.pair == top.pair) continue;  // "a a a": the merged pair is gone already
        counts[change.pair] += change.delta * static_cast<int64_t>(words[w].second);
        if (change.delta > 0) {
          occurs_in(change.pair, w);
          grown.push_back(change.pair);
        }
      }
    }
    std::sort(grown.begin(), grown.end());
    grown.erase(std::unique(grown.begin(), grown.end()), grown.end());
    for (const Pair p : grown)
      if (counts[p] > 0) queue.push({counts[p], p});
  }
  return t;
}

}  // namespace meg
