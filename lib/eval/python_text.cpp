#include "eval/python_text.hpp"

#include "core/utf8.hpp"

namespace meg::py {
namespace {

// The code point starting at S[I] and its length in bytes (text parsed from JSON is valid UTF-8).
char32_t decode(std::string_view s, size_t i, size_t& len) {
  return next_code_point(reinterpret_cast<const uint8_t*>(s.data()), s.size(), i, &len);
}

}  // namespace

bool is_space(char32_t c) {
  // CPython's _PyUnicode_IsWhitespace: Unicode White_Space plus the separators U+001C..U+001F.
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
  switch (c) {
    case 0x85:
    case 0xa0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202f:
    case 0x205f:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200a;
  }
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0, len = 0; i < s.size(); i += len, ++n) decode(s, i, len);
  return n;
}

std::string_view rstrip(std::string_view s) {
  size_t end = 0;  // just past the last character that is not whitespace
  for (size_t i = 0, len = 0; i < s.size(); i += len)
    if (!is_space(decode(s, i, len))) end = i + len;
  return s.substr(0, end);
}

std::string_view lstrip(std::string_view s) {
  size_t begin = 0, len = 0;
  while (begin < s.size() && is_space(decode(s, begin, len))) begin += len;
  return s.substr(begin);
}

std::string_view strip(std::string_view s) { return rstrip(lstrip(s)); }

size_t count_words(std::string_view s) {
  // re.split gives one piece more than there are maximal runs of whitespace.
  size_t pieces = 1;
  bool in_space = false;
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    const bool space = is_space(decode(s, i, len));
    if (space && !in_space) ++pieces;
    in_space = space;
  }
  return pieces;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> pieces;
  for (size_t begin = 0;;) {
    const size_t end = s.find(sep, begin);
    pieces.push_back(s.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    if (end == std::string_view::npos) return pieces;
    begin = end + 1;
  }
}

std::string replace(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t begin = 0;
  for (size_t at; (at = s.find(from, begin)) != std::string_view::npos; begin = at + from.size()) {
    out.append(s.substr(begin, at - begin));
    out.append(to);
  }
  out.append(s.substr(begin));
  return out;
}

std::string capitalize_ascii(std::string_view s) {
  std::string out(s);
  for (size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    if (i == 0 && c >= 'a' && c <= 'z') out[i] = static_cast<char>(c - 'a' + 'A');
    if (i > 0 && c >= 'A' && c <= 'Z') out[i] = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace meg::py
