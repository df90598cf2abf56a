// A per-thread memo of word -> token ids. Natural text repeats a small set of words, so tokenizers
// that encode word by word (GPT-2 BPE, SentencePiece between spaces) do the expensive work once
// per distinct word and then only hash. One cache per thread keeps the hot path free of locks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace meg {

class WordCache {
 public:
  // Ids of WORD if cached: a view that stays valid until the next insert().
  const std::span<const int32_t>* find(std::string_view word) const {
    const auto it = index_.find(word);
    return it == index_.end() ? nullptr : &it->second.view;
  }

  void insert(std::string_view word, std::span<const int32_t> ids) {
    if (index_.size() >= kMaxWords) clear();  // bounded memory on endless vocabularies (ids, hashes)
    auto [it, added] = index_.try_emplace(std::string(word));
    if (added) it->second.ids.assign(ids.begin(), ids.end()), it->second.view = it->second.ids;
  }

  void clear() { index_.clear(); }

  // The cache of this thread for the tokenizer with id OWNER (each tokenizer instance has its own).
  static WordCache& for_thread(uint64_t owner);
  static uint64_t new_owner_id();

 private:
  static constexpr size_t kMaxWords = 1 << 20;
  struct Entry {
    std::vector<int32_t> ids;
    std::span<const int32_t> view;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, Entry, Hash, std::equal_to<>> index_;
};

}  // namespace meg
