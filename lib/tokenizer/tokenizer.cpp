#include "tokenizer/tokenizer.hpp"

#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "tokenizer/gpt2_bpe.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "tokenizer/sentencepiece_tokenizer.hpp"

namespace meg {

TokenizerPaths tokenizer_files_in(const std::string& dir) {
  const std::filesystem::path d(dir);
  std::error_code ec;
  const auto has = [&](const char* name) { return std::filesystem::is_regular_file(d / name, ec); };
  if (has("tokenizer.json")) return {(d / "tokenizer.json").string(), ""};
  if (has("tokenizer.model")) return {(d / "tokenizer.model").string(), ""};
  if (has("vocab.json") && has("merges.txt")) return {(d / "vocab.json").string(), (d / "merges.txt").string()};
  return {};
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, const std::string& merges) {
  if (path.empty()) input_error("no tokenizer given (--tokenizer)");
  if (!merges.empty()) return std::make_unique<Gpt2BpeTokenizer>(path, merges);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const TokenizerPaths files = tokenizer_files_in(path);
    if (files.tokenizer.empty())
      input_error("{}: a directory with no tokenizer.json, tokenizer.model, or vocab.json and merges.txt", path);
    return load_tokenizer(files.tokenizer, files.merges);
  }
  if (std::filesystem::path(path).filename() == "vocab.json")
    input_error("{}: a GPT-2 vocabulary needs its merges file too (--merges merges.txt)", path);
  if (path.ends_with(".json")) return std::make_unique<HfTokenizer>(path);
  return std::make_unique<SentencePieceTokenizer>(path);
}

bool valid_utf8(std::string_view text, size_t* bad_offset) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // Fast path: eight ASCII bytes at a time.
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if ((w & 0x8080808080808080ULL) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    if (i + len > n) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) {
        if (bad_offset) *bad_offset = i;
        return false;
      }
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

}  // namespace meg
