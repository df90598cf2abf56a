// A SentencePiece BPE model written as a Hugging Face tokenizer.json that encodes every text as the
// model does, so that an exported model directory opens in transformers (which reads tokenizer.json,
// and converts a bare tokenizer.model by rules of its own that give other ids for meg's models).
//
// SentencePiece's BPE (bpe_model.cc) starts from the characters of the normalized text, user-defined
// pieces kept whole, and repeatedly joins the adjacent pair whose concatenation is a piece of the
// highest score, the leftmost first; characters left without a piece become bytes (byte fallback)
// or one unknown piece for each run. In tokenizers' terms:
//
//   model           BPE over the same vocabulary; a merge (left, right) for every way of cutting a
//                   piece in two pieces, ranked by the joined piece's score (higher first);
//                   byte_fallback as the model's; fuse_unk
//   normalizer      spaces become U+2581 and, with the dummy prefix, one goes before the text
//                   (Replace, Prepend); no pre-tokenizer, as SentencePiece segments whole texts
//   added_tokens    the user-defined pieces (not special: matched in the text, as SentencePiece does;
//                   with them a Metaspace pre-tokenizer does the normalizer's work, see caveat)
//   decoder         U+2581 back to spaces, byte pieces to bytes, the dummy prefix's space removed
//
// Control pieces (<s>, </s>) stay plain vocabulary, never matched in text, as in SentencePiece.
// Exact where tokenizers can say what the model does; otherwise sentencepiece_hf_json() names why
// not: a unigram model, a normalization table (NFKC and the like), folded or suffix whitespace,
// unused pieces (which SentencePiece splits again after merging), or two multi-character pieces of
// one score (a tie SentencePiece breaks by position, tokenizers by rank).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/sentencepiece_model.hpp"

namespace meg {

struct SentencePieceHfJson {
  nlohmann::ordered_json json;  // null where not exact
  std::string not_exact;        // why not, e.g. "a unigram model"; "" when json is set
  // Where the two still differ, "" where they never do: with user-defined pieces and the dummy
  // prefix, a text that begins with a space or with such a piece.
  std::string caveat;
};

SentencePieceHfJson sentencepiece_hf_json(const SentencePieceModel& model);

}  // namespace meg
