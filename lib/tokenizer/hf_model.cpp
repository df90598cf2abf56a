#include "tokenizer/hf_model.hpp"

#include <unordered_map>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/utf8.hpp"
#include "tokenizer/bpe_merges.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/word_cache.hpp"

namespace meg {

std::optional<int32_t> HfModel::id_of(std::string_view token) const {
  const int32_t id = index_.find(token);
  if (id < 0) return std::nullopt;
  return id;
}

void HfModel::read_vocab(const nlohmann::json& j, const std::string& where) {
  const auto it = j.find("vocab");
  if (it == j.end() || !it->is_object()) input_error("{}: \"vocab\" must be an object of token -> id", where);
  index_.reserve(it->size());
  for (const auto& [token, value] : it->items()) {
    const auto id = json_as<int32_t>(value, fmt::format("{}: vocab token {}", where, nlohmann::json(token).dump()));
    if (id < 0) input_error("{}: vocab token {} has the negative id {}", where, nlohmann::json(token).dump(), id);
    if (id >= int64_t(it->size()) * 4 + 1024)  // ids past the vocabulary's size would allocate without bound
      input_error("{}: vocab token {} has id {}, far past the {} tokens", where, nlohmann::json(token).dump(), id,
                  it->size());
    if (size_t(id) >= tokens_.size()) tokens_.resize(size_t(id) + 1);
    if (!tokens_[id].empty() || index_.find(token) >= 0)
      input_error("{}: vocab id {} is given twice (tokens {} and {})", where, id, nlohmann::json(tokens_[id]).dump(),
                  nlohmann::json(token).dump());
    tokens_[id] = token;
    index_.insert(token, id);
  }
}

int32_t HfModel::required_id(const std::string& name, const std::string& key, const std::string& where) const {
  const auto id = id_of(name);
  if (!id) input_error("{}: {} {} is not in the vocabulary", where, key, nlohmann::json(name).dump());
  return *id;
}

namespace {

class Bpe final : public HfModel {
 public:
  Bpe(const nlohmann::json& j, const std::string& where) {
    read_vocab(j, where);
    if (j.contains("dropout") && !j["dropout"].is_null() && json_as<double>(j["dropout"], where + ": dropout") != 0.0)
      input_error("{}: BPE dropout samples its merges; meg encodes deterministically (dropout must be null)", where);
    prefix_ = json_get<std::string>(j, "continuing_subword_prefix", where, "");
    suffix_ = json_get<std::string>(j, "end_of_word_suffix", where, "");
    byte_fallback_ = json_get<bool>(j, "byte_fallback", where, false);
    fuse_unk_ = json_get<bool>(j, "fuse_unk", where, false);
    ignore_merges_ = json_get<bool>(j, "ignore_merges", where, false);
    if (const std::string unk = json_get<std::string>(j, "unk_token", where, ""); !unk.empty())
      unk_ = required_id(unk, "unk_token", where);
    read_merges(j, where);
    index_chars();
    if (byte_fallback_)
      for (int b = 0; b < 256; ++b) byte_token_[b] = id_of(fmt::format("<0x{:02X}>", b)).value_or(-1);
    split_at_space_runs_ = splits_at_space_runs();
  }

  bool byte_input(const std::string& where) override {
    if (!prefix_.empty() || !suffix_.empty()) return false;
    const auto chars = byte_level_chars();
    for (int b = 0; b < 256; ++b) {
      std::string c;
      append_utf8(c, chars[b]);
      const auto id = id_of(c);
      if (!id) input_error("{}: the vocabulary has no token for byte 0x{:02x} (\"{}\")", where, b, c);
      byte_id_[b] = *id;
    }
    // The tokens as the bytes they stand for, for ignore_merges' whole-piece lookups.
    for (size_t id = 0; id < tokens_.size(); ++id)
      if (std::string bytes; !tokens_[id].empty() && append_byte_level_bytes(tokens_[id], bytes))
        byte_ids_.insert(bytes, static_cast<int32_t>(id));
    bytes_ = true;
    split_at_space_runs_ = false;
    return true;
  }

  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override {
    if (piece.empty()) return;
    if (ignore_merges_) {
      const TokenIndex& whole = bytes_ ? byte_ids_ : index_;
      if (const int32_t id = whole.find(piece); id >= 0) {
        out.push_back(id);
        return;
      }
    }
    if (!split_at_space_runs_) return tokenize_word(piece, out);
    // Words: a run of U+2581 and what follows it up to the next run.
    size_t begin = 0;
    for (size_t at = piece.find(kSpace, 1); at != std::string_view::npos; at = piece.find(kSpace, at + 1)) {
      if (piece.substr(0, at).ends_with(kSpace)) continue;
      tokenize_word(piece.substr(begin, at - begin), out);
      begin = at;
    }
    tokenize_word(piece.substr(begin), out);
  }

 private:
  static constexpr std::string_view kSpace = "\u2581";

  void tokenize_word(std::string_view piece, std::vector<int32_t>& out) const {
    WordCache::for_thread(cache_owner_).encode(piece, out, [&](std::vector<int32_t>& ids) {
      thread_local std::vector<int32_t> symbols;
      symbols.clear();
      if (bytes_) {
        for (const char c : piece) symbols.push_back(byte_id_[static_cast<uint8_t>(c)]);
      } else {
        initial_symbols(piece, symbols);
      }
      merges_.apply(symbols);
      ids.insert(ids.end(), symbols.begin(), symbols.end());
    });
  }

  // Whether a piece may be cut before each run of U+2581 and its words merged one at a time, from
  // the cache: where no token holds the character but in a run at its start (SentencePiece-style
  // vocabularies, which tokenizers merges over whole texts), no merge crosses such a cut, so the
  // ids are the same; the character must be a token, or an unknown run could cross it.
  bool splits_at_space_runs() const {
    if (bytes_ || ignore_merges_ || !prefix_.empty() || !suffix_.empty() || !id_of(kSpace)) return false;
    for (const std::string& token : tokens_) {
      size_t lead = 0;
      while (token.compare(lead, kSpace.size(), kSpace) == 0) lead += kSpace.size();
      if (token.find(kSpace, lead) != std::string::npos) return false;
    }
    return true;
  }

  void read_merges(const nlohmann::json& j, const std::string& where) {
    const auto it = j.find("merges");
    if (it == j.end() || !it->is_array()) input_error("{}: \"merges\" must be an array", where);
    merges_.reserve(it->size());
    for (size_t rank = 0; rank < it->size(); ++rank) {
      const auto& m = (*it)[rank];
      const std::string at = fmt::format("{}: merges[{}]", where, rank);
      std::string left, right;
      if (m.is_string()) {
        const std::string line = m.get<std::string>();
        const size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
          input_error("{}: expected two tokens separated by one space, got {}", at, m.dump());
        left = line.substr(0, space), right = line.substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get<std::string>(), right = m[1].get<std::string>();
      } else {
        input_error("{}: expected \"a b\" or [\"a\", \"b\"], got {}", at, m.dump());
      }
      // The merged token is the left one and the right one without its subword prefix.
      if (right.size() < prefix_.size())
        input_error("{}: {} is shorter than the continuing_subword_prefix", at, nlohmann::json(right).dump());
      const int32_t a = merge_id(left, at), b = merge_id(right, at);
      merges_.add(a, b, merge_id(left + right.substr(prefix_.size()), at));
    }
  }

  int32_t merge_id(const std::string& token, const std::string& at) const {
    const auto id = id_of(token);
    if (!id) input_error("{}: token {} is not in the vocabulary", at, nlohmann::json(token).dump());
    return *id;
  }

  // The piece's characters as tokens, as tokenizers' merge_word.
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
    const auto* s = reinterpret_cast<const uint8_t*>(piece.data());
    int32_t pending_unk = -1;  // an unknown run waiting to see whether the next is unknown too
    thread_local std::string ch;
    const bool plain = prefix_.empty() && suffix_.empty();
    for (size_t i = 0, len; i < piece.size(); i += len) {
      const uint32_t cp = next_code_point(s, piece.size(), i, &len);
      int32_t id = -1;
      if (plain) {
        ch.assign(piece.substr(i, len));
        id = char_id(cp);
      } else {
        ch.clear();
        if (i > 0) ch += prefix_;
        ch.append(piece.substr(i, len));
        if (i + len == piece.size()) ch += suffix_;
        id = index_.find(ch);
      }
      if (id >= 0) {
        if (pending_unk >= 0) symbols.push_back(pending_unk), pending_unk = -1;
        symbols.push_back(id);
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (const char c : ch) all = all && byte_token_[static_cast<uint8_t>(c)] >= 0;
        if (all) {
          for (const char c : ch) symbols.push_back(byte_token_[static_cast<uint8_t>(c)]);
          continue;
        }
      }
      if (unk_ < 0) continue;  // no unk_token: the character is dropped, as tokenizers drops it
      if (pending_unk >= 0 && !fuse_unk_) symbols.push_back(pending_unk);
      pending_unk = unk_;
    }
    if (pending_unk >= 0) symbols.push_back(pending_unk);
  }

  // The token of the single character CP, -1 when it has none: a table for the BMP, which nearly
  // all text stays in, then the map.
  int32_t char_id(uint32_t cp) const {
    if (cp < char_ids_.size()) return char_ids_[cp];
    const auto it = astral_ids_.find(cp);
    return it == astral_ids_.end() ? -1 : it->second;
  }
  void index_chars() {
    char_ids_.assign(0x10000, -1);
    for (size_t id = 0; id < tokens_.size(); ++id) {
      const std::string& token = tokens_[id];
      size_t len = 0;
      if (token.empty()) continue;
      const uint32_t cp = next_code_point(reinterpret_cast<const uint8_t*>(token.data()), token.size(), 0, &len);
      if (len != token.size() || (cp == 0xFFFD && token != "\uFFFD")) continue;
      if (cp < char_ids_.size()) char_ids_[cp] = static_cast<int32_t>(id);
      else astral_ids_.emplace(cp, static_cast<int32_t>(id));
    }
  }

  std::string prefix_, suffix_;
  std::vector<int32_t> char_ids_;
  std::unordered_map<uint32_t, int32_t> astral_ids_;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false, bytes_ = false;
  bool split_at_space_runs_ = false;  // see splits_at_space_runs()
  int32_t unk_ = -1;
  BpeMerges merges_;
  std::array<int32_t, 256> byte_token_{};  // <0xNN> of each byte (byte_fallback), -1 if absent
  std::array<int32_t, 256> byte_id_{};     // with byte input: each byte's character's token
  TokenIndex byte_ids_;  // with byte input: tokens by their bytes
  uint64_t cache_owner_ = WordCache::new_owner_id();
};

class WordPiece final : public HfModel {
 public:
  WordPiece(const nlohmann::json& j, const std::string& where) {
    read_vocab(j, where);
    prefix_ = json_get<std::string>(j, "continuing_subword_prefix", where, "##");
    max_chars_ = json_get<int64_t>(j, "max_input_chars_per_word", where, 100);
    unk_ = required_id(json_get<std::string>(j, "unk_token", where, "[UNK]"), "unk_token", where);
  }

  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override {
    // Most words are tokens, the first match the greedy search would find (a piece of no more
    // bytes than max_input_chars_per_word has no more characters either).
    if (!piece.empty() && int64_t(piece.size()) <= max_chars_)
      if (const int32_t id = index_.find(piece); id >= 0) {
        out.push_back(id);
        return;
      }
    WordCache::for_thread(cache_owner_).encode(piece, out, [&](std::vector<int32_t>& ids) { split(piece, ids); });
  }

 private:
  // Greedy longest-match-first, as tokenizers' WordPiece.
  void split(std::string_view piece, std::vector<int32_t>& out) const {
    const auto* s = reinterpret_cast<const uint8_t*>(piece.data());
    int64_t chars = 0;
    for (size_t i = 0, len; i < piece.size(); i += len) next_code_point(s, piece.size(), i, &len), ++chars;
    if (chars > max_chars_) {
      out.push_back(unk_);
      return;
    }
    const size_t mark = out.size();
    thread_local std::string sub;
    for (size_t start = 0; start < piece.size();) {
      size_t end = piece.size();
      int32_t found = -1;
      while (start < end) {
        sub.assign(start > 0 ? prefix_ : "").append(piece.substr(start, end - start));
        if ((found = index_.find(sub)) >= 0) break;
        do --end;  // back by one character
        while (end > start && (s[end] & 0xC0) == 0x80);
      }
      if (found < 0) {
        out.resize(mark);
        out.push_back(unk_);
        return;
      }
      out.push_back(found);
      start = end;
    }
  }

  std::string prefix_;
  int64_t max_chars_ = 100;
  int32_t unk_ = -1;
  uint64_t cache_owner_ = WordCache::new_owner_id();
};

class WordLevel final : public HfModel {
 public:
  WordLevel(const nlohmann::json& j, const std::string& where) {
    read_vocab(j, where);
    unk_ = required_id(json_get<std::string>(j, "unk_token", where, "<unk>"), "unk_token", where);
  }
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override {
    const int32_t id = index_.find(piece);
    out.push_back(id < 0 ? unk_ : id);
  }

 private:
  int32_t unk_ = -1;
};

}  // namespace

std::unique_ptr<HfModel> HfModel::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) input_error("{}: expected the model object, found {}", where, j.type_name());
  // Older files leave out "type"; tokenizers then tells the model by its keys.
  std::string type = json_get<std::string>(j, "type", where, "");
  if (type.empty()) type = j.contains("merges") ? "BPE" : j.contains("continuing_subword_prefix") ? "WordPiece" : "";
  if (type == "BPE") return std::make_unique<Bpe>(j, where);
  if (type == "WordPiece") return std::make_unique<WordPiece>(j, where);
  if (type == "WordLevel") return std::make_unique<WordLevel>(j, where);
  if (type == "Unigram")
    input_error("{}: the Unigram model is not supported in tokenizer.json; give the SentencePiece .model file", where);
  input_error("{}: model type \"{}\" is not supported (supported: BPE, WordPiece, WordLevel)", where, type);
}

}  // namespace meg
