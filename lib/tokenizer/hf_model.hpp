// The model of a Hugging Face tokenizer.json ("model"): a pre-tokenized piece to ids, as
// tokenizers/src/models does.
//
//   BPE        "vocab" (token -> id) and "merges" ("a b" strings or ["a", "b"] pairs, by rank):
//              the piece's characters (a "continuing_subword_prefix" on all but the first, an
//              "end_of_word_suffix" on the last) merged by bpe_merges.hpp; a character missing
//              from the vocabulary becomes its bytes' <0xNN> tokens ("byte_fallback"), else
//              "unk_token" (runs of them one token with "fuse_unk"), else nothing.
//              "ignore_merges": a piece that is a token is that token. "dropout" must be null or
//              0 (encoding is deterministic).
//   WordPiece  greedy longest-match-first over "vocab", later subwords with
//              "continuing_subword_prefix" (##); a piece of more than
//              "max_input_chars_per_word" characters, or one that does not split, is "unk_token"
//   WordLevel  the piece's token, else "unk_token"
// Unigram is refused at load with one line (meg's SentencePiece reader takes unigram models in
// their .model form).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/token_index.hpp"

namespace meg {

class HfModel {
 public:
  virtual ~HfModel() = default;

  // Appends the ids of PIECE (text in the vocabulary's alphabet, or with byte_input() its bytes).
  virtual void tokenize(std::string_view piece, std::vector<int32_t>& out) const = 0;

  // Pieces are to be the pre-tokenizer's bytes before the byte-level alphabet's mapping (when
  // the pre-tokenizer ends with ByteLevel): each byte stands for its character. Returns false,
  // changing nothing, when the model cannot take them so (not a BPE, or one with subword
  // affixes); InputError (WHERE) when the vocabulary lacks a byte's character.
  virtual bool byte_input(const std::string& where) { return false; }

  // The vocabulary: the token of each id ("" for an id with none), and the id of a token.
  const std::vector<std::string>& tokens() const { return tokens_; }
  std::optional<int32_t> id_of(std::string_view token) const;

  // The model J describes; WHERE names it in errors.
  static std::unique_ptr<HfModel> from_json(const nlohmann::json& j, const std::string& where);

 protected:
  // Reads J's "vocab" object into tokens_ and index_ (ids unique and non-negative).
  void read_vocab(const nlohmann::json& j, const std::string& where);
  // The id of token NAME for KEY (unk_token, say): InputError naming KEY when it is not a token.
  int32_t required_id(const std::string& name, const std::string& key, const std::string& where) const;

  std::vector<std::string> tokens_;
  TokenIndex index_;  // ids by token
};

}  // namespace meg
