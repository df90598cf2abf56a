#include "data/numpy_random.hpp"

namespace meg {

uint64_t NumpyRandomState::next_uint64() {
  const uint64_t high = next_uint32();
  return high << 32 | next_uint32();
}

uint64_t NumpyRandomState::random_interval(uint64_t max) {
  if (max == 0) return 0;
  // The smallest all-ones mask covering MAX.
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t value;
  // Bounds that fit in 32 bits take one 32-bit draw per try, wider ones a 64-bit draw.
  if (max <= 0xffffffffULL) {
    while ((value = next_uint32() & mask) > max) {
    }
  } else {
    while ((value = next_uint64() & mask) > max) {
    }
  }
  return value;
}

}  // namespace meg
