// The backtracking machine that runs a regex program (regex_program.hpp) at one position.
//
// Backtracking entries live on one stack of the calling thread: a branch not taken (kSplit), a
// run that can give back a code point (greedy kRepeat) or take one more (lazy kRepeat), and the
// old value of a loop register to put back. An atomic group or lookahead runs its sub-program
// to its first success on the same stack, then drops what that left there, which is what makes
// it atomic. Every entry pushed or popped and every code point a run scans costs a step of the
// budget (regex.hpp).
#include "tokenizer/regex.hpp"

#include <vector>

#include "core/error.hpp"
#include "tokenizer/regex_program.hpp"

namespace meg {

using regex::Assertion;
using regex::CodePointSet;
using regex::Greed;
using regex::Inst;
using regex::Op;

namespace {

struct Entry {
  enum Kind : uint32_t { kBranch, kGiveBack, kTakeMore, kRestore } kind;
  uint32_t pc_or_register;  // kBranch: where to go on; kGiveBack, kTakeMore: the kRepeat; kRestore: the register
  size_t pos;               // kBranch: the position; kGiveBack, kTakeMore: the end of the run; kRestore: the value
  size_t aux;               // kGiveBack: the shortest end the run may give back to; kTakeMore: its count
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
        sets_(program.sets.data()),
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
  void push(Entry e) {
    spend(1);
    stack_.push_back(e);
  }

  bool in_set(uint32_t set, size_t pos, size_t* len) const { return pos < n_ && sets_[set].contains(decode(pos, len)); }

  // Runs forward from PC at POS until kMatch (true) or a failure (false).
  bool step(int32_t& pc, size_t& pos) {
    for (;;) {
      const Inst& in = code_[pc];
      size_t len;
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
          bool x = true, y = true;
          if (in.guard_x >= 0 || in.guard_y >= 0) {
            const bool any = pos < n_;
            const uint32_t cp = any ? decode(pos, &len) : 0;
            x = in.guard_x < 0 || (any && sets_[in.guard_x].contains(cp));
            y = in.guard_y < 0 || (any && sets_[in.guard_y].contains(cp));
          }
          if (x) {
            if (y) push({Entry::kBranch, uint32_t(in.y), pos, 0});
            pc = in.x;
          } else if (y) {
            pc = in.y;
          } else {
            return false;
          }
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

  // kRepeat at PC from POS: the run it takes first, with the entry that changes it later.
  bool repeat(const Inst& in, int32_t pc, size_t& pos) {
    const bool lazy = in.greed == Greed::kLazy;
    const uint32_t limit = lazy ? in.min : in.max;
    size_t end = pos, shortest = pos, len;
    uint32_t count = 0;
    while (count < limit && in_set(in.arg, end, &len)) {
      end += len;
      if (++count == in.min) shortest = end;
    }
    spend(count);
    if (count < in.min) return false;
    if (lazy) {
      if (count < in.max) push({Entry::kTakeMore, uint32_t(pc), end, count});
    } else if (in.greed == Greed::kGreedy && count > in.min) {
      push({Entry::kGiveBack, uint32_t(pc), end, shortest});
    }
    pos = end;
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
  const CodePointSet* sets_;
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

bool Regex::find(std::string_view text, size_t from, size_t* begin, size_t* end, uint64_t& steps_left) const {
  thread_local Scratch scratch;
  Matcher m(*program_, text, scratch, steps_left);
  const int32_t guard = program_->start_guard;
  for (size_t pos = from;;) {
    size_t len = 1;
    const bool more = pos < text.size();
    const uint32_t cp = more ? m.decode(pos, &len) : 0;
    if (guard < 0 || (more && program_->sets[guard].contains(cp))) {
      const int64_t match_end = m.run(0, pos);
      if (match_end >= 0) {
        *begin = pos, *end = size_t(match_end);
        return true;
      }
    }
    if (!more) return false;
    m.spend(1);
    pos += len;
  }
}

}  // namespace meg
