// Python's random.Random, as far as lm-evaluation-harness's few-shot sampler uses it: seeded with
// an integer, Random(seed).sample(population, k) picks the same elements in the same order as
// CPython 3 does (the Mersenne Twister seeded through init_by_array, _randbelow by rejection over
// getrandbits, and sample()'s two algorithms with their switch-over size).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace meg::py {

class Random {
 public:
  explicit Random(int64_t seed);  // random.Random(seed), which seeds with the seed's absolute value

  uint32_t next32();           // genrand_uint32: getrandbits(32)
  uint32_t below(uint32_t n);  // _randbelow(n), n > 0
  // The positions random.sample(range(N), K) returns, in its order (K <= N, N < 2^32).
  std::vector<size_t> sample(size_t n, size_t k);

 private:
  static constexpr int kN = 624;
  std::array<uint32_t, kN> mt_{};
  int index_ = kN;
};

}  // namespace meg::py
