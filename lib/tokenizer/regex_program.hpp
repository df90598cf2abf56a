// The compiled form of a regex: a program for a backtracking machine over code points
// (regex.cpp runs it), as regex_compile.cpp makes it from the syntax tree.
//
// Alternatives are tried in order and the first that reaches kMatch wins (leftmost-first, as in
// Oniguruma and Perl). Two things keep the machine fast on pre-tokenizer patterns:
//   - a repetition of one class (\p{L}+, [^\s\p{L}\p{N}]*, \s{1,3}) is one instruction, kRepeat,
//     that scans the run and leaves one backtracking entry which gives the run back a code point
//     at a time; none at all when nothing after it can fail;
//   - each branch of a kSplit may carry a guard, the set of code points its matches begin with,
//     so that an alternative that cannot match here is skipped without a backtracking entry.
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

struct Program {
  std::vector<Inst> code;
  std::vector<CodePointSet> sets;
  uint32_t registers = 0;
  int32_t start_guard = -1;  // the set every match begins with, -1 if not known or empty matches
};

// InputError when the program would pass its size limit (repetitions expand their body).
Program compile(Syntax syntax);

}  // namespace meg::regex
