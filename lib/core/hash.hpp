// XXH64, the 64-bit xxHash: a fast non-cryptographic checksum for fingerprints of inputs and
// options (blends, stage caches) and for detecting torn or corrupt files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

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
std::string hex64(uint64_t v);  // 16 lowercase hex digits

}  // namespace meg
