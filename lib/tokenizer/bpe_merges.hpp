// The merge step of byte-pair encoding, shared by the GPT-2 and Hugging Face BPE tokenizers: a
// word starts as a sequence of symbols (token ids: its bytes, or its characters) and adjacent
// pairs merge by the rules of a merge list, lowest rank first.
//
// The order is Hugging Face tokenizers' (models/bpe/word.rs): the pair of lowest (rank, position)
// merges next, and the pairs it forms with its neighbours join the queue. For merge lists learned
// by BPE training, where a merge always ranks after the merges that made its parts, this is the
// order of GPT-2's bpe() too, which merges every occurrence of the lowest-ranked pair in a pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace meg {

class BpeMerges {
 public:
  void reserve(size_t rules);
  // The rule of the next rank: LEFT and RIGHT side by side become MERGED. A pair listed again
  // takes its new rank and result, as the maps of GPT-2 and Hugging Face do.
  void add(int32_t left, int32_t right, int32_t merged);
  size_t size() const { return rules_.size(); }

  // Merges SYMBOLS in place until no adjacent pair has a rule. Safe from many threads at once.
  void apply(std::vector<int32_t>& symbols) const;

 private:
  struct Rule {
    int32_t left, right, merged;
  };
  // The rank of pair (A, B), -1 when it has no rule.
  int32_t rank(int32_t a, int32_t b) const;
  size_t slot(uint64_t key) const;  // the key's slot, or the empty one it would take

  // (left, right) -> rank as open addressing over 64-bit keys, at most half full: the lookup at
  // the heart of BPE stays one hash and a probe or two.
  static constexpr uint64_t kEmpty = ~0ULL;  // ids are below 2^31, so no pair has this key
  std::vector<uint64_t> keys_;
  std::vector<int32_t> ranks_;
  int shift_ = 64;
  size_t used_ = 0;
  std::vector<Rule> rules_;  // by rank
};

}  // namespace meg
