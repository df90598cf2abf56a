#include "eval/python_random.hpp"

#include <bit>
#include <cmath>
#include <stdexcept>
#include <unordered_set>

namespace meg::py {

Random::Random(int64_t seed) {
  // init_genrand(19650218), then init_by_array over the 32-bit words of |seed|, low word first
  // (CPython's random_seed for an int).
  const uint64_t a = seed < 0 ? 0 - static_cast<uint64_t>(seed) : static_cast<uint64_t>(seed);
  std::vector<uint32_t> key = {static_cast<uint32_t>(a)};
  if (a >> 32) key.push_back(static_cast<uint32_t>(a >> 32));
  mt_[0] = 19650218u;
  for (int i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  size_t i = 1, j = 0;
  for (size_t k = std::max<size_t>(kN, key.size()); k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<uint32_t>(j);
    if (++i >= kN) mt_[0] = mt_[kN - 1], i = 1;
    if (++j >= key.size()) j = 0;
  }
  for (size_t k = kN - 1; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    if (++i >= kN) mt_[0] = mt_[kN - 1], i = 1;
  }
  mt_[0] = 0x80000000u;
}

uint32_t Random::next32() {
  constexpr int kM = 397;
  constexpr uint32_t kMatrixA = 0x9908b0dfu, kUpper = 0x80000000u, kLower = 0x7fffffffu;
  if (index_ >= kN) {
    for (int k = 0; k < kN; ++k) {
      const uint32_t y = (mt_[k] & kUpper) | (mt_[(k + 1) % kN] & kLower);
      mt_[k] = mt_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
    }
    index_ = 0;
  }
  uint32_t y = mt_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint32_t Random::below(uint32_t n) {
  // getrandbits(k) with k = n.bit_length() keeps the top k bits of one 32-bit draw.
  const int k = std::bit_width(n);
  for (;;) {
    const uint32_t r = k == 0 ? 0 : next32() >> (32 - k);
    if (r < n) return r;
  }
}

std::vector<size_t> Random::sample(size_t n, size_t k) {
  if (k > n || n >= (size_t{1} << 32)) throw std::invalid_argument("py::Random::sample: bad population or size");
  std::vector<size_t> result(k);
  // CPython keeps a pool list when it is smaller than the set it would otherwise fill.
  size_t setsize = 21;
  if (k > 5) setsize += size_t{1} << (2 * static_cast<int>(std::ceil(std::log(double(k * 3)) / std::log(4.0))));
  if (n <= setsize) {
    std::vector<size_t> pool(n);
    for (size_t i = 0; i < n; ++i) pool[i] = i;
    for (size_t i = 0; i < k; ++i) {
      const size_t j = below(static_cast<uint32_t>(n - i));
      result[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
  } else {
    std::unordered_set<size_t> selected;
    for (size_t i = 0; i < k; ++i) {
      size_t j = below(static_cast<uint32_t>(n));
      while (selected.count(j)) j = below(static_cast<uint32_t>(n));
      selected.insert(j);
      result[i] = j;
    }
  }
  return result;
}

}  // namespace meg::py
