#include "tokenizer/word_cache.hpp"

#include <atomic>
#include <cstring>
#include <memory>

#include "core/hash.hpp"

namespace meg {

size_t WordCache::slot_of(std::string_view w, uint64_t h) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.hash == 0) return i;
    if (s.hash == h && s.key_len == w.size() && std::memcmp(keys_.data() + s.key, w.data(), w.size()) == 0)
      return i;
  }
}

std::optional<std::span<const int32_t>> WordCache::find(std::string_view word) const {
  const Slot& s = slots_[slot_of(word, short_string_hash(word))];
  if (s.hash == 0) return std::nullopt;
  return std::span<const int32_t>(ids_.data() + s.ids, s.ids_len);
}

void WordCache::insert(std::string_view word, std::span<const int32_t> ids) {
  if (word.size() > kMaxWordBytes) return;
  if (used_ >= kMaxWords || keys_.size() + ids_.size() * 4 >= kMaxArenaBytes) clear();
  if (2 * (used_ + 1) > slots_.size()) grow();
  const uint64_t h = short_string_hash(word);
  Slot& s = slots_[slot_of(word, h)];
  if (s.hash != 0) return;  // already there
  s = {h, uint32_t(keys_.size()), uint32_t(word.size()), uint32_t(ids_.size()), uint32_t(ids.size())};
  keys_.append(word);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  ++used_;
}

void WordCache::grow() {
  std::vector<Slot> old(slots_.size() * 2);
  old.swap(slots_);
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.hash == 0) continue;
    size_t i = s.hash & mask;
    while (slots_[i].hash != 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

void WordCache::clear() {
  slots_.assign(1024, Slot{});
  keys_.clear();
  ids_.clear();
  used_ = 0;
}

WordCache& WordCache::for_thread(uint64_t owner) {
  // Few tokenizers live at once; a small list per thread, found by the owner's unique id (never an
  // address, which a later tokenizer could reuse).
  thread_local std::vector<std::pair<uint64_t, std::unique_ptr<WordCache>>> caches;
  for (auto& [id, cache] : caches)
    if (id == owner) return *cache;
  if (caches.size() >= 8) caches.erase(caches.begin());
  caches.emplace_back(owner, std::make_unique<WordCache>());
  return *caches.back().second;
}

uint64_t WordCache::new_owner_id() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

}  // namespace meg
