// The 16-bit floating-point formats on the host: bfloat16 and IEEE binary16 (fp16), as bit patterns.
//
// Narrowing rounds to nearest, ties to even, as PyTorch's .to(torch.bfloat16) / .to(torch.float16)
// do, so a tensor meg narrows equals the one PyTorch would write from the same floats. Overflow
// goes to infinity; NaN stays NaN (quiet, sign kept). Widening is exact.
#pragma once

#include <cstdint>
#include <cstring>

namespace meg {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float bf16_to_float(uint16_t h) { return bits_float(uint32_t{h} << 16); }

inline uint16_t float_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;                 // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;                // rounds to beyond 65504: infinity
  if (a < 0x38800000u) {                                      // below 2^-14: a subnormal (or zero)
    // The value in units of 2^-24, rounded to nearest even: shift the 24-bit significand right.
    const int shift = 126 - static_cast<int>(a >> 23);       // 2^(E-127) * 2^24 = m * 2^-(126-E)
    if (shift > 24) return sign;                              // below half the smallest subnormal
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t half = 1u << (shift - 1), rest = m & ((1u << shift) - 1);
    uint32_t r = m >> shift;
    if (rest > half || (rest == half && (r & 1u))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  const uint32_t rebased = a - (112u << 23);
  const uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>(rounded >> 13);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // infinity, NaN
  if (exp == 0) {                                                        // zero, subnormal
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace meg
