// Eight floats as one value (GCC's vector extension), for the CPU ops that vectorize by hand what
// the compiler will not: sums over a row, whose order ISO C++ keeps. Where a function is built for
// AVX2 a value is one AVX register, elsewhere two SSE registers, with the same lane-by-lane
// arithmetic either way. Values go in and out by reference: returning them by value changes the
// calling convention between the two builds.
#pragma once

#include <cstring>

// A function marked MEG_TARGET_AVX2 is compiled for AVX2 (on x86; elsewhere as any other), and
// has_avx2() says whether this machine may call it: the ops build such a copy beside a portable one
// and choose between them at run time.
#if defined(__x86_64__) || defined(__i386__)
#define MEG_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define MEG_TARGET_AVX2
#endif

namespace meg::cpu::detail {

inline bool has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
#else
  return false;
#endif
}

typedef float Lanes __attribute__((vector_size(32)));
constexpr int kLanes = 8;

// The eight floats at P (any alignment).
__attribute__((always_inline)) inline void load_lanes(Lanes& v, const float* p) { std::memcpy(&v, p, sizeof(v)); }

// The lanes added in order, 0 to 7.
__attribute__((always_inline)) inline float sum_lanes(const Lanes& v) {
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += v[l];
  return s;
}

// sum over i < n of a[i] * b[i]: eight lanes over the whole vectors, then the last n % 8 products
// in order.
__attribute__((always_inline)) inline float dot_lanes(const float* a, const float* b, int n) {
  const int whole = n / kLanes * kLanes;
  Lanes acc = {};
  for (int i = 0; i < whole; i += kLanes) {
    Lanes x, y;
    load_lanes(x, a + i);
    load_lanes(y, b + i);
    acc += x * y;
  }
  float s = sum_lanes(acc);
  for (int i = whole; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace meg::cpu::detail
