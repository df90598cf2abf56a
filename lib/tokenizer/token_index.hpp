// A vocabulary's ids by their tokens' text. The encoders look tokens up on every piece they
// encode (whole words in WordPiece, ignore_merges in BPE), so this is an open-addressing table
// over one arena of the tokens' bytes: a lookup takes a string_view, allocates nothing and reads
// one slot and one key; the table of a 30k-256k vocabulary stays in the cache.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meg {

class TokenIndex {
 public:
  // Adds TOKEN with ID (>= 0); false, changing nothing, when TOKEN is already there.
  bool insert(std::string_view token, int32_t id);
  // The id of TOKEN, or -1.
  int32_t find(std::string_view token) const;
  size_t size() const { return used_; }
  void reserve(size_t tokens);

 private:
  struct Slot {
    uint32_t hash = 0;  // the hash's upper half, checked before the key
    uint32_t key = 0, key_len = 0;
    int32_t id = -1;  // -1: empty
  };
  size_t slot_of(std::string_view token, uint64_t h) const;  // its slot, or the empty one it would take
  void rehash(size_t slots);

  std::vector<Slot> slots_ = std::vector<Slot>(16);  // a power of two, at most half full
  std::string keys_;
  size_t used_ = 0;
};

}  // namespace meg
