// The byte-level alphabet of GPT-2's BPE (bytes_to_unicode() of OpenAI's encoder.py), which
// Hugging Face's ByteLevel pre-tokenizer and decoder share: each byte is written as one printable
// character in vocabularies and merge lists. The printable Latin-1 bytes stand for themselves; the
// other 68 (controls, space, 0x7F-0xA0, 0xAD) take U+0100 onwards, in byte order.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/utf8.hpp"

namespace meg {

// The character of each byte.
inline std::array<uint32_t, 256> byte_level_chars() {
  std::array<uint32_t, 256> chars{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    chars[b] = printable ? b : next++;
  }
  return chars;
}

// BYTES spelled in the alphabet, as vocabularies and merge lists write tokens.
inline std::string byte_level_spelling(std::string_view bytes) {
  static const auto chars = byte_level_chars();
  std::string out;
  for (const char b : bytes) append_utf8(out, chars[static_cast<uint8_t>(b)]);
  return out;
}

// The characters of the alphabet all lie below this code point.
inline constexpr uint32_t kByteLevelCharEnd = 0x144;

// The byte of each character below kByteLevelCharEnd, -1 for characters outside the alphabet.
inline std::array<int, kByteLevelCharEnd> byte_level_bytes() {
  std::array<int, kByteLevelCharEnd> bytes;
  bytes.fill(-1);
  const auto chars = byte_level_chars();
  for (int b = 0; b < 256; ++b) bytes[chars[b]] = b;
  return bytes;
}

// Appends the bytes TOKEN's characters stand for to OUT; false, OUT as it was, when a character
// lies outside the alphabet (an added token's text, say).
inline bool append_byte_level_bytes(std::string_view token, std::string& out) {
  static const auto byte_of = byte_level_bytes();
  const size_t mark = out.size();
  const auto* s = reinterpret_cast<const uint8_t*>(token.data());
  for (size_t i = 0, len; i < token.size(); i += len) {
    const uint32_t cp = next_code_point(s, token.size(), i, &len);
    if (cp >= kByteLevelCharEnd || byte_of[cp] < 0) {
      out.resize(mark);
      return false;
    }
    out += static_cast<char>(byte_of[cp]);
  }
  return true;
}

}  // namespace meg
