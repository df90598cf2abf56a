// Reading and writing plain values at any byte address. File formats here are little-endian and
// pack fields without alignment, so values go through memcpy (one unaligned load on x86-64).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace meg {

template <typename T>
T load_unaligned(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Appends V's bytes to OUT (resize + memcpy: GCC 12 misreads insert() of a few bytes as overflow).
template <typename T>
void append_bytes(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

}  // namespace meg
