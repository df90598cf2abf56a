// The decoders of a Hugging Face tokenizer.json ("decoder"): tokens back to text, as
// tokenizers/src/decoders does. Each step maps the list of token strings to a new list; the
// text is their concatenation.
//
//   ByteLevel     each character of the byte-level alphabet back to its byte (a token with
//                 another character stays as it is), all bytes then read as UTF-8 with U+FFFD
//                 for ill-formed sequences
//   Metaspace     the replacement character (▁) back to a space, dropped at the start of the
//                 first token unless prepend_scheme is never
//   Replace       a pattern's matches in each token replaced by "content"
//   ByteFallback  runs of <0xNN> tokens to the text of their bytes (one U+FFFD per byte when they
//                 are not UTF-8)
//   Fuse          all tokens one
//   Strip         up to "start" leading and "stop" trailing "content" characters off each token
//   WordPiece     subwords ("prefix") glued to the token before, others after a space; "cleanup"
//                 removes the space before punctuation and in English contractions
//   BPEDecoder    "suffix" (end of word) to a space, but in the last token
//   Sequence      "decoders" in order
// Without a decoder tokenizers joins the tokens with spaces. Other types (CTC) are refused at load.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace meg {

class HfDecoder {
 public:
  virtual ~HfDecoder() = default;
  virtual void apply(std::vector<std::string>& tokens) const = 0;

  // The decoder J describes (null: none, a null pointer); WHERE names it in errors.
  static std::unique_ptr<HfDecoder> from_json(const nlohmann::json& j, const std::string& where);
};

}  // namespace meg
