// The pattern reader: Oniguruma's Ruby syntax (the onig crate's default), the part that
// tokenizer.json patterns use, read exactly or refused. Where Ruby's syntax differs from Perl's,
// Ruby's is followed: X{n,m}+ is (?:X{n,m})+ (only ?+ *+ ++ are possessive), X{n}? is (?:X{n})?,
// ^ and $ match at every line, \xHH above 7F is refused (a raw byte to Oniguruma).
//
// Case-insensitive matching ((?i)) uses simple case folding, over literals and classes of literals
// only. Oniguruma also folds to and from several characters ("ss" and U+00DF); a pattern where
// that could change a match (a literal whose folding is several characters, or two adjacent
// literals that begin one) is refused, and so are properties and \w under (?i).
#include <algorithm>
#include <cctype>
#include <optional>
#include <string>

#include "core/error.hpp"
#include "core/utf8.hpp"
#include "tokenizer/regex_syntax.hpp"

namespace meg::regex {

namespace {

using unicode::bit;
using unicode::CategoryMask;
using unicode::GeneralCategory;

constexpr int kMaxDepth = 100;       // groups within groups
constexpr int kMaxRepeat = 100000;   // Oniguruma's ONIG_MAX_REPEAT_NUM
constexpr uint32_t kNoFold = ~0u;

// What an escape stands for.
struct Escape {
  enum class Kind { kChar, kSet, kAssert } kind = Kind::kChar;
  uint32_t cp = 0;
  CodePointSet set;
  Assertion assertion{};
  bool folds = true;  // a set that (?i) leaves as it is, so it may appear there
};

struct Quantifier {
  int min, max;
  bool interval, fixed;  // {..}, {n}
};

// \p{NAME}: Oniguruma compares names ignoring case, spaces, '_' and '-'.
std::optional<CategoryMask> category_property(std::string name) {
  std::erase_if(name, [](char c) { return c == ' ' || c == '_' || c == '-'; });
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::pair<const char*, CategoryMask> kGroups[] = {
      {"l", unicode::kLetterMask},       {"letter", unicode::kLetterMask},
      {"lc", unicode::kCasedLetterMask}, {"casedletter", unicode::kCasedLetterMask},
      {"m", unicode::kMarkMask},         {"mark", unicode::kMarkMask},
      {"combiningmark", unicode::kMarkMask},
      {"n", unicode::kNumberMask},       {"number", unicode::kNumberMask},
      {"p", unicode::kPunctuationMask},  {"punctuation", unicode::kPunctuationMask},
      {"s", unicode::kSymbolMask},       {"symbol", unicode::kSymbolMask},
      {"z", unicode::kSeparatorMask},    {"separator", unicode::kSeparatorMask},
      {"c", unicode::kOtherCategoryMask}, {"other", unicode::kOtherCategoryMask},
  };
  static const char* const kLongNames[] = {
      "uppercaseletter", "lowercaseletter", "titlecaseletter", "modifierletter", "otherletter",
      "nonspacingmark", "spacingmark", "enclosingmark", "decimalnumber", "letternumber", "othernumber",
      "connectorpunctuation", "dashpunctuation", "openpunctuation", "closepunctuation",
      "initialpunctuation", "finalpunctuation", "otherpunctuation", "mathsymbol", "currencysymbol",
      "modifiersymbol", "othersymbol", "spaceseparator", "lineseparator", "paragraphseparator",
      "control", "format", "surrogate", "privateuse", "unassigned"};
  static_assert(std::size(kLongNames) == unicode::kGeneralCategories);
  for (const auto& [group, mask] : kGroups)
    if (name == group) return mask;
  for (int c = 0; c < unicode::kGeneralCategories; ++c) {
    std::string code = unicode::category_name(GeneralCategory(c));
    code[0] = char(std::tolower(code[0]));
    code[1] = char(std::tolower(code[1]));
    if (name == code || name == kLongNames[c]) return bit(GeneralCategory(c));
  }
  return std::nullopt;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  explicit Parser(std::string_view pattern) : p_(pattern) {}

  Syntax run() {
    Syntax out;
    sets_ = &out.sets;
    out.root = alternation(false, 0);
    if (!at_end()) fail(i_, "unbalanced ')'");
    return out;
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(size_t at, fmt::format_string<Args...> f, Args&&... args) {
    input_error("regex at offset {}: {}", at, fmt::format(f, std::forward<Args>(args)...));
  }

  bool at_end() const { return i_ >= p_.size(); }
  char peek(size_t k = 0) const { return i_ + k < p_.size() ? p_[i_ + k] : '\0'; }

  uint32_t next_char() {
    size_t len;
    const uint32_t cp = next_code_point(reinterpret_cast<const uint8_t*>(p_.data()), p_.size(), i_, &len);
    if (cp == 0xFFFD && len == 1) fail(i_, "the pattern is not valid UTF-8");
    i_ += len;
    return cp;
  }

  Node set_node(CodePointSet set) {
    sets_->push_back(std::move(set));
    Node n;
    n.kind = Node::Kind::kSet;
    n.value = uint32_t(sets_->size() - 1);
    return n;
  }

  static Node wrap(Node::Kind kind, Node child) {
    Node n;
    n.kind = kind;
    n.children.push_back(std::move(child));
    return n;
  }

  static Node repeat(Node child, int min, int max, Greed greed) {
    Node n = wrap(Node::Kind::kRepeat, std::move(child));
    n.min = min, n.max = max, n.greed = greed;
    return n;
  }

  Node alternation(bool icase, int depth) {
    std::vector<Node> alternatives;
    alternatives.push_back(sequence(icase, depth));
    while (peek() == '|') {
      ++i_;
      alternatives.push_back(sequence(icase, depth));
    }
    if (alternatives.size() == 1) return std::move(alternatives[0]);
    Node n;
    n.kind = Node::Kind::kAlternation;
    n.children = std::move(alternatives);
    return n;
  }

  Node sequence(bool icase, int depth) {
    std::vector<Node> items;
    uint32_t previous_fold = kNoFold;  // of the item before, if an unquantified (?i) literal
    size_t previous_at = 0;
    while (!at_end() && peek() != '|' && peek() != ')') {
      const size_t at = i_;
      uint32_t fold = kNoFold;
      bool quantifiable = true;
      Node atom;
      const char c = peek();
      if (c == '(' && peek(1) == '?' && (std::isalpha(static_cast<unsigned char>(peek(2))) || peek(2) == '-')) {
        i_ += 2;
        const bool scoped_icase = options(icase, at);
        if (peek() == ')') {  // (?i): the rest of the enclosing group
          ++i_;
          if (depth >= kMaxDepth) fail(at, "groups nested deeper than {}", kMaxDepth);
          Node rest = sequence(scoped_icase, depth + 1);
          if (peek() == '|')
            fail(at, "an option group like (?i) before '|' in the same group is not supported "
                     "(Oniguruma and Perl scope it differently); write (?i:...)");
          items.push_back(std::move(rest));
          break;
        }
        ++i_;  // ':'
        atom = group_body(scoped_icase, depth, at);
      } else if (c == '(') {
        atom = group(icase, depth);
      } else if (c == '[') {
        atom = set_node(bracket_class(icase));
      } else if (c == '.') {
        ++i_;
        atom = set_node(CodePointSet::any_but_newline());
      } else if (c == '^' || c == '$') {
        ++i_;
        atom = assertion(c == '^' ? Assertion::kLineStart : Assertion::kLineEnd);
        quantifiable = false;
      } else if (c == '\\') {
        ++i_;
        Escape e = escape(false, at);
        if (e.kind == Escape::Kind::kAssert) {
          atom = assertion(e.assertion);
          quantifiable = false;
        } else if (e.kind == Escape::Kind::kSet) {
          if (icase && !e.folds) fail(at, "{} under (?i) is not supported", p_.substr(at, i_ - at));
          atom = set_node(std::move(e.set));
        } else {
          atom = literal(e.cp, icase, at, &fold);
        }
      } else if (c == '*' || c == '+' || c == '?') {
        fail(at, "quantifier '{}' with nothing to repeat", c);
      } else if (c == '{') {
        if (interval()) fail(at, "quantifier '{{...}}' with nothing to repeat");
        fail(at, "'{{' that does not begin a repetition (write \\{{)");
      } else {
        atom = literal(next_char(), icase, at, &fold);
      }

      const bool quantified = quantifiers(atom, at, quantifiable);
      if (!quantified && fold != kNoFold && previous_fold != kNoFold &&
          unicode::begins_multi_char_fold(previous_fold, fold))
        fail(previous_at, "two characters under (?i) that Oniguruma may match as one (their case folding "
                          "is another character's, as \"ss\" is U+00DF's) are not supported");
      previous_fold = quantified ? kNoFold : fold;
      previous_at = at;
      items.push_back(std::move(atom));
    }
    if (items.size() == 1) return std::move(items[0]);
    Node n;
    if (!items.empty()) n.kind = Node::Kind::kConcat;
    n.children = std::move(items);
    return n;
  }

  // After "(?": the option letters up to ':' or ')'; returns whether (?i) holds after them.
  bool options(bool icase, size_t at) {
    bool on = true;
    while (!at_end() && peek() != ':' && peek() != ')') {
      if (peek() == '-' && on) {
        on = false;
      } else if (peek() == 'i') {
        icase = on;
      } else {
        fail(i_, "option '{}' in a group is not supported (only i)", p_.substr(i_, 1));
      }
      ++i_;
    }
    if (at_end()) fail(at, "unbalanced '(' (no matching ')')");
    return icase;
  }

  // At '(' of any group but an option group.
  Node group(bool icase, int depth) {
    const size_t at = i_++;
    if (peek() != '?') return group_body(icase, depth, at);  // captures nothing: nothing needs it
    ++i_;
    const char kind = peek();
    if (kind == ':') {
      ++i_;
      return group_body(icase, depth, at);
    }
    if (kind == '>') {
      ++i_;
      return wrap(Node::Kind::kAtomic, group_body(icase, depth, at));
    }
    if (kind == '=' || kind == '!') {
      ++i_;
      Node n = wrap(Node::Kind::kLookahead, group_body(icase, depth, at));
      n.negative = kind == '!';
      return n;
    }
    if (kind == '<' && (peek(1) == '=' || peek(1) == '!'))
      fail(at, "lookbehind {} is not supported", p_.substr(at, 4));
    if (kind == '<') {  // (?<name>...): a group like any other here
      ++i_;
      const size_t name_at = i_;
      while (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_') ++i_;
      if (i_ == name_at || peek() != '>') fail(at, "bad group name in (?<name>...)");
      ++i_;
      return group_body(icase, depth, at);
    }
    if (kind == '#') fail(at, "comment group (?#...) is not supported");
    if (at_end()) fail(at, "unbalanced '(' (no matching ')')");
    fail(at, "group {} is not supported", p_.substr(at, 3));
  }

  Node group_body(bool icase, int depth, size_t at) {
    if (depth >= kMaxDepth) fail(at, "groups nested deeper than {}", kMaxDepth);
    Node body = alternation(icase, depth + 1);
    if (peek() != ')') fail(at, "unbalanced '(' (no matching ')')");
    ++i_;
    return body;
  }

  static Node assertion(Assertion a) {
    Node n;
    n.kind = Node::Kind::kAssert;
    n.value = uint32_t(a);
    return n;
  }

  Node literal(uint32_t cp, bool icase, size_t at, uint32_t* fold) {
    Node n;
    n.kind = Node::Kind::kChar;
    n.value = cp;
    if (!icase) return n;
    const auto multi = unicode::multi_char_folds();
    if (std::binary_search(multi.begin(), multi.end(), cp))
      fail(at, "U+{:04X} under (?i) is not supported (its case folding is several characters)", cp);
    *fold = unicode::simple_case_fold(cp);
    const auto variants = CodePointSet::case_variants(cp);
    if (variants.size() == 1) return n;
    CodePointSet set;
    for (const uint32_t v : variants) set.add(v);
    return set_node(std::move(set));
  }

  // After an atom: its quantifiers, if any. Returns whether there was one.
  bool quantifiers(Node& atom, size_t at, bool quantifiable) {
    const auto q = quantifier();
    if (!q) return false;
    if (!quantifiable) fail(at, "a quantifier after an assertion is not supported");
    Greed greed = Greed::kGreedy;
    if (!q->fixed && peek() == '?') {
      ++i_;
      greed = Greed::kLazy;
    } else if (!q->interval && peek() == '+') {
      ++i_;
      greed = Greed::kPossessive;
    }
    atom = repeat(std::move(atom), q->min, q->max, greed);
    // Ruby's syntax: X{n,m}+ is (?:X{n,m})+ and X{n}? is (?:X{n})?.
    if (q->interval && greed == Greed::kGreedy && (peek() == '+' || (q->fixed && peek() == '?'))) {
      const bool plus = peek() == '+';
      ++i_;
      atom = repeat(std::move(atom), plus ? 1 : 0, plus ? Node::kUnbounded : 1, Greed::kGreedy);
    }
    const size_t next = i_;
    if (quantifier()) fail(next, "a quantifier on a quantifier ('{}') is not supported", p_.substr(next, 1));
    return true;
  }

  std::optional<Quantifier> quantifier() {
    switch (peek()) {
      case '*': ++i_; return Quantifier{0, Node::kUnbounded, false, false};
      case '+': ++i_; return Quantifier{1, Node::kUnbounded, false, false};
      case '?': ++i_; return Quantifier{0, 1, false, false};
      case '{': return interval();
      default: return std::nullopt;
    }
  }

  // At '{': {n}, {n,}, {n,m} or {,m}, consumed; anything else is left alone.
  std::optional<Quantifier> interval() {
    size_t j = i_ + 1;
    const auto number = [&]() -> std::optional<int> {
      const size_t from = j;
      long value = 0;
      while (j < p_.size() && std::isdigit(static_cast<unsigned char>(p_[j])) && j - from < 7)
        value = value * 10 + (p_[j++] - '0');
      if (j == from) return std::nullopt;
      if (value > kMaxRepeat) fail(from, "repetition count {} above {}", p_.substr(from, j - from), kMaxRepeat);
      return int(value);
    };
    const auto low = number();
    std::optional<int> high = low;
    const bool comma = j < p_.size() && p_[j] == ',';
    if (comma) {
      ++j;
      high = number();
      if (!high && !low) return std::nullopt;
    }
    if (!low && !comma) return std::nullopt;
    if (j >= p_.size() || p_[j] != '}') return std::nullopt;
    const int min = low.value_or(0), max = comma && !high ? Node::kUnbounded : *high;
    if (max != Node::kUnbounded && max < min) fail(i_, "repetition {} with its maximum below its minimum", p_.substr(i_, j + 1 - i_));
    i_ = j + 1;
    return Quantifier{min, max, true, !comma};
  }

  // After '\' (at AT).
  Escape escape(bool in_class, size_t at) {
    if (at_end()) fail(at, "the pattern ends with '\\'");
    Escape e;
    const auto set = [&](CodePointSet s, bool negated, bool folds) {
      if (negated) s.negate();
      e.kind = Escape::Kind::kSet;
      e.set = std::move(s);
      e.folds = folds && !negated;
      return e;
    };
    const auto assert_or_refuse = [&](Assertion a) {
      if (in_class) fail(at, "{} inside a class", p_.substr(at, 2));
      e.kind = Escape::Kind::kAssert;
      e.assertion = a;
      return e;
    };
    const auto ch = [&](uint32_t cp) {
      e.cp = cp;
      return e;
    };
    if (static_cast<unsigned char>(peek()) >= 0x80) return ch(next_char());
    const char c = p_[i_++];
    switch (c) {
      case 't': return ch('\t');
      case 'n': return ch('\n');
      case 'r': return ch('\r');
      case 'f': return ch('\f');
      case 'v': return ch('\v');
      case 'a': return ch('\a');
      case 'e': return ch(0x1B);
      case '0':
        if (peek() >= '0' && peek() <= '7') fail(at, "octal escape {} is not supported", p_.substr(at, 3));
        return ch(0);
      case 'x': return ch(hex_escape(at));
      case 'u': {
        uint32_t cp = 0;
        for (int k = 0; k < 4; ++k) {
          const int v = hex_value(peek());
          if (v < 0) fail(at, "\\u needs four hex digits");
          cp = cp << 4 | uint32_t(v);
          ++i_;
        }
        if (cp >= 0xD800 && cp < 0xE000) fail(at, "\\u{:04X} is a surrogate, not a character", cp);
        return ch(cp);
      }
      case 's': case 'S': return set(CodePointSet::white_space(), c == 'S', true);
      case 'd': case 'D': return set(CodePointSet::of_categories(bit(GeneralCategory::Nd)), c == 'D', true);
      case 'w': case 'W':
        return set(CodePointSet::word(), c == 'W', false);
      case 'h': case 'H': {
        CodePointSet hex;
        hex.add_range('0', '9'), hex.add_range('a', 'f'), hex.add_range('A', 'F');
        return set(std::move(hex), c == 'H', true);
      }
      case 'p': case 'P': return set(property(at), c == 'P', false);
      case 'b':
        if (in_class) return ch('\b');
        return assert_or_refuse(Assertion::kWordBoundary);
      case 'B': return assert_or_refuse(Assertion::kNotWordBoundary);
      case 'A': return assert_or_refuse(Assertion::kTextStart);
      case 'z': return assert_or_refuse(Assertion::kTextEnd);
      case 'Z': return assert_or_refuse(Assertion::kTextEndBeforeNewline);
      case 'k': fail(at, "backreference \\k is not supported");
      case 'g': fail(at, "subexpression call \\g is not supported");
      default:
        if (c >= '1' && c <= '9') fail(at, "backreference \\{} is not supported", c);
        if (std::isalnum(static_cast<unsigned char>(c))) fail(at, "escape \\{} is not supported", c);
        return ch(uint8_t(c));  // an escaped punctuation character stands for itself
    }
  }

  // After "\x": \xH, \xHH (below 80) or \x{H...}.
  uint32_t hex_escape(size_t at) {
    uint32_t cp = 0;
    if (peek() == '{') {
      ++i_;
      int digits = 0;
      for (; hex_value(peek()) >= 0 && digits < 8; ++digits, ++i_) cp = cp << 4 | uint32_t(hex_value(peek()));
      if (digits == 0 || peek() != '}') fail(at, "\\x{{...}} needs 1 to 8 hex digits and a '}}'");
      ++i_;
      if (cp > unicode::kMaxCodePoint || (cp >= 0xD800 && cp < 0xE000))
        fail(at, "\\x{{{:X}}} is not a character", cp);
      return cp;
    }
    int digits = 0;
    for (; hex_value(peek()) >= 0 && digits < 2; ++digits, ++i_) cp = cp << 4 | uint32_t(hex_value(peek()));
    if (digits == 0) fail(at, "\\x needs hex digits");
    if (cp >= 0x80)
      fail(at, "\\x{:02X} is a raw byte to Oniguruma, not a character; write \\x{{{:X}}}", cp, cp);
    return cp;
  }

  // After "\p" or "\P" (at AT): {NAME} or {^NAME}; the set of NAME, complemented for ^.
  CodePointSet property(size_t at) {
    if (peek() != '{') fail(at, "{} needs a name in braces, as in \\p{{L}}", p_.substr(at, 2));
    ++i_;
    const bool negated = peek() == '^';
    if (negated) ++i_;
    const size_t close = p_.find('}', i_);
    if (close == std::string_view::npos) fail(at, "unterminated {}{{", p_.substr(at, 2));
    const std::string name(p_.substr(i_, close - i_));
    i_ = close + 1;
    const auto mask = category_property(name);
    if (!mask)
      fail(at, "unsupported property \\p{{{}}} (only general categories: L, Lu, Ll, M, N, Nd, P, S, Z, C ...)", name);
    return CodePointSet::of_categories(negated ? unicode::kAllCategoriesMask & ~*mask : *mask);
  }

  // At '[': the class up to its ']'.
  CodePointSet bracket_class(bool icase) {
    const size_t at = i_++;
    const bool negate = peek() == '^';
    if (negate) ++i_;
    if (peek() == ']') fail(i_, "']' at the start of a class (write \\])");
    CodePointSet s;
    for (;;) {
      if (at_end()) fail(at, "unterminated class '['");
      const size_t item_at = i_;
      const char c = peek();
      if (c == ']') {
        ++i_;
        break;
      }
      if (c == '[') fail(i_, "'[' inside a class (nested classes and POSIX brackets are not supported; write \\[)");
      if (c == '&' && peek(1) == '&') fail(i_, "class intersection && is not supported");
      uint32_t first;
      if (c == '\\') {
        ++i_;
        Escape e = escape(true, item_at);
        if (e.kind == Escape::Kind::kSet) {
          if (icase && !e.folds) fail(item_at, "{} under (?i) is not supported", p_.substr(item_at, i_ - item_at));
          if (peek() == '-' && peek(1) != ']') fail(i_, "a range from a class escape (write \\-)");
          s.add(e.set);
          continue;
        }
        first = e.cp;
      } else {
        first = next_char();
      }
      uint32_t last = first;
      if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
        ++i_;
        const size_t last_at = i_;
        if (peek() == '[') fail(i_, "'[' inside a class (write \\[)");
        if (peek() == '\\') {
          ++i_;
          const Escape e = escape(true, last_at);
          if (e.kind != Escape::Kind::kChar) fail(last_at, "a range to a class escape");
          last = e.cp;
        } else {
          last = next_char();
        }
        if (last < first) fail(item_at, "a range that ends before it begins");
        if (peek() == '-' && peek(1) != ']') fail(i_, "'-' right after a range (write \\-)");
      }
      if (icase) {
        const auto multi = unicode::multi_char_folds();
        const auto it = std::lower_bound(multi.begin(), multi.end(), first);
        if (it != multi.end() && *it <= last)
          fail(item_at, "U+{:04X} in a class under (?i) is not supported (its case folding is several characters)", *it);
      }
      s.add_range(first, last);
    }
    if (icase) s.close_over_case();
    if (negate) s.negate();
    return s;
  }

  std::string_view p_;
  size_t i_ = 0;
  std::vector<CodePointSet>* sets_ = nullptr;
};

}  // namespace

Syntax parse(std::string_view pattern) { return Parser(pattern).run(); }

}  // namespace meg::regex
