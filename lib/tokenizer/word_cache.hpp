// A per-thread memo of word -> token ids. Natural text repeats a small set of words, so tokenizers
// that encode word by word (GPT-2 BPE, SentencePiece between spaces) do the expensive work once
// per distinct word and then only hash. One cache per thread keeps the hot path free of locks.
//
// It is an open-addressing table over two arenas (the words' bytes, their ids): a lookup is a hash,
// one or two probes and a compare, with no allocation and no pointer chasing.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meg {

class WordCache {
 public:
  // Appends WORD's ids to OUT: the cached ones, or else those ENCODE(OUT) appends, remembered.
  template <typename Encode>
  void encode(std::string_view word, std::vector<int32_t>& out, Encode&& encode) {
    if (const auto hit = find(word)) {
      out.insert(out.end(), hit->begin(), hit->end());
      return;
    }
    const size_t start = out.size();
    encode(out);
    insert(word, std::span<const int32_t>(out).subspan(start));
  }
  // Ids of WORD if cached: a view valid until the next insert().
  std::optional<std::span<const int32_t>> find(std::string_view word) const;
  // Remembers WORD's ids (words longer than kMaxWordBytes are not kept: they rarely repeat).
  void insert(std::string_view word, std::span<const int32_t> ids);
  void clear();
  size_t size() const { return used_; }

  // The cache of this thread for the tokenizer with id OWNER (each tokenizer instance has its own).
  static WordCache& for_thread(uint64_t owner);
  static uint64_t new_owner_id();

  static constexpr size_t kMaxWordBytes = 256;

 private:
  struct Slot {
    uint64_t hash = 0;  // 0: empty (real hashes have the low bit set)
    uint32_t key = 0, key_len = 0, ids = 0, ids_len = 0;  // offsets and lengths in the arenas
  };
  size_t slot_of(std::string_view word, uint64_t h) const;  // its slot, or the empty one it would take
  void grow();

  // Bounds on memory for endless vocabularies (hashes, identifiers): past them the cache starts over.
  static constexpr size_t kMaxWords = 1 << 20;
  static constexpr size_t kMaxArenaBytes = size_t(64) << 20;

  std::vector<Slot> slots_ = std::vector<Slot>(1024);  // a power of two, at most half full
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t used_ = 0;
};

}  // namespace meg
