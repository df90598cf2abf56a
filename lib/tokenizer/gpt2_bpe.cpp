#include "tokenizer/gpt2_bpe.hpp"

#include <array>
#include <filesystem>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/json_file.hpp"
#include "core/mapped_file.hpp"
#include "core/utf8.hpp"
#include "tokenizer/bpe_merges.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/unicode_tables.hpp"
#include "tokenizer/word_cache.hpp"

namespace meg {

namespace {

using unicode::CharClass;

inline CharClass class_at(const uint8_t* s, size_t n, size_t i, size_t* len) {
  return unicode::char_class(next_code_point(s, n, i, len));
}

// Length of the contraction after an apostrophe at P[-1] ('s 't 're 've 'm 'll 'd), 0 if none.
inline size_t contraction_length(const uint8_t* p, size_t n) {
  if (n >= 1 && (p[0] == 's' || p[0] == 't' || p[0] == 'm' || p[0] == 'd')) return 1;
  if (n >= 2 && ((p[0] == 'r' && p[1] == 'e') || (p[0] == 'v' && p[1] == 'e') || (p[0] == 'l' && p[1] == 'l')))
    return 2;
  return 0;
}

// Splits TEXT into the pieces that GPT-2's pattern matches, in order, calling EMIT(piece) for each:
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// with the classes of the JavaScript regex (unicode_tables.hpp). The alternatives are tried in
// this order at each position, so a scanner that looks at the class of the next code point or two
// gives the same pieces as the regex engine, without its backtracking.
template <typename Emit>
void pretokenize(std::string_view text, Emit&& emit) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0, len;
  while (i < n) {
    const size_t start = i;
    CharClass cls = class_at(s, n, i, &len);
    if (s[i] == '\'') {
      if (const size_t c = contraction_length(s + i + 1, n - i - 1)) {
        emit(text.substr(start, c + 1));
        i += c + 1;
        continue;
      }
    } else if (s[i] == ' ' && i + 1 < n) {
      // " ?X+": a single space leads the run of letters, digits or other symbols after it.
      const CharClass next = class_at(s, n, i + 1, &len);
      if (next != unicode::kSpace) {
        cls = next;
        ++i;
      }
    }
    size_t end = i;
    if (cls != unicode::kSpace) {
      while (end < n && class_at(s, n, end, &len) == cls) end += len;
    } else {
      // "\s+(?!\S)" backs off one code point when a non-space follows, leaving the last space to
      // lead the next piece; a single space before a non-space falls through to "\s+".
      size_t last = end;
      while (end < n && class_at(s, n, end, &len) == unicode::kSpace) last = end, end += len;
      if (end < n && last > i) end = last;
    }
    emit(text.substr(start, end - start));
    i = end;
  }
}

}  // namespace

struct Gpt2BpeTokenizer::Impl {
  std::string vocab_path;
  std::vector<std::string> token_bytes;  // by id: the bytes each token stands for
  std::array<int32_t, 256> byte_ids{};   // the token of each single byte
  BpeMerges merges;
  int32_t eod = 0;
  uint64_t fingerprint = 0;
  uint64_t cache_owner = WordCache::new_owner_id();

  void load_vocab(std::string_view text, std::unordered_map<std::string, int32_t>& ids);
  void load_merges(std::string_view text, const std::string& path,
                   const std::unordered_map<std::string, int32_t>& ids);
  void bpe(std::string_view word, std::vector<int32_t>& out) const;
};

void Gpt2BpeTokenizer::Impl::load_vocab(std::string_view text, std::unordered_map<std::string, int32_t>& ids) {
  const std::string& path = vocab_path;
  const auto vocab = parse_json(text, JsonSource{path});
  if (!vocab.is_object() || vocab.empty()) input_error("{}: expected a JSON object of token -> id", path);

  const size_t n = vocab.size();
  const auto chars = byte_level_chars();

  token_bytes.assign(n, {});
  std::vector<bool> seen(n);
  ids.reserve(n);
  for (const auto& [token, value] : vocab.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= int64_t(n))
      input_error("{}: token {} has id {}; ids must run from 0 to {}", path, nlohmann::json(token).dump(),
                  value.dump(), n - 1);
    const auto id = value.get<int32_t>();
    if (seen[id]) input_error("{}: two tokens have id {}, one of them {}", path, id, nlohmann::json(token).dump());
    seen[id] = true;
    ids.emplace(token, id);

    // The bytes behind the token's characters. A token with characters outside the byte alphabet
    // (an added special token, say) cannot come out of BPE; it decodes to its own text.
    if (!append_byte_level_bytes(token, token_bytes[id])) token_bytes[id] = token;
  }

  for (int b = 0; b < 256; ++b) {
    std::string c;
    append_utf8(c, chars[b]);
    const auto it = ids.find(c);
    if (it == ids.end()) input_error("{}: no token for byte 0x{:02x} (\"{}\")", path, b, c);
    byte_ids[b] = it->second;
  }
  const auto it = ids.find("<|endoftext|>");
  if (it == ids.end()) input_error("{}: no <|endoftext|> token", path);
  eod = it->second;
}

void Gpt2BpeTokenizer::Impl::load_merges(std::string_view text, const std::string& path,
                                         const std::unordered_map<std::string, int32_t>& ids) {
  // "#version: 0.2" first, then one "LEFT RIGHT" pair per line in rank order.
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  merges.reserve(lines.size());
  const auto id_of = [&](std::string_view token, size_t line) {
    const auto it = ids.find(std::string(token));
    if (it == ids.end()) input_error("{}:{}: token '{}' is not in {}", path, line, token, vocab_path);
    return it->second;
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty() || (i == 0 && line.starts_with("#version"))) continue;
    const size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      input_error("{}:{}: expected two tokens separated by one space, got '{}'", path, i + 1, line);
    const std::string_view left = line.substr(0, space), right = line.substr(space + 1);
    const int32_t a = id_of(left, i + 1), b = id_of(right, i + 1);  // in this order: the error names the first
    merges.add(a, b, id_of(std::string(left) + std::string(right), i + 1));
  }
}

// Byte-pair encoding of one word: its bytes, merged by the rules of merges.txt (bpe_merges.hpp).
void Gpt2BpeTokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& out) const {
  thread_local std::vector<int32_t> symbols;
  symbols.resize(word.size());
  for (size_t i = 0; i < word.size(); ++i) symbols[i] = byte_ids[static_cast<uint8_t>(word[i])];
  merges.apply(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void gpt2_pretokenize(std::string_view text, std::vector<std::string_view>& pieces) {
  pretokenize(text, [&](std::string_view piece) { pieces.push_back(piece); });
}

Gpt2BpeTokenizer::Gpt2BpeTokenizer(const std::string& vocab_json, const std::string& merges_txt)
    : impl_(std::make_unique<Impl>()) {
  impl_->vocab_path = vocab_json;
  const MappedFile vocab(vocab_json), merges(merges_txt);
  std::unordered_map<std::string, int32_t> ids;
  impl_->load_vocab(vocab.text(), ids);
  impl_->load_merges(merges.text(), merges_txt, ids);
  Hasher h;
  h.update(vocab.text());
  h.update(merges.text());
  impl_->fingerprint = h.digest();
}

Gpt2BpeTokenizer::~Gpt2BpeTokenizer() = default;

void Gpt2BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  const Impl& t = *impl_;
  WordCache& cache = WordCache::for_thread(t.cache_owner);
  thread_local std::vector<int32_t> ids;
  pretokenize(text, [&](std::string_view word) {
    if (word.size() == 1) {
      out.push_back(t.byte_ids[static_cast<uint8_t>(word[0])]);
    } else {
      cache.encode(word, out, [&](std::vector<int32_t>& o) {
        ids.clear();
        t.bpe(word, ids);
        o.insert(o.end(), ids.begin(), ids.end());
      });
    }
  });
}

std::string Gpt2BpeTokenizer::decode(std::span<const int32_t> ids) const {
  const auto n = static_cast<int32_t>(impl_->token_bytes.size());
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n) input_error("token {} at position {} is outside the vocabulary of {}", ids[i], i, n);
    text += impl_->token_bytes[ids[i]];
  }
  return text;
}

int32_t Gpt2BpeTokenizer::vocab_size() const { return static_cast<int32_t>(impl_->token_bytes.size()); }

int32_t Gpt2BpeTokenizer::eod_id() const { return impl_->eod; }

std::string Gpt2BpeTokenizer::describe() const {
  return fmt::format("GPT-2 BPE, vocab {} ({})", vocab_size(),
                     std::filesystem::path(impl_->vocab_path).filename().string());
}

uint64_t Gpt2BpeTokenizer::fingerprint() const { return impl_->fingerprint; }

}  // namespace meg
