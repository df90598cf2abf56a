// The syntax tree of a regex pattern, as regex_parse.cpp reads it (Oniguruma's Ruby syntax, the
// default of the onig crate that Hugging Face tokenizers compiles its patterns with) and
// regex_compile.cpp turns it into a program. Groups only group: nothing is captured, since a
// pre-tokenizer needs the extent of each match only.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/regex_set.hpp"

namespace meg::regex {

enum class Greed : uint8_t { kGreedy, kLazy, kPossessive };

enum class Assertion : uint8_t {
  kLineStart,             // ^ (at the start of the text or after \n: Ruby's ^ is always multi-line)
  kLineEnd,               // $ (at the end of the text or before \n)
  kTextStart,             // \A
  kTextEnd,               // \z
  kTextEndBeforeNewline,  // \Z (at the end, or before a \n that ends the text)
  kWordBoundary,          // \b (word: \w)
  kNotWordBoundary,       // \B
};

struct Node {
  enum class Kind : uint8_t { kEmpty, kChar, kSet, kConcat, kAlternation, kRepeat, kAtomic, kLookahead, kAssert };
  static constexpr int kUnbounded = -1;

  Kind kind = Kind::kEmpty;
  uint32_t value = 0;  // kChar: the code point; kSet: its index in Syntax::sets; kAssert: the Assertion
  int min = 0, max = 0;  // kRepeat: the counts, max kUnbounded for none
  Greed greed = Greed::kGreedy;  // kRepeat
  bool negative = false;         // kLookahead: (?!...)
  std::vector<Node> children;    // kConcat, kAlternation: the parts; kRepeat, kAtomic, kLookahead: one
};

struct Syntax {
  Node root;
  std::vector<CodePointSet> sets;
};

// Parses PATTERN (UTF-8). InputError naming the construct and its byte offset for a syntax error
// or anything this engine does not do exactly as Oniguruma does.
Syntax parse(std::string_view pattern);

}  // namespace meg::regex
