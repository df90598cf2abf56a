#include "tokenizer/token_index.hpp"

#include <bit>
#include <cstring>

#include "core/hash.hpp"

namespace meg {

size_t TokenIndex::slot_of(std::string_view token, uint64_t h) const {
  const size_t mask = slots_.size() - 1;
  const auto high = static_cast<uint32_t>(h >> 32);
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id < 0) return i;
    if (s.hash == high && s.key_len == token.size() && std::memcmp(keys_.data() + s.key, token.data(), token.size()) == 0)
      return i;
  }
}

int32_t TokenIndex::find(std::string_view token) const {
  return slots_[slot_of(token, short_string_hash(token))].id;
}

bool TokenIndex::insert(std::string_view token, int32_t id) {
  if (2 * (used_ + 1) > slots_.size()) rehash(slots_.size() * 2);
  const uint64_t h = short_string_hash(token);
  Slot& s = slots_[slot_of(token, h)];
  if (s.id >= 0) return false;
  s = {static_cast<uint32_t>(h >> 32), static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(token.size()), id};
  keys_.append(token);
  ++used_;
  return true;
}

void TokenIndex::reserve(size_t tokens) {
  if (2 * tokens > slots_.size()) rehash(std::bit_ceil(2 * tokens));
}

void TokenIndex::rehash(size_t slots) {
  std::vector<Slot> old(slots);
  old.swap(slots_);
  for (const Slot& s : old) {
    if (s.id < 0) continue;
    const std::string_view key = std::string_view(keys_).substr(s.key, s.key_len);
    slots_[slot_of(key, short_string_hash(key))] = s;
  }
}

}  // namespace meg
