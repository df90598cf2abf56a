// From the syntax tree to the program of regex_program.hpp.
//
// A repetition of anything but one class expands: X{2,4} is X X (X (X)?)?, nested so that
// backtracking gives iterations back last first; X* loops, and when X can match nothing, a
// register notes where each iteration began so that an empty one leaves the loop (Oniguruma's
// empty check) instead of looping for ever. A possessive repetition is an atomic one.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <unordered_map>

#include "core/error.hpp"
#include "tokenizer/regex_program.hpp"

namespace meg::regex {

namespace {

constexpr size_t kMaxInstructions = 100000;

// What the matches of a node begin with: FIRST, the code points a non-empty match can begin
// with, unless KNOWN is false (an assertion comes first); NULLABLE: it can match nothing.
struct Start {
  bool known = true;
  bool nullable = true;
  CodePointSet first;
};

bool can_be_empty(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kChar:
    case Node::Kind::kSet: return false;
    case Node::Kind::kConcat:
      for (const Node& c : n.children)
        if (!can_be_empty(c)) return false;
      return true;
    case Node::Kind::kAlternation:
      for (const Node& c : n.children)
        if (can_be_empty(c)) return true;
      return false;
    case Node::Kind::kRepeat: return n.min == 0 || can_be_empty(n.children[0]);
    case Node::Kind::kAtomic: return can_be_empty(n.children[0]);
    default: return true;  // kEmpty, kLookahead, kAssert
  }
}

class Compiler {
 public:
  explicit Compiler(Syntax syntax) : root_(std::move(syntax.root)) { program_.sets = std::move(syntax.sets); }

  Program run() {
    emit(root_);
    push({.op = Op::kMatch});
    program_.start_guard = guard(start(root_));
    shorten_jumps();
    end_runs_that_cannot_be_given_back();
    return std::move(program_);
  }

 private:
  int32_t push(Inst in) {
    if (program_.code.size() >= kMaxInstructions)
      input_error("regex: the pattern is too large once its repetitions are expanded (over {} instructions)",
                  kMaxInstructions);
    program_.code.push_back(in);
    return here() - 1;
  }
  int32_t here() const { return int32_t(program_.code.size()); }
  Inst& at(int32_t pc) { return program_.code[size_t(pc)]; }

  uint32_t add_set(CodePointSet s) {
    program_.sets.push_back(std::move(s));
    return uint32_t(program_.sets.size() - 1);
  }

  // The guard of a branch whose matches begin as S: -1 when any position may do.
  int32_t guard(const Start& s) {
    return s.known && !s.nullable && !s.first.holds_everything() ? int32_t(add_set(s.first)) : -1;
  }

  Start start(const Node& n) const {
    switch (n.kind) {
      case Node::Kind::kEmpty: return {};
      case Node::Kind::kChar: {
        Start s{true, false, {}};
        s.first.add(n.value);
        return s;
      }
      case Node::Kind::kSet: return {true, false, program_.sets[n.value]};
      case Node::Kind::kConcat: {
        Start out;
        for (const Node& c : n.children) {
          const Start s = start(c);
          if (!s.known) return {false, true, {}};
          out.first.add(s.first);
          if (!s.nullable) {
            out.nullable = false;
            break;
          }
        }
        return out;
      }
      case Node::Kind::kAlternation: {
        Start out{true, false, {}};
        for (const Node& c : n.children) merge(out, start(c));
        return out;
      }
      case Node::Kind::kRepeat: {
        if (n.max == 0) return {};
        Start s = start(n.children[0]);
        s.nullable |= n.min == 0;
        return s;
      }
      case Node::Kind::kAtomic: return start(n.children[0]);
      default: return {false, true, {}};  // kLookahead, kAssert
    }
  }

  static void merge(Start& into, const Start& s) {
    into.known &= s.known;
    into.nullable |= s.nullable;
    into.first.add(s.first);
  }

  void emit(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kEmpty: return;
      case Node::Kind::kChar: push({.op = Op::kChar, .arg = n.value}); return;
      case Node::Kind::kSet: push({.op = Op::kSet, .arg = n.value}); return;
      case Node::Kind::kConcat:
        for (const Node& c : n.children) emit(c);
        return;
      case Node::Kind::kAlternation: return alternation(n, 0);
      case Node::Kind::kRepeat: return repeat(n, n.greed);
      case Node::Kind::kAtomic: return sub_program(Op::kAtomic, n.children[0], false);
      case Node::Kind::kLookahead: return sub_program(Op::kLookahead, n.children[0], n.negative);
      case Node::Kind::kAssert: push({.op = Op::kAssert, .arg = n.value}); return;
    }
  }

  // A | B | C: one kAlt for the alternatives of N from FROM on; beyond 64, the last is a kAlt of
  // the rest. Copies of N (in an expanded repetition) share one table: its targets are relative.
  void alternation(const Node& n, size_t from) {
    const size_t count = std::min(n.children.size() - from, Alternation::kMaxAlternatives);
    const bool chained = from + count < n.children.size();
    const auto [table, fresh] = alternation_of_.try_emplace({&n, from}, uint32_t(program_.alternations.size()));
    if (fresh) program_.alternations.push_back(alternation_table(n, from, count, chained));
    const int32_t head = push({.op = Op::kAlt, .arg = table->second});
    std::vector<int32_t> exits;
    for (size_t i = 0; i < count; ++i) {
      if (fresh) program_.alternations[table->second].targets.push_back(here() - head);
      if (chained && i + 1 == count) {
        alternation(n, from + i);
      } else {
        emit(n.children[from + i]);
      }
      exits.push_back(push({.op = Op::kJump}));
    }
    for (const int32_t e : exits) at(e).x = here();
  }

  Alternation alternation_table(const Node& n, size_t from, size_t count, bool chained) {
    Alternation table;
    for (size_t i = 0; i < count; ++i) {
      const uint64_t bit = uint64_t{1} << i;
      Start s = start(n.children[from + i]);
      for (size_t j = from + i + 1; chained && i + 1 == count && j < n.children.size(); ++j)
        merge(s, start(n.children[j]));
      const int32_t g = guard(s);
      table.guards.push_back(g);
      if (g < 0) {
        table.anywhere |= bit;
        continue;
      }
      for (uint32_t cp = 0; cp < 256; ++cp)
        if (s.first.contains(cp)) table.by_latin1[cp] |= bit;
      table.by_category_exact &= s.first.by_category_alone();
      for (int c = 0; c < unicode::kGeneralCategories; ++c)
        if (s.first.categories() >> c & 1) table.by_category[c] |= bit;
    }
    return table;
  }

  void sub_program(Op op, const Node& body, bool negative) {
    const int32_t head = push({.op = op, .negative = negative});
    emit(body);
    push({.op = Op::kMatch});
    at(head).x = here();
  }

  // N, repeated as GREED says.
  void repeat(const Node& n, Greed greed) {
    const Node& child = n.children[0];
    if (n.max == 0) return;
    if (child.kind == Node::Kind::kChar || child.kind == Node::Kind::kSet) {
      uint32_t set = child.value;
      if (child.kind == Node::Kind::kChar) {
        const auto [memo, fresh] = set_of_char_.try_emplace(&child, uint32_t(program_.sets.size()));
        if (fresh) {
          CodePointSet one;
          one.add(child.value);
          add_set(std::move(one));
        }
        set = memo->second;
      }
      push({.op = Op::kRepeat, .greed = greed, .arg = set, .min = uint32_t(n.min),
            .max = n.max == Node::kUnbounded ? std::numeric_limits<uint32_t>::max() : uint32_t(n.max)});
      return;
    }
    if (greed == Greed::kPossessive) {
      const int32_t head = push({.op = Op::kAtomic});
      repeat(n, Greed::kGreedy);
      push({.op = Op::kMatch});
      at(head).x = here();
      return;
    }
    for (int i = 0; i < n.min; ++i) emit(child);
    const auto [memo, fresh] = guard_of_.try_emplace(&child, -1);
    if (fresh) memo->second = guard(start(child));
    const int32_t child_guard = memo->second;
    const bool lazy = greed == Greed::kLazy;
    // A split that enters BODY or leaves for EXIT, in the repetition's order of preference.
    const auto set_split = [&](int32_t split, int32_t body, int32_t exit) {
      Inst& s = at(split);
      s.x = lazy ? exit : body;
      s.y = lazy ? body : exit;
      (lazy ? s.guard_y : s.guard_x) = child_guard;
    };
    if (n.max == Node::kUnbounded) {
      const bool empty_check = can_be_empty(child);
      const uint32_t reg = empty_check ? program_.registers++ : 0;
      const int32_t loop = push({.op = Op::kSplit});
      const int32_t body = here();
      if (empty_check) push({.op = Op::kLoopMark, .arg = reg});
      emit(child);
      const int32_t check = empty_check ? push({.op = Op::kLoopCheck, .arg = reg}) : -1;
      push({.op = Op::kJump, .x = loop});
      if (check >= 0) at(check).x = here();
      set_split(loop, body, here());
      return;
    }
    std::vector<std::pair<int32_t, int32_t>> optional;  // (split, body) of each optional copy
    for (int i = n.min; i < n.max; ++i) {
      const int32_t split = push({.op = Op::kSplit});
      optional.emplace_back(split, here());
      emit(child);
    }
    for (const auto& [split, body] : optional) set_split(split, body, here());
  }

  // A jump goes straight to the end of a chain of jumps, and a jump to kMatch is one.
  void shorten_jumps() {
    for (Inst& in : program_.code) {
      if (in.op != Op::kJump) continue;
      while (at(in.x).op == Op::kJump) in.x = at(in.x).x;
      if (at(in.x).op == Op::kMatch) in = {.op = Op::kMatch};
    }
  }

  // A greedy run is never given back when what follows cannot fail (kMatch, through jumps), or
  // must begin with a code point the run's set does not hold: every position it could give back
  // to begins with a code point of the run. Such a run needs no backtracking entry.
  void end_runs_that_cannot_be_given_back() {
    for (int32_t pc = 0; pc < here(); ++pc) {
      if (at(pc).op != Op::kRepeat || at(pc).greed != Greed::kGreedy) continue;
      const CodePointSet& run = program_.sets[at(pc).arg];
      const Inst& after = at(pc + 1).op == Op::kJump ? at(at(pc + 1).x) : at(pc + 1);
      const bool possessive =
          after.op == Op::kMatch || (after.op == Op::kChar && !run.contains(after.arg)) ||
          ((after.op == Op::kSet || (after.op == Op::kRepeat && after.min > 0)) &&
           run.disjoint(program_.sets[after.arg]));
      if (possessive) at(pc).greed = Greed::kPossessive;
    }
  }

  Node root_;
  Program program_;
  // What copies of a node share: the kAlt table of (alternation, first alternative), the guard
  // of a loop's body, the set of a repeated literal.
  std::map<std::pair<const Node*, size_t>, uint32_t> alternation_of_;
  std::unordered_map<const Node*, int32_t> guard_of_;
  std::unordered_map<const Node*, uint32_t> set_of_char_;
};

}  // namespace

Program compile(Syntax syntax) { return Compiler(std::move(syntax)).run(); }

}  // namespace meg::regex
