#include "core/hash.hpp"

#include <cstring>

#include <fmt/format.h>

#include "core/bytes.hpp"

namespace meg {
namespace {
constexpr uint64_t P1 = 11400714785074694791ULL;
constexpr uint64_t P2 = 14029467366897019727ULL;
constexpr uint64_t P3 = 1609587929392839161ULL;
constexpr uint64_t P4 = 9650029242287828579ULL;
constexpr uint64_t P5 = 2870177450012600261ULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t load64(const uint8_t* p) { return load_unaligned<uint64_t>(p); }
inline uint32_t load32(const uint8_t* p) { return load_unaligned<uint32_t>(p); }
inline uint64_t round(uint64_t acc, uint64_t input) { return rotl(acc + input * P2, 31) * P1; }
inline uint64_t merge(uint64_t acc, uint64_t v) { return (acc ^ round(0, v)) * P1 + P4; }
}  // namespace

Hasher::Hasher(uint64_t seed) : v_{seed + P1 + P2, seed + P2, seed, seed - P1}, seed_(seed) {}

void Hasher::update(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (tail_len_ + n < 32) {
    std::memcpy(tail_ + tail_len_, p, n);
    tail_len_ += n;
    return;
  }
  if (tail_len_ > 0) {
    const size_t take = 32 - tail_len_;
    std::memcpy(tail_ + tail_len_, p, take);
    for (int i = 0; i < 4; ++i) v_[i] = round(v_[i], load64(tail_ + 8 * i));
    p += take;
    n -= take;
    tail_len_ = 0;
  }
  for (; n >= 32; p += 32, n -= 32)
    for (int i = 0; i < 4; ++i) v_[i] = round(v_[i], load64(p + 8 * i));
  std::memcpy(tail_, p, n);
  tail_len_ = n;
}

uint64_t Hasher::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18);
    for (int i = 0; i < 4; ++i) h = merge(h, v_[i]);
  } else {
    h = seed_ + P5;
  }
  h += total_;
  const uint8_t* p = tail_;
  size_t n = tail_len_;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round(0, load64(p)), 27) * P1 + P4;
  if (n >= 4) {
    h = rotl(h ^ (uint64_t(load32(p)) * P1), 23) * P2 + P3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; ++p, --n) h = rotl(h ^ (*p * P5), 11) * P1;
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

uint64_t xxh64(const void* data, size_t n, uint64_t seed) {
  Hasher h(seed);
  h.update(data, n);
  return h.digest();
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace meg
