#include "tokenizer/hf_added_tokens.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/utf8.hpp"
#include "tokenizer/char_props.hpp"

namespace meg {

namespace {

// The code point that ends TEXT (non-empty, valid UTF-8).
uint32_t last_code_point(std::string_view text) {
  size_t i = text.size() - 1;
  while (i > 0 && (static_cast<uint8_t>(text[i]) & 0xC0) == 0x80) --i;
  size_t len;
  return next_code_point(reinterpret_cast<const uint8_t*>(text.data()), text.size(), i, &len);
}

uint32_t first_code_point(std::string_view text) {
  size_t len;
  return next_code_point(reinterpret_cast<const uint8_t*>(text.data()), text.size(), 0, &len);
}

}  // namespace

void AddedTokens::Trie::insert(std::string_view content, int32_t token) {
  int32_t node = 0;
  for (const char ch : content) {
    const auto b = static_cast<uint8_t>(ch);
    auto& next = nodes[size_t(node)].next;
    const auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t{-1}));
    if (it != next.end() && it->first == b) {
      node = it->second;
      continue;
    }
    const auto child = static_cast<int32_t>(nodes.size());
    next.insert(it, {b, child});
    nodes.emplace_back();  // NEXT is not used after this
    node = child;
  }
  nodes[size_t(node)].token = token;
  first_byte[static_cast<uint8_t>(content[0])] = true;
}

std::pair<size_t, int32_t> AddedTokens::Trie::longest(std::string_view text, size_t at) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t i = at; i < text.size(); ++i) {
    const auto& next = nodes[node].next;
    const auto b = static_cast<uint8_t>(text[i]);
    const auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t{-1}));
    if (it == next.end() || it->first != b) break;
    node = it->second;
    if (nodes[node].token >= 0) best = {i + 1 - at, nodes[node].token};
  }
  return best;
}

AddedTokens::AddedTokens(const nlohmann::json& j, const std::string& where,
                         const std::function<std::string(const std::string&)>& normalize,
                         const std::function<std::optional<int32_t>(const std::string&)>& model_id) {
  if (j.is_null()) return;
  if (!j.is_array()) input_error("{}: expected an array of tokens, found {}", where, j.type_name());
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", where, i);
    AddedToken t;
    t.id = json_get<int32_t>(j[i], "id", at);
    if (t.id < 0) input_error("{}: negative id {}", at, t.id);
    t.content = json_get<std::string>(j[i], "content", at);
    t.single_word = json_get<bool>(j[i], "single_word", at, false);
    t.lstrip = json_get<bool>(j[i], "lstrip", at, false);
    t.rstrip = json_get<bool>(j[i], "rstrip", at, false);
    t.special = json_get<bool>(j[i], "special", at, false);
    t.normalized = json_get<bool>(j[i], "normalized", at, !t.special);
    if (t.content.empty()) continue;  // tokenizers ignores them
    if (const auto id = model_id(t.content)) t.id = *id;  // a token of the model's keeps its id there
    const auto index = static_cast<int32_t>(tokens_.size());
    if (t.normalized) {
      const std::string form = normalize(t.content);
      if (!form.empty()) normalized_.insert(form, index);
    } else {
      raw_.insert(t.content, index);
    }
    tokens_.push_back(std::move(t));
  }
}

void AddedTokens::split(std::string_view text, bool normalized,
                        const std::function<void(std::string_view, int32_t)>& on_part) const {
  const Trie& trie = normalized ? normalized_ : raw_;
  size_t done = 0;  // text[0, done) is given out
  for (size_t i = 0; i < text.size();) {
    if (!trie.first_byte[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    const auto [length, index] = trie.longest(text, i);
    if (index < 0) {
      ++i;
      continue;
    }
    const AddedToken& t = tokens_[size_t(index)];
    size_t start = i, stop = i + length;
    i = stop;  // the next search starts after this match, kept or not
    if (t.single_word) {
      const bool word_before = start > 0 && is_word_char(last_code_point(text.substr(0, start)));
      const bool word_after = stop < text.size() && is_word_char(first_code_point(text.substr(stop)));
      if (word_before || word_after) continue;
    }
    if (t.lstrip) {
      size_t s = start;
      while (s > done) {
        size_t b = s - 1;
        while (b > done && (static_cast<uint8_t>(text[b]) & 0xC0) == 0x80) --b;
        if (!is_white_space(first_code_point(text.substr(b)))) break;
        s = b;
      }
      start = s;
    }
    if (t.rstrip) {
      const auto* s = reinterpret_cast<const uint8_t*>(text.data());
      for (size_t len; stop < text.size() && is_white_space(next_code_point(s, text.size(), stop, &len));) stop += len;
      i = std::max(i, stop);
    }
    if (done < start) on_part(text.substr(done, start - done), -1);
    on_part(text.substr(start, stop - start), t.id);
    done = stop;
  }
  if (done < text.size()) on_part(text.substr(done), -1);
}

}  // namespace meg
