// numpy's legacy numpy.random.RandomState, as far as Megatron's GPT dataset uses it: seeding with
// an integer, shuffle() and permutation(). Reproducing it bit for bit makes meg-blend's document
// and shuffle indices equal to the ones Megatron-LM builds from the same data and seed.
//
// RandomState(seed) is MT19937 seeded by Matsumoto and Nishimura's init_genrand, which is exactly
// what std::mt19937(seed) does, so the engine is the standard one. What numpy adds on top, and
// what this file reproduces, is how it draws a bounded integer (mask off the bits above the bound
// and retry until the value fits) and its Fisher-Yates walk from the last element down.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace meg {

class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}

  uint32_t next_uint32() { return static_cast<uint32_t>(mt_()); }
  // Two draws, the first one the high half (numpy's mt19937_next64).
  uint64_t next_uint64();

  // Uniform in [0, max] by masked rejection: numpy's random_interval, which shuffle() uses, and
  // what RandomState.randint(0, max + 1) draws.
  uint64_t random_interval(uint64_t max);

  // RandomState.shuffle on a one-dimensional array: swap element i with a random j <= i, for i from
  // the last element down to 1. The draws of a block run ahead of its swaps so that the far element
  // of each swap is already on its way from memory: the same swaps in the same order, several times
  // faster on arrays larger than the cache.
  template <typename T>
  void shuffle(std::span<T> x) {
    constexpr size_t kBlock = 128;
    size_t far[kBlock];
    for (size_t i = x.size(); i > 1;) {
      const size_t count = std::min(kBlock, i - 1);
      for (size_t t = 0; t < count; ++t) {
        far[t] = random_interval(i - 1 - t);
        __builtin_prefetch(&x[far[t]]);
      }
      for (size_t t = 0; t < count; ++t) std::swap(x[i - 1 - t], x[far[t]]);
      i -= count;
    }
  }

 private:
  std::mt19937 mt_;
};

}  // namespace meg
