// The normalizers of a Hugging Face tokenizer.json ("normalizer"), as tokenizers applies them to
// the text between added tokens before pre-tokenization (tokenizers/src/normalizers):
//
//   NFC, NFD, NFKC, NFKD   Unicode normalization forms (unicode_normalization.hpp)
//   Lowercase              each character's full lowercase mapping
//   Strip                  leading and/or trailing White_Space (strip_left, strip_right)
//   StripAccents           drops nonspacing marks (Mn); usually after NFD
//   Replace                every match of a literal ({"String": s}) or a regex ({"Regex": r},
//                          regex.hpp) replaced by "content", leftmost first, without overlaps
//   Prepend                "prepend" before a non-empty text
//   BertNormalizer         BERT's: clean_text (drops NUL, U+FFFD and other controls, turns
//                          whitespace into spaces), handle_chinese_chars (spaces around CJK
//                          ideographs), strip_accents (NFD then drop Mn; by default when
//                          lowercasing), lowercase
//   Sequence               "normalizers" in order
//
// Any other type (Precompiled, the SentencePiece character map; Nmt; ByteLevel) is refused at load
// with one line naming it and where it is, never approximated.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace meg {

class HfNormalizer {
 public:
  virtual ~HfNormalizer() = default;
  // Normalizes TEXT (valid UTF-8) in place.
  virtual void apply(std::string& text) const = 0;

  // The normalizer J describes (null: none, a null pointer); WHERE names it in errors, e.g.
  // "tokenizer.json: normalizer".
  static std::unique_ptr<HfNormalizer> from_json(const nlohmann::json& j, const std::string& where);
};

}  // namespace meg
