// TextStream: incremental detokenisation in whole characters.
#include "infer/text_stream.hpp"

#include <algorithm>
#include <string_view>

namespace meg {

namespace {

// Tokens of the prompt kept as the first window's context (vLLM keeps 5 too): enough for any
// tokenizer's look-back at a piece's start.
constexpr size_t kContext = 5;

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF8) return 0;  // never a lead byte
  return lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
}

bool ends_inside_character(const std::string& text) {
  return complete_utf8_length(text) < text.size() || std::string_view(text).ends_with(kReplacement);
}

}  // namespace

size_t complete_utf8_length(const std::string& text) {
  // The last lead byte within a character's reach of the end, and whether its sequence is short.
  const size_t n = text.size();
  for (size_t back = 1; back <= std::min<size_t>(n, 4); ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    const size_t need = utf8_sequence_length(c);
    return need > back ? n - back : n;
  }
  return n;
}

TextStream::TextStream(const Tokenizer& tokenizer, std::span<const int32_t> prompt) : tokenizer_(tokenizer) {
  const size_t context = std::min(prompt.size(), kContext);
  tokens_.assign(prompt.end() - ptrdiff_t(context), prompt.end());
  read_ = tokens_.size();
}

std::string TextStream::pending() const {
  const std::span<const int32_t> all(tokens_);
  const std::string released = tokenizer_.decode(all.subspan(prefix_, read_ - prefix_));
  const std::string window = tokenizer_.decode(all.subspan(prefix_));
  return window.size() > released.size() ? window.substr(released.size()) : std::string();
}

std::string TextStream::push(int32_t token) {
  tokens_.push_back(token);
  const std::string text = pending();
  if (text.empty() || ends_inside_character(text)) return {};
  prefix_ = read_;
  read_ = tokens_.size();
  return to_valid_utf8(text);
}

std::string TextStream::finish() {
  const std::string text = pending();
  prefix_ = read_ = tokens_.size();
  return to_valid_utf8(text);
}

}  // namespace meg
