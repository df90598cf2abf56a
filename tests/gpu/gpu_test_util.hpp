// Helpers shared by the GPU tests: device buffers of any element type, random test data, and the
// element-wise closeness check against a CPU reference computed in double.
//
// Method, for every kernel test:
//   - random non-zero inputs (fixed seed), made in fp32 and, for bf16/fp16 kernels, rounded to the
//     activation type first (round_to<X>) so the CPU reference sees exactly the values the GPU sees;
//   - outputs the kernel writes are poisoned with NaN (all bytes 0xFF) before the launch, so an
//     element the kernel forgets to write fails the check instead of passing as a stale value;
//   - accumulated gradient outputs are pre-filled with random values, checking that they accumulate;
//   - the reference is meg::cpu::* instantiated for double on the same (widened) inputs;
//   - each element must satisfy |gpu - ref| <= rtol * scale, where scale is the magnitude of the
//     terms the element is made of, not |ref| alone (plus subnormal_error<X>() for outputs of type
//     X). NaN never passes;
//   - kernels that promise the same bits on every run are run twice and compared with same_bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "catch.hpp"
#include "ops/cuda/check.hpp"

namespace meg::test {

// fp32 <-> X conversions on the host.
template <typename X>
X to_x(float v) {
  if constexpr (std::is_same_v<X, float>) return v;
  else if constexpr (std::is_same_v<X, __nv_bfloat16>) return __float2bfloat16(v);
  else return __float2half(v);
}
template <typename X>
float from_x(X v) {
  if constexpr (std::is_same_v<X, float>) return v;
  else if constexpr (std::is_same_v<X, __nv_bfloat16>) return __bfloat162float(v);
  else return __half2float(v);
}

// v rounded to X and back: the values a kernel of type X really sees.
template <typename X>
std::vector<float> round_to(std::vector<float> v) {
  for (auto& x : v) x = from_x<X>(to_x<X>(x));
  return v;
}

// The unit roundoff of X (half an ulp at 1): what one rounding to X costs, relatively.
template <typename X>
constexpr double unit_roundoff() {
  if constexpr (std::is_same_v<X, float>) return 0x1p-24;
  else if constexpr (std::is_same_v<X, __nv_bfloat16>) return 0x1p-8;
  else return 0x1p-11;
}

// The absolute error of one rounding to X where the result is subnormal: half the spacing of X's
// subnormals. fp16's start below 6.1e-5, within reach of products of test values, and no relative
// bound covers them, so the checks of X outputs add this to their bound.
template <typename X>
constexpr double subnormal_error() {
  if constexpr (std::is_same_v<X, float>) return 0x1p-150;
  else if constexpr (std::is_same_v<X, __nv_bfloat16>) return 0x1p-134;
  else return 0x1p-25;
}

template <typename X>
const char* type_name() {
  if constexpr (std::is_same_v<X, float>) return "fp32";
  else if constexpr (std::is_same_v<X, __nv_bfloat16>) return "bf16";
  else return "fp16";
}

// Random values in [lo, hi], never exactly zero.
inline std::vector<float> random_floats(size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = dist(rng);
    while (x == 0.0f);
  }
  return v;
}

inline std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Per output (n, o) of x[N, C] @ W[OC, C]^T + bias[OC]: the sum of the absolute values of its
// terms and of the bias, the natural scale of a product's rounding error (whatever order the
// terms are added in).
template <typename T>
std::vector<double> product_error_scale(const std::vector<T>& x, const std::vector<float>& W,
                                        const std::vector<float>& bias, int N, int C, int OC) {
  std::vector<double> s(size_t(N) * OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double a = std::abs(double(bias[o]));
      for (int c = 0; c < C; ++c) a += std::abs(double(x[size_t(n) * C + c]) * W[size_t(o) * C + c]);
      s[size_t(n) * OC + o] = a;
    }
  return s;
}

// A device array of n elements of T, freed on scope exit. Host data goes in and comes out as
// float (converted to and from T), or as T itself through the raw overloads.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    MEG_CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<float>& v) : DeviceBuffer(v.size()) { upload(v); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }

  void upload(const std::vector<float>& v) {
    REQUIRE(v.size() == n_);
    std::vector<T> x(n_);
    for (size_t i = 0; i < n_; ++i) {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16> ||
                    std::is_same_v<T, __half>)
        x[i] = to_x<T>(v[i]);
      else
        x[i] = static_cast<T>(v[i]);
    }
    upload_raw(x);
  }
  void upload_raw(const std::vector<T>& v) {
    REQUIRE(v.size() == n_);
    MEG_CUDA_CHECK(cudaMemcpy(p_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  void poison() { MEG_CUDA_CHECK(cudaMemset(p_, 0xFF, n_ * sizeof(T))); }  // NaN for float types
  std::vector<T> download_raw() const {
    MEG_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> v(n_);
    MEG_CUDA_CHECK(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  std::vector<float> download() const {
    const auto x = download_raw();
    std::vector<float> v(n_);
    for (size_t i = 0; i < n_; ++i) {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16> ||
                    std::is_same_v<T, __half>)
        v[i] = from_x<T>(x[i]);
      else
        v[i] = static_cast<float>(x[i]);
    }
    return v;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

// Every element: |got - want| <= rtol * scale[i]. Reports the count and the worst offender.
inline void check_close(const std::string& what, const std::vector<float>& got,
                        const std::vector<double>& want, const std::vector<double>& scale,
                        double rtol) {
  REQUIRE(got.size() == want.size());
  REQUIRE(scale.size() == want.size());
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - want[i]);
    const double bound = rtol * scale[i];
    if (!(err <= bound)) {  // also catches NaN
      ++bad;
      const double ratio = std::isnan(err) ? INFINITY : err / bound;
      if (bad == 1 || ratio > worst_ratio) worst_ratio = ratio, worst = i;
    }
  }
  INFO(what << ": " << bad << " of " << got.size() << " elements out of bounds; worst at " << worst
            << ": got " << (got.empty() ? 0.0f : got[worst]) << ", want "
            << (want.empty() ? 0.0 : want[worst]) << ", bound "
            << (scale.empty() ? 0.0 : rtol * scale[worst]));
  CHECK(bad == 0);
}

// The same bound for every element: rtol * scale.
inline void check_close(const std::string& what, const std::vector<float>& got,
                        const std::vector<double>& want, double scale, double rtol) {
  check_close(what, got, want, std::vector<double>(want.size(), scale), rtol);
}

// check_close for outputs of type X: rtol * scale, plus subnormal_error<X>(), for each element.
template <typename X>
void check_close_x(const std::string& what, const std::vector<float>& got,
                   const std::vector<double>& want, std::vector<double> scale, double rtol) {
  for (auto& s : scale) s += subnormal_error<X>() / rtol;
  check_close(what, got, want, scale, rtol);
}

// Two downloads equal bit for bit (no float comparison: NaN != NaN and -0 == 0).
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Relative L2 error ||got - want|| / ||want||, for kernels whose per-element bounds are loose by
// nature (bf16 attention): METHOD's figure of merit.
inline double relative_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace meg::test
