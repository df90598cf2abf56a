// The added tokens of a Hugging Face tokenizer.json ("added_tokens"): special tokens and other
// whole strings that are matched in the text before the model sees it, never split, as
// tokenizers' AddedVocabulary does.
//
// Tokens with "normalized": false are matched in the raw text; the others in the normalized text,
// in their normalized form. Matching is leftmost-longest over all tokens of a kind; then a match
// of a "single_word" token is dropped unless no word character touches it on either side, an
// "lstrip" token takes the whitespace before it and an "rstrip" token the whitespace after it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace meg {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

class AddedTokens {
 public:
  // The tokens of J's "added_tokens" array (WHERE names it in errors); NORMALIZE gives the
  // normalized form of those that are matched normalized, MODEL_ID the id a content has in the
  // model's vocabulary, which it keeps (as tokenizers does) over the token's "id".
  AddedTokens(const nlohmann::json& j, const std::string& where,
              const std::function<std::string(const std::string&)>& normalize,
              const std::function<std::optional<int32_t>(const std::string&)>& model_id);

  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // Cuts TEXT at the matches of the raw (NORMALIZED false) or the normalized (true) tokens:
  // ON_PART(part, id) for each part in order, ID the token's for a match and -1 for the text
  // between (which may be empty only when TEXT is).
  void split(std::string_view text, bool normalized, const std::function<void(std::string_view, int32_t)>& on_part) const;

 private:
  // A byte trie of one kind's contents: node 0 is the root.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> next;  // byte -> node, sorted
      int32_t token = -1;                              // index in tokens_ when a content ends here
    };
    std::vector<Node> nodes{1};
    bool first_byte[256] = {};
    void insert(std::string_view content, int32_t token);
    // The longest content that starts at TEXT[AT]: its length and token, or {0, -1}.
    std::pair<size_t, int32_t> longest(std::string_view text, size_t at) const;
  };

  std::vector<AddedToken> tokens_;
  Trie raw_, normalized_;
};

}  // namespace meg
