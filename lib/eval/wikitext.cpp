#include "eval/wikitext.hpp"

#include "eval/python_text.hpp"

namespace meg {
namespace {

// re.sub(r"\OPEN\s*([^\CLOSE]*?)\s*\CLOSE", r"OPEN\1CLOSE", s): from each OPEN (left to right,
// without overlaps) to the first CLOSE after it, the whitespace just inside both ends removed.
// An OPEN with no CLOSE after it is left alone.
std::string tighten(std::string_view s, char open, char close) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t end = s[i] == open ? s.find(close, i + 1) : std::string_view::npos;
    if (end == std::string_view::npos) {
      out += s[i++];
      continue;
    }
    out += open;
    out += py::strip(s.substr(i + 1, end - i - 1));
    out += close;
    i = end + 1;
  }
  return out;
}

// re.sub(r"/' [0-9]/", r"/'[0-9]/", s): lm-eval's pattern, which rewrites "/' 5/" to the literal
// "/'[0-9]/"; kept so that the scored text is the same.
std::string digit_quote_quirk(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s.substr(i, 3) == "/' " && i + 4 < s.size() && s[i + 3] >= '0' && s[i + 3] <= '9' && s[i + 4] == '/') {
      out += "/'[0-9]/";
      i += 5;
    } else {
      out += s[i++];
    }
  }
  return out;
}

}  // namespace

std::string wikitext_detokenize(std::string_view page) {
  using py::replace;
  std::string s = replace(page, "s '", "s'");  // contractions
  s = digit_quote_quirk(s);
  s = replace(s, " @-@ ", "-");  // number separators
  s = replace(s, " @,@ ", ",");
  s = replace(s, " @.@ ", ".");
  for (const char* p : {":", ";", ".", "!", "?", ","})  // punctuation
    s = replace(s, std::string(" ") + p + " ", std::string(p) + " ");
  for (const auto& [open, close] : {std::pair{'(', ')'}, {'[', ']'}, {'{', '}'}, {'"', '"'}, {'\'', '\''}})
    s = tighten(s, open, close);  // brackets and quotes
  s = replace(s, "= = = =", "====");
  s = replace(s, "= = =", "===");
  s = replace(s, "= =", "==");
  s = replace(s, " \u00b0 ", "\u00b0");
  s = replace(s, " \n", "\n");
  s = replace(s, "\n ", "\n");
  s = replace(s, " N ", " 1 ");
  s = replace(s, " 's", "'s");
  return s;
}

}  // namespace meg
