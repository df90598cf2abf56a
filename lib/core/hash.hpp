// XXH64, the 64-bit xxHash: a fast non-cryptographic checksum for fingerprints of inputs and
// options (blends, stage caches) and for detecting torn or corrupt files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/bytes.hpp"

namespace meg {

// Streaming XXH64: feed update() any number of times, then digest().
class Hasher {
 public:
  explicit Hasher(uint64_t seed = 0);
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  template <typename T>
  void update_value(const T& v) { update(&v, sizeof(T)); }
  uint64_t digest() const;

 private:
  uint64_t v_[4];
  uint64_t total_ = 0, seed_;
  uint8_t tail_[32];
  size_t tail_len_ = 0;
};

uint64_t xxh64(const void* data, size_t n, uint64_t seed = 0);

// A hash for tables keyed by short strings (words, tokens): eight bytes at a time with
// multiply-xorshift mixing, the last few read by overlapping loads rather than a loop, which beats
// XXH64 on strings of a few bytes. Never 0 (the low bit is set), so tables can mark empty slots
// with 0.
inline uint64_t short_string_hash(std::string_view w) {
  const auto* p = reinterpret_cast<const uint8_t*>(w.data());
  const size_t n = w.size();
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ (n * 0xff51afd7ed558ccdULL);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    h = (h ^ load_unaligned<uint64_t>(p + i)) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
  }
  // The R < 8 bytes left, which with the length mixed in above these determine.
  const size_t r = n - i;
  uint64_t tail = 0;
  if (r >= 4) tail = load_unaligned<uint32_t>(p + i) | uint64_t(load_unaligned<uint32_t>(p + n - 4)) << 32;
  else if (r > 0) tail = p[i] | uint64_t(p[i + r / 2]) << 8 | uint64_t(p[n - 1]) << 16;
  h = (h ^ tail) * 0x94d049bb133111ebULL;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 32;
  return h | 1;
}
std::string hex64(uint64_t v);  // 16 lowercase hex digits

}  // namespace meg
