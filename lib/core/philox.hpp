// Philox4x32-10, the counter-based random number generator of Salmon, Moraes, Dror and Shaw
// ("Parallel random numbers: as easy as 1, 2, 3", SC 2011), as Random123, cuRAND
// (curand_Philox4x32_10), PyTorch and JAX implement it. It is a keyed bijection of a 128-bit
// counter: the numbers for counter c are a pure function of (c, key), with no state to carry from
// one to the next, so any element of a stream can be computed on its own, by any thread or process,
// in any order. It passes TestU01's BigCrush (as the paper reports).
//
// Ten rounds of: (c0, c1, c2, c3) -> (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1, lo(M0 c0))
// with the 64-bit products M0 c0 and M1 c2 split into 32-bit halves, and the key bumped by the Weyl
// constants (W0, W1) before every round after the first. The result matches Random123's
// tests/kat_vectors (checked in tests/unit/test_core.cpp).
#pragma once

#include <array>
#include <cstdint>

namespace meg {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

constexpr PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  constexpr uint64_t M0 = 0xD2511F53, M1 = 0xCD9E8D57;
  constexpr uint32_t W0 = 0x9E3779B9, W1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += W0;
      k[1] += W1;
    }
    const uint64_t p0 = M0 * c[0], p1 = M1 * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
  }
  return c;
}

}  // namespace meg
