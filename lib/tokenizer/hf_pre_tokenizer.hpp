// The pre-tokenizers of a Hugging Face tokenizer.json ("pre_tokenizer"): they cut normalized
// text into the pieces the model encodes one by one, as tokenizers/src/pre_tokenizers does.
//
//   ByteLevel          add_prefix_space (a space before a piece that has none), use_regex
//                      (GPT-2's split: tokenizer/gpt2_bpe.hpp), then each byte as its character of
//                      the byte-level alphabet (byte_level.hpp)
//   Split              a pattern (hf_pattern.hpp) and what becomes of its matches ("behavior":
//                      Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous), or of
//                      the text between them ("invert")
//   Metaspace          spaces to "replacement" (▁), one prepended by "prepend_scheme" (always;
//                      first: the piece that begins the text; never), then split before each ▁
//   Whitespace         runs of word characters and runs of other non-space characters
//   WhitespaceSplit    split at White_Space, which goes
//   BertPreTokenizer   WhitespaceSplit, then each punctuation character a piece of its own
//   Punctuation        punctuation characters, by "behavior"
//   Digits             numeric characters, each alone ("individual_digits") or in runs
//   CharDelimiterSplit split at "delimiter", which goes
//   Sequence           "pretokenizers" in order
//
// Empty pieces are dropped, as tokenizers drops them. Other types (UnicodeScripts, FixedLength)
// are refused at load with one line naming them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace meg {

// Text cut into pieces: spans of one string, each knowing whether it begins the original text
// (which Metaspace's "first" scheme asks).
struct PreTokens {
  struct Piece {
    uint32_t begin = 0, size = 0;
    bool first = false;
  };
  std::string text;
  std::vector<Piece> pieces;

  std::string_view view(const Piece& p) const { return std::string_view(text).substr(p.begin, p.size); }
  void clear() { text.clear(), pieces.clear(); }
  // Appends BYTES as a piece of its own.
  void add(std::string_view bytes, bool first);
};

class HfPreTokenizer {
 public:
  virtual ~HfPreTokenizer() = default;
  // Cuts (and transforms) each piece of IN into OUT (cleared first).
  virtual void apply(const PreTokens& in, PreTokens& out) const = 0;

  // Whether this pre-tokenizer ends with ByteLevel's mapping of bytes to characters, and then
  // leave_bytes() to stop doing it: the model takes the bytes themselves, which it maps faster
  // (each byte to the id of its character's token).
  virtual bool ends_with_byte_level() const { return false; }
  virtual void leave_bytes() {}

  // The pre-tokenizer J describes (null: none, a null pointer); WHERE names it in errors.
  static std::unique_ptr<HfPreTokenizer> from_json(const nlohmann::json& j, const std::string& where);
};

}  // namespace meg
