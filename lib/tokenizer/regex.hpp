// Regular expressions as Hugging Face tokenizers evaluates the pre-tokenizer patterns of
// tokenizer.json ({"type": "Split", "pattern": {"Regex": "..."}}): Oniguruma's syntax and
// semantics (leftmost match, alternatives in order, greedy, lazy and possessive repetition as in
// Perl) over the code points of UTF-8 text, and the successive matches exactly as the onig crate's
// find_iter() yields them.
//
// Supported: literals and escapes (\t \n \r \f \v \a \e \0 \xHH below 80, \x{H...}, \uHHHH,
// escaped punctuation), '.', classes [...] (ranges, negation, escapes and properties inside),
// \s \S \d \D \w \W \h \H with Oniguruma's Unicode meanings (\s: White_Space, \d: Nd,
// \w: Alphabetic|M|Nd|Pc, its Word property), \p{..} \P{..} \p{^..} of general categories and
// their groups (L, Lu, LC, N ...), groups (...) (?:...) (?<name>...), (?i) (?i:...) (?-i:...),
// atomic groups (?>...), lookahead (?=...) (?!...), the quantifiers ? * + {n} {n,} {n,m} {,m},
// lazy (??, *?, +?, {n,m}?) and possessive (?+, *+, ++) ones, anchors ^ $ \A \z \Z \b \B.
// Anything else (lookbehind, backreferences, scripts such as \p{Han}, nested classes ...) is
// refused when the pattern is compiled, with an InputError naming the construct and its offset,
// never approximated.
//
// Matching is a backtracking machine (regex_program.hpp), with a budget: a text may take at most
// kStepsPerByte steps a byte (plus a constant) over all its matches, which the known pre-tokenizer
// patterns stay far below (a few steps a byte); a pattern that backtracks catastrophically on a
// text stops with an InputError instead of hanging, as Oniguruma's retry limit does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>

namespace meg {

namespace regex {
struct Program;
}

class Regex {
 public:
  static constexpr uint64_t kStepsPerByte = 1000, kMinSteps = 1000000;

  explicit Regex(std::string_view pattern);  // UTF-8; InputError if not supported
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Calls ON_MATCH(begin, end), byte offsets into TEXT (UTF-8), for each successive match, as
  // onig's find_iter(): each search starts where the last match ended (the text before still
  // counts for ^ and \b); after an empty match it starts one code point later, and an empty match
  // right after a non-empty one is skipped. Thread-safe: the state of a search is the thread's.
  template <typename F>
  void for_each_match(std::string_view text, F&& on_match) const {
    each_match(text, [](void* f, size_t begin, size_t end) { (*static_cast<std::remove_reference_t<F>*>(f))(begin, end); },
               &on_match);
  }

 private:
  void each_match(std::string_view text, void (*on_match)(void*, size_t, size_t), void* context) const;

  std::unique_ptr<const regex::Program> program_;
};

}  // namespace meg
