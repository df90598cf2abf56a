// The character predicates Hugging Face tokenizers applies (Rust's char methods, the
// unicode_categories crate and the regex crate's \w), over meg's Unicode tables.
#pragma once

#include <cstdint>

#include "tokenizer/unicode_tables.hpp"

namespace meg {

inline bool in_categories(uint32_t c, unicode::CategoryMask mask) {
  return (unicode::bit(unicode::general_category(c)) & mask) != 0;
}

// char::is_whitespace: the White_Space property.
inline bool is_white_space(uint32_t c) { return unicode::is_white_space(c); }
// is_mark_nonspacing: Mn (what StripAccents drops).
inline bool is_nonspacing_mark(uint32_t c) { return unicode::general_category(c) == unicode::GeneralCategory::Mn; }
// is_other: the C categories (controls, formats, surrogates, private use, unassigned).
inline bool is_other(uint32_t c) { return in_categories(c, unicode::kOtherCategoryMask); }
// char::is_numeric: Nd, Nl and No.
inline bool is_numeric(uint32_t c) { return in_categories(c, unicode::kNumberMask); }
// BERT's punctuation: ASCII punctuation, or the P categories.
inline bool is_bert_punctuation(uint32_t c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~') ||
         in_categories(c, unicode::kPunctuationMask);
}
// The regex crate's \w (UTS #18 word characters): Alphabetic, marks, decimal digits, connector
// punctuation and the two join controls. Alphabetic is the letters, Nl, and Other_Alphabetic,
// whose characters outside the marks are the enclosed letters below.
inline bool is_word_char(uint32_t c) {
  constexpr unicode::CategoryMask kWord = unicode::kLetterMask | unicode::kMarkMask |
                                          unicode::bit(unicode::GeneralCategory::Nl) |
                                          unicode::bit(unicode::GeneralCategory::Nd) |
                                          unicode::bit(unicode::GeneralCategory::Pc);
  return in_categories(c, kWord) || c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) ||
         (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189);
}

}  // namespace meg
