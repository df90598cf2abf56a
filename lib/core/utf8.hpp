// Walking UTF-8 text code point by code point (the GPT-2 pre-tokenizer, meg-eval's Python string
// functions, Unicode normalization), and writing it. Validation is valid_utf8() of tokenizer/tokenizer.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace meg {

// The code point at S[I] (I < N) and its length in *LEN. A byte that does not start a complete
// sequence counts as one code point of its own, U+FFFD, so a loop over malformed text still moves
// byte by byte and ends.
inline uint32_t next_code_point(const uint8_t* s, size_t n, size_t i, size_t* len) {
  const uint8_t c = s[i];
  *len = 1;
  if (c < 0x80) return c;
  const size_t l = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
  if (l == 0 || i + l > n) return 0xFFFD;
  uint32_t cp = c & (0x7F >> l);
  for (size_t k = 1; k < l; ++k) {
    if ((s[i + k] & 0xC0) != 0x80) return 0xFFFD;
    cp = cp << 6 | (s[i + k] & 0x3F);
  }
  *len = l;
  return cp;
}

// Appends CP (at most U+1FFFFF: what next_code_point can return) to S in UTF-8.
inline void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | cp >> 6);
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | cp >> 12);
    s += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | cp >> 18);
    s += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
    s += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// TEXT with each ill-formed sequence replaced by U+FFFD: one for each maximal subpart (a lead byte
// and the continuation bytes that may follow it, cut short; or a byte that starts nothing), as
// Unicode recommends and as Python's errors="replace" and Rust's from_utf8_lossy do.
std::string to_valid_utf8(std::string_view text);

}  // namespace meg
