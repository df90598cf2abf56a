// A set of code points, as one regex class ([^\s\p{L}\p{N}], \p{Lu}, ., a literal under (?i))
// needs it: Latin-1 as a bitmap, and above it a set of general categories plus sorted ranges,
// complemented as a whole for a negated class. Matching looks a code point's category up once
// (unicode_tables.hpp) and tests one bit, so a class of any size costs the same.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "tokenizer/unicode_tables.hpp"

namespace meg::regex {

class CodePointSet {
 public:
  CodePointSet() = default;

  static CodePointSet of_categories(unicode::CategoryMask categories);
  static CodePointSet white_space();
  static CodePointSet word();             // \w: Alphabetic, M, Nd, Pc (Oniguruma's Word)
  static CodePointSet any_but_newline();  // '.'

  void add(uint32_t cp) { add_range(cp, cp); }
  void add_range(uint32_t first, uint32_t last);
  // The union with OTHER. Exact when neither is negated; otherwise a superset (what the first
  // code points of a pattern's alternatives need, never what a class needs).
  void add(const CodePointSet& other);
  // The complement. A set of categories and Latin-1 code points stays one (its complement is
  // another), so classes like [^\s\p{L}] and items like \P{L} inside a class stay exact.
  void negate();
  // Whether every code point is in it.
  bool holds_everything() const;
  // Whether no code point is in both; false when that is not simple to know.
  bool disjoint(const CodePointSet& other) const;
  // Adds every code point that simple case folding makes equal to a member (for (?i)).
  void close_over_case();

  bool contains(uint32_t cp) const {
    if (cp < 256) return latin1_[cp >> 6] >> (cp & 63) & 1;
    bool in = categories_ >> static_cast<int>(unicode::general_category(cp)) & 1;
    if (!in && !ranges_.empty()) in = in_ranges(cp);
    return in != negated_;
  }

  // Whether membership above Latin-1 is a matter of general category alone; which categories.
  bool by_category_alone() const { return ranges_.empty() && !negated_; }
  unicode::CategoryMask categories() const { return categories_; }

  // The code points that simple case folding makes equal to CP, CP among them, in order.
  static std::vector<uint32_t> case_variants(uint32_t cp);

 private:
  bool in_ranges(uint32_t cp) const;

  uint64_t latin1_[4] = {};
  unicode::CategoryMask categories_ = 0;            // above U+00FF
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;  // above U+00FF: sorted, disjoint, not adjacent
  bool negated_ = false;                            // above U+00FF
};

}  // namespace meg::regex
