// SentencePiece's BPE segmentation, done natively for the common case: a word of printable ASCII
// (0x21..0x7E), which the standard normalizers leave as it is, so the library would segment
// "\u2581" + word. Answers in a fraction of the library's per-call cost, with the same ids.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "tokenizer/sentencepiece_model.hpp"

namespace meg {

class SentencePieceBpe {
 public:
  using Piece = SentencePieceModel::Piece;

  // The merges of a BPE model's PIECES (indexed by id; checked by read_sentencepiece_model, so every
  // score is finite), or null where the vocabulary holds what this path leaves to the library:
  // user-defined pieces, which are matched before BPE, a missing "\u2581", or a reserved piece that
  // shares its text with a mergeable one.
  static std::unique_ptr<SentencePieceBpe> build(std::span<const Piece> pieces);

  // Appends the ids the library gives "\u2581" + WORD; false, appending nothing, where the word
  // needs what only the library does: characters outside printable ASCII or without a piece of
  // their own (unknown or byte fallback), a final piece of type UNUSED (split back by the library),
  // or a word too long for the quadratic merge loop to stay ahead of the library.
  bool encode(std::string_view word, std::vector<int32_t>& out) const;

 private:
  // What an adjacent pair of pieces makes when merged: a piece of the vocabulary, and its score.
  // No member initializers: encode() keeps an uninitialized array of them on the stack.
  struct Merge {
    int32_t merged;  // -1: their texts together are no mergeable piece
    float score;  // -inf where merged is -1
  };
  struct Slot {
    uint64_t key;  // (left id, right id)
    Merge merge;
  };
  Merge find(int32_t left, int32_t right) const;

  // Characters by index: 0 for "\u2581", c - 0x20 for printable ASCII c.
  static constexpr int kChars = 0x7f - 0x20;
  int32_t char_ids_[kChars];  // their single-character NORMAL pieces; -1 where none
  Merge char_pairs_[kChars * kChars];  // the pairs of characters, looked up without hashing
  std::vector<bool> unused_;  // by id
  std::vector<Slot> slots_;  // (left id, right id) -> merge, in open addressing, half empty
  int shift_ = 64;
};

}  // namespace meg
