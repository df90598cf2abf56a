// Learning the merges of a byte-level BPE from word counts, as Hugging Face tokenizers' BpeTrainer
// does (models/bpe/trainer.rs): every word starts as its bytes; the most frequent adjacent pair
// of tokens, counted over all words with their counts, becomes a new token; repeat until the
// vocabulary is full or no pair is left.
//
// Each merge costs only the words that hold the pair: the count of every pair and the words it
// occurs in are kept, merging a pair in a word changes the counts of the pairs beside it, and a
// priority queue holds the pairs by count. Its entries are updated lazily: a popped entry whose
// count has changed since it was pushed goes back with the new count, so the top is always the
// true maximum. Memory is bounded by the distinct words and their pairs, never by the text.
//
// Ties between pairs of equal count go to the pair whose left token's bytes come first
// (lexicographically, as unsigned bytes), then its right token's: the merges depend only on the
// word counts, never on hash order or threads. (HF breaks ties by token ids, which depend on its
// insertion order; so the merges can differ from HF's trainer where counts tie, never in kind.)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace meg {

struct BpeTraining {
  // By id: the 256 bytes (id b is byte b), then each token the merges made, in order.
  std::vector<std::string> tokens;
  // By rank: the ids of the pair merged. Two merges may make the same token ("ab"+"c" and
  // "a"+"bc"), which then keeps the id of its first (as in HF's trainer).
  std::vector<std::pair<int32_t, int32_t>> merges;
};

// The merges learned from WORDS (each word's bytes and its count) until there are MAX_TOKENS
// tokens (the 256 bytes included) or no pair is left. A token for which ALLOWED is false is never
// made (a spelling taken by a special token); null allows every token.
BpeTraining train_bpe(const std::vector<std::pair<std::string, uint64_t>>& words, size_t max_tokens,
                      const std::function<bool(std::string_view)>& allowed = nullptr);

}  // namespace meg
