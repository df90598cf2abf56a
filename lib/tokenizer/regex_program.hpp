// The compiled form of a regex: a program for a backtracking machine over code points
// (regex.cpp runs it), as regex_compile.cpp makes it from the syntax tree.
//
// Alternatives are tried in order and the first that reaches kMatch wins (leftmost-first, as in
// Oniguruma and Perl). Two things keep the machine fast on pre-tokenizer patterns:
//   - a repetition of one class (\p{L}+, [^\s\p{L}\p{N}]*, \s{1,3}) is one instruction, kRepeat,
//     that scans the run and leaves one backtracking entry which gives the run back a code point
//     at a time; none at all when nothing after it can fail;
//   - an alternation is one instruction, kAlt, that looks the next code point up in a table of
//     the alternatives that can begin with it (by Latin-1 code point, or by general category), so
//     alternatives that cannot match here cost nothing, and one backtracking entry holds the rest;
//     a loop's kSplit likewise carries a guard, the set of code points an iteration begins with.
#pragma once

#include <cstdint>
#include <vector>

#include "tokenizer/regex_syntax.hpp"

namespace meg::regex {

enum class Op : uint8_t {
  kChar,       // the code point ARG
  kSet,        // a code point of sets[ARG]
  kRepeat,     // MIN to MAX code points of sets[ARG], by GREED
  kSplit,      // go to X; on failure, to Y; GUARD_X / GUARD_Y: the sets each must begin with (-1: any)
  kAlt,        // alternations[ARG]: try each alternative that can begin here, in order
  kJump,       // go to X
  kLoopMark,   // registers[ARG] = the position (the start of a loop's iteration)
  kLoopCheck,  // an iteration that matched nothing leaves the loop: go to X if registers[ARG] == position
  kAtomic,     // run the sub-program after this one to its kMatch, never backtrack into it; go on at X
  kLookahead,  // whether the sub-program after this one matches here (NEGATIVE: does not); go on at X
  kAssert,     // the Assertion ARG holds here
  kMatch,      // the end of the program or sub-program: it matched
};

struct Inst {
  Op op;
  Greed greed = Greed::kGreedy;
  bool negative = false;
  uint32_t arg = 0;
  int32_t x = 0, y = 0;
  int32_t guard_x = -1, guard_y = -1;
  uint32_t min = 0, max = 0;  // kRepeat; max UINT32_MAX for no bound
};

// The alternatives of a kAlt (at most 64) and, for the next code point, a bit mask of those that
// can begin with it.
struct Alternation {
  static constexpr size_t kMaxAlternatives = 64;

  std::vector<int32_t> targets;  // the code of each alternative, from the kAlt (copies share a table)
  std::vector<int32_t> guards;   // the set each one's matches begin with, -1 for any position
  uint64_t anywhere = 0;         // the alternatives without a guard (they can match nothing, or look first)
  uint64_t by_latin1[256] = {};
  uint64_t by_category[unicode::kGeneralCategories] = {};
  bool by_category_exact = true;  // whether by_category holds for every guard (no ranges above Latin-1)

  uint64_t candidates(uint32_t cp, const std::vector<CodePointSet>& sets) const {
    if (cp < 256) return anywhere | by_latin1[cp];
    if (by_category_exact) return anywhere | by_category[static_cast<int>(unicode::general_category(cp))];
    uint64_t m = anywhere;
    for (size_t i = 0; i < guards.size(); ++i)
      if (guards[i] >= 0 && sets[size_t(guards[i])].contains(cp)) m |= uint64_t{1} << i;
    return m;
  }
};

struct Program {
  std::vector<Inst> code;
  std::vector<Alternation> alternations;
  std::vector<CodePointSet> sets;
  uint32_t registers = 0;
  int32_t start_guard = -1;  // the set every match begins with, -1 if not known or empty matches
};

// InputError when the program would pass its size limit (repetitions expand their body).
Program compile(Syntax syntax);

}  // namespace meg::regex
