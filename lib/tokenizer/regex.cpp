// The backtracking machine that runs a regex program (regex_program.hpp) at one position.
//
// Backtracking entries live on one stack of the calling thread: a branch not taken (kSplit), the
// alternatives of a kAlt not tried yet, a run that can give back a code point (greedy kRepeat) or
// take one more (lazy kRepeat), and the old value of a loop register to put back. An atomic group
// or lookahead runs its sub-program to its first success on the same stack, then drops what that
// left there, which is what makes it atomic. Every instruction run, entry popped and code point scanned by a kRepeat costs a step
// of the budget (regex.hpp).
#include "tokenizer/regex.hpp"

#include <bit>
#include <vector>

#include "core/error.hpp"
#include "core/utf8.hpp"
#include "tokenizer/regex_program.hpp"

namespace meg {

using regex::Assertion;
using regex::CodePointSet;
using regex::Greed;
using regex::Inst;
using regex::Op;

namespace {

struct Entry {
  enum Kind : uint32_t { kBranch, kNextAlternatives, kGiveBack, kTakeMore, kRestore } kind;
  uint32_t pc_or_register;  // kBranch: where to go on; others: the kAlt or kRepeat; kRestore: the register
  size_t pos;               // kBranch, kNextAlternatives: the position; kGiveBack, kTakeMore: the end
                            // of the run; kRestore: the value
  size_t aux;               // kNextAlternatives: the bit mask of those left; kGiveBack: the shortest end
                            // the run may give back to; kTakeMore: its count
};

struct Scratch {
  std::vector<Entry> stack;
  std::vector<size_t> registers;
};

const CodePointSet& word_set() {
  static const CodePointSet set = CodePointSet::word();
  return set;
}

class Matcher {
 public:
  Matcher(const regex::Program& program, std::string_view text, Scratch& scratch, uint64_t& steps_left)
      : code_(program.code.data()),
        alternations_(program.alternations.data()),
        sets_(program.sets),
        s_(reinterpret_cast<const uint8_t*>(text.data())),
        n_(text.size()),
        stack_(scratch.stack),
        registers_(scratch.registers),
        steps_left_(steps_left) {
    if (registers_.size() < program.registers) registers_.resize(program.registers);
  }

  uint32_t decode(size_t pos, size_t* len) const { return next_code_point(s_, n_, pos, len); }

  void spend(uint64_t steps) {
    if (steps > steps_left_)
      input_error("regex: the pattern backtracks too much on this text (over {} steps a byte); "
                  "it cannot be matched in reasonable time",
                  Regex::kStepsPerByte);
    steps_left_ -= steps;
  }

  // The end of the match of the (sub-)program at PC from POS, or -1 if none.
  int64_t run(int32_t pc, size_t pos) {
    const size_t base = stack_.size();
    for (;;) {
      if (step(pc, pos)) {
        stack_.resize(base);
        return int64_t(pos);
      }
      if (!backtrack(base, pc, pos)) return -1;
    }
  }

 private:
  void push(Entry e) { stack_.push_back(e); }

  bool in_set(uint32_t set, size_t pos, size_t* len) const { return pos < n_ && sets_[set].contains(decode(pos, len)); }

  // Runs forward from PC at POS until kMatch (true) or a failure (false).
  bool step(int32_t& pc, size_t& pos) {
    for (;;) {
      const Inst& in = code_[pc];
      size_t len;
      spend(1);
      switch (in.op) {
        case Op::kChar:
          if (pos >= n_ || decode(pos, &len) != in.arg) return false;
          pos += len, ++pc;
          break;
        case Op::kSet:
          if (!in_set(in.arg, pos, &len)) return false;
          pos += len, ++pc;
          break;
        case Op::kRepeat:
          if (!repeat(in, pc, pos)) return false;
          ++pc;
          break;
        case Op::kSplit: {
          // A branch whose guard fails here cannot match here, and needs no entry.
          const auto may_begin = [&](int32_t guard) { return guard < 0 || in_set(uint32_t(guard), pos, &len); };
          if (!may_begin(in.guard_x)) {
            pc = in.y;
            break;
          }
          if (may_begin(in.guard_y)) push({Entry::kBranch, uint32_t(in.y), pos, 0});
          pc = in.x;
          break;
        }
        case Op::kAlt: {
          const uint64_t candidates = pos < n_ ? alternations_[in.arg].candidates(decode(pos, &len), sets_)
                                               : alternations_[in.arg].anywhere;
          if (!candidates) return false;
          pc = next_alternative(pc, pos, candidates);
          break;
        }
        case Op::kJump: pc = in.x; break;
        case Op::kLoopMark:
          push({Entry::kRestore, in.arg, registers_[in.arg], 0});
          registers_[in.arg] = pos;
          ++pc;
          break;
        case Op::kLoopCheck: pc = registers_[in.arg] == pos ? in.x : pc + 1; break;
        case Op::kAtomic: {
          const int64_t end = run(pc + 1, pos);
          if (end < 0) return false;
          pos = size_t(end), pc = in.x;
          break;
        }
        case Op::kLookahead:
          if ((run(pc + 1, pos) >= 0) == in.negative) return false;
          pc = in.x;
          break;
        case Op::kAssert:
          if (!holds(Assertion(in.arg), pos)) return false;
          ++pc;
          break;
        case Op::kMatch: return true;
      }
    }
  }

  // The first of CANDIDATES of the kAlt at PC, with an entry for the others.
  int32_t next_alternative(int32_t pc, size_t pos, uint64_t candidates) {
    const int first = std::countr_zero(candidates);
    if (candidates &= candidates - 1) push({Entry::kNextAlternatives, uint32_t(pc), pos, candidates});
    return pc + alternations_[code_[pc].arg].targets[size_t(first)];
  }

  // kRepeat at PC from POS: the run it takes first, with the entry that changes it later.
  bool repeat(const Inst& in, int32_t pc, size_t& pos) {
    const CodePointSet& set = sets_[in.arg];
    // The run: MIN code points, then (unless lazy) as many more as MAX allows.
    size_t end = pos;
    if (scan(set, end, in.min) < in.min) return false;
    const size_t shortest = end;
    if (in.greed == Greed::kLazy) {
      if (in.min < in.max) push({Entry::kTakeMore, uint32_t(pc), end, in.min});
    } else {
      // A code point is a byte at least, so a bound above the bytes left is no bound.
      const uint32_t more = in.max - in.min;
      if (more >= n_ - end) {
        scan_all(set, end);
      } else {
        scan(set, end, more);
      }
      if (in.greed == Greed::kGreedy && end > shortest) push({Entry::kGiveBack, uint32_t(pc), end, shortest});
    }
    spend(end - pos);
    pos = end;
    return true;
  }

  // Moves END over up to LIMIT code points of SET; returns how many.
  uint32_t scan(const CodePointSet& set, size_t& end, uint32_t limit) const {
    size_t e = end;
    uint32_t count = 0;
    while (count < limit && step_over(set, s_, n_, e)) ++count;
    end = e;
    return count;
  }

  // Moves END over all the code points of SET there.
  void scan_all(const CodePointSet& set, size_t& end) const {
    // The text in locals, which the byte loads cannot alias, as they can the members.
    const uint8_t* const s = s_;
    const size_t n = n_;
    size_t e = end;
    while (step_over(set, s, n, e)) {
    }
    end = e;
  }

  // Moves END over the code point of S (N bytes) there if SET holds it.
  static bool step_over(const CodePointSet& set, const uint8_t* s, size_t n, size_t& end) {
    if (end >= n) return false;
    if (s[end] < 0x80) {  // most text: no decoding
      if (!set.contains(s[end])) return false;
      ++end;
      return true;
    }
    size_t len;
    if (!set.contains(next_code_point(s, n, end, &len))) return false;
    end += len;
    return true;
  }

  // Pops entries down to BASE until one gives a way on: its PC and POS. False if none does.
  bool backtrack(size_t base, int32_t& pc, size_t& pos) {
    while (stack_.size() > base) {
      const Entry e = stack_.back();
      stack_.pop_back();
      spend(1);
      switch (e.kind) {
        case Entry::kBranch:
          pc = int32_t(e.pc_or_register), pos = e.pos;
          return true;
        case Entry::kNextAlternatives:
          pc = next_alternative(int32_t(e.pc_or_register), e.pos, e.aux), pos = e.pos;
          return true;
        case Entry::kRestore: registers_[e.pc_or_register] = e.pos; break;
        case Entry::kGiveBack: {
          size_t end = e.pos;
          do --end;
          while (end > e.aux && (s_[end] & 0xC0) == 0x80);  // back to the start of the last code point
          if (end > e.aux) push({Entry::kGiveBack, e.pc_or_register, end, e.aux});
          pc = int32_t(e.pc_or_register) + 1, pos = end;
          return true;
        }
        case Entry::kTakeMore: {
          const Inst& in = code_[e.pc_or_register];
          size_t len;
          if (!in_set(in.arg, e.pos, &len)) break;
          if (e.aux + 1 < in.max) push({Entry::kTakeMore, e.pc_or_register, e.pos + len, e.aux + 1});
          pc = int32_t(e.pc_or_register) + 1, pos = e.pos + len;
          return true;
        }
      }
    }
    return false;
  }

  bool word_before(size_t pos) const {
    if (pos == 0) return false;
    size_t start = pos - 1, len;
    while (start > 0 && pos - start < 4 && (s_[start] & 0xC0) == 0x80) --start;
    return word_set().contains(decode(start, &len));
  }
  bool word_at(size_t pos) const {
    size_t len;
    return pos < n_ && word_set().contains(decode(pos, &len));
  }

  bool holds(Assertion a, size_t pos) const {
    switch (a) {
      case Assertion::kLineStart: return pos == 0 || s_[pos - 1] == '\n';
      case Assertion::kLineEnd: return pos == n_ || s_[pos] == '\n';
      case Assertion::kTextStart: return pos == 0;
      case Assertion::kTextEnd: return pos == n_;
      case Assertion::kTextEndBeforeNewline: return pos == n_ || (pos + 1 == n_ && s_[pos] == '\n');
      case Assertion::kWordBoundary: return word_before(pos) != word_at(pos);
      case Assertion::kNotWordBoundary: return word_before(pos) == word_at(pos);
    }
    return false;
  }

  const Inst* code_;
  const regex::Alternation* alternations_;
  const std::vector<CodePointSet>& sets_;
  const uint8_t* s_;
  size_t n_;
  std::vector<Entry>& stack_;
  std::vector<size_t>& registers_;
  uint64_t& steps_left_;
};

}  // namespace

Regex::Regex(std::string_view pattern)
    : program_(std::make_unique<const regex::Program>(regex::compile(regex::parse(pattern)))) {}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::each_match(std::string_view text, void (*on_match)(void*, size_t, size_t), void* context) const {
  thread_local Scratch scratch;
  uint64_t steps_left = kMinSteps + kStepsPerByte * text.size();
  Matcher m(*program_, text, scratch, steps_left);
  const regex::Program& p = *program_;
  size_t from = 0, len;
  bool skip_next_empty = false;
  while (from <= text.size()) {
    // The leftmost match at or after FROM.
    size_t begin = from;
    int64_t end = -1;
    for (;; m.spend(1), begin += len) {
      len = 1;
      const bool more = begin < text.size();
      const uint32_t cp = more ? m.decode(begin, &len) : 0;
      if (p.start_guard < 0 || (more && p.sets[size_t(p.start_guard)].contains(cp))) end = m.run(0, begin);
      if (end >= 0 || !more) break;
    }
    if (end < 0) return;
    from = size_t(end);
    if (begin == from) {
      size_t step = 1;
      if (from < text.size()) m.decode(from, &step);
      from += step;
      if (skip_next_empty) {
        skip_next_empty = false;
        continue;
      }
    } else {
      skip_next_empty = true;
    }
    on_match(context, begin, size_t(end));
  }
}

}  // namespace meg
