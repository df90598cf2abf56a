#include "data/word_cache.hpp"

#include <atomic>
#include <memory>

namespace meg {

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
