#include "core/utf8.hpp"

namespace meg {

std::string to_valid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  std::string out;
  out.reserve(n);
  size_t i = 0, done = 0;  // text[done, i) is valid and not yet copied
  while (i < n) {
    const uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The sequence's length and the range of its second byte (Unicode's table 3-7); the later
    // bytes are 80..BF.
    size_t length = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) length = 2;
    else if (c >= 0xE0 && c <= 0xEF) length = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) length = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    size_t k = 1;  // bytes of a valid prefix of the sequence
    while (k < length && i + k < n && s[i + k] >= (k == 1 ? lo : 0x80) && s[i + k] <= (k == 1 ? hi : 0xBF)) ++k;
    if (length != 0 && k == length) {
      i += length;
      continue;
    }
    out.append(text.substr(done, i - done));
    out.append("\xEF\xBF\xBD");
    i += k;
    done = i;
  }
  out.append(text.substr(done));
  return out;
}

}  // namespace meg
