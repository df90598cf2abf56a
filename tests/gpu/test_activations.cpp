// The CUDA activations of kernels/gelu.cu and kernels/swiglu.cu against the CPU reference ops, for
// each activation type X (fp32, bf16, fp16). The method is gpu_test_util.hpp's: inputs rounded to
// X, outputs poisoned, a double reference, per-element bounds from the size of the terms.
//
// The bounds. The GPU computes in fp32 from exact inputs and rounds once to X, so each element
// may be off by
//   u_X * |ref|                    the final rounding to X (u_X = unit_roundoff<X>()),
//   + c * u_f32 * terms            the fp32 arithmetic before it, c counted per kernel below,
//   + subnormal_error<X>()         when the rounding underflows into X's subnormals (fp16's start
//                                  at 6e-5, and gelu(-5) is -2e-7).
// terms is the magnitude of what the result is made of, so a sum that cancels is held to the
// accuracy of its parts, not of its tiny total.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

#include "catch.hpp"
#include "gpu/gpu_test_util.hpp"
#include "ops/cpu/ops.hpp"
#include "ops/cuda/ops.hpp"

using namespace meg::test;

namespace {

constexpr double kU32 = 0x1p-24;  // unit roundoff of fp32, the GPU's arithmetic
constexpr double kGeluK = 0.7978845608028654;
constexpr double kGeluA = 0.044715;

// sigmoid(z) and 1 - sigmoid(z) in double, without overflow for any z (as the GPU computes them).
struct SigmoidPair {
  double s, sc;
};
SigmoidPair sigmoid_pair(double z) {
  const double t = std::exp(-std::abs(z)), hi = 1 / (1 + t), lo = t * hi;
  return z >= 0 ? SigmoidPair{hi, lo} : SigmoidPair{lo, hi};
}

// The double reference computes 0.5 x (1 + tanh u), where 1 + tanh u cancels for x < -6: each of
// its terms is off by up to ~2^-53 absolutely, x times that in the result (it returns 0 for
// gelu(-8) = -3e-21, which the GPU's form gets right). Added to every bound as 2^-52 (1 + |x| (1 + du/dx)).
double gelu_reference_error(double x) {
  return 0x1p-52 * (1 + std::abs(x) * (1 + kGeluK * (1 + 3 * kGeluA * x * x)));
}

// GELU is x s with s = sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3). The fp32 u carries a few
// roundings of its largest term, and exp turns that absolute error into a relative one of about
// 2|u| times as many, which reaches s scaled by 1 - s (s saturates at 1 for large x). With the
// exp's own 2 ulps, the division and the product: about 8 (1 + |u| (1 - s)) fp32 roundings of
// the result. Bound with a margin of 2: 16 (1 + |u| (1 - s)).
std::vector<double> gelu_forward_bound(const std::vector<float>& x, const std::vector<double>& ref,
                                       double ux, double tiny) {
  std::vector<double> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i], u = kGeluK * (xi + kGeluA * xi * xi * xi);
    const double sc = sigmoid_pair(2 * u).sc;
    b[i] = (ux + 16 * (1 + std::abs(u) * sc) * kU32) * std::abs(ref[i]) + tiny +
           gelu_reference_error(xi);
  }
  return b;
}

// gelu'(x) dout = (s + 2 x du s (1 - s)) dout: two terms that cancel near x = -0.75. The first has
// the forward's relative error; in the second, s and 1 - s both carry the exp's error, up to
// 2|u| times a few roundings. So 16 roundings of |s| (1 + |u| (1 - s)) + |2 x du s (1 - s)| (1 + |u|),
// times |dout|.
std::vector<double> gelu_backward_bound(const std::vector<float>& x, const std::vector<float>& dout,
                                        const std::vector<double>& ref, double ux, double tiny) {
  std::vector<double> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i], u = kGeluK * (xi + kGeluA * xi * xi * xi);
    const auto [s, sc] = sigmoid_pair(2 * u);
    const double du = kGeluK * (1 + 3 * kGeluA * xi * xi);
    const double terms = s * (1 + std::abs(u) * sc) + std::abs(2 * xi * du * s * sc) * (1 + std::abs(u));
    b[i] = ux * std::abs(ref[i]) + 16 * kU32 * std::abs(double(dout[i])) * terms + tiny +
           gelu_reference_error(xi) * std::abs(double(dout[i]));
  }
  return b;
}

}  // namespace

TEMPLATE_TEST_CASE("CUDA gelu_forward and gelu_backward match the CPU reference",
                   "[gpu][activations]", float, __nv_bfloat16, __half) {
  using X = TestType;
  const double ux = unit_roundoff<X>();
  std::mt19937 rng(91011);
  for (size_t n : {size_t(1), size_t(7), size_t(4097), (size_t(1) << 20) + 3}) {
    INFO(meg::test::type_name<X>() << " n=" << n);
    // [-5, 5] reaches the tails, where the forward underflows towards zero or becomes x.
    auto x = meg::test::round_to<X>(meg::test::random_floats(n, -5.0f, 5.0f, rng));
    // Far tails too: exp(-2u) overflows fp32 at x = -100, where a careless 1 - s gives inf * 0.
    const float tails[] = {-100.0f, -8.0f, 8.0f, 100.0f};
    if (n >= 4) std::copy(std::begin(tails), std::end(tails), x.begin());
    const auto dout = meg::test::round_to<X>(meg::test::random_floats(n, -1.0f, 1.0f, rng));

    std::vector<double> out_ref(n), dinp_ref(n, 0.0);  // the CPU's backward accumulates: from 0
    meg::cpu::gelu_forward(out_ref.data(), widen(x).data(), n);
    meg::cpu::gelu_backward(dinp_ref.data(), widen(dout).data(), widen(x).data(), n);
    const auto fwd_bound = gelu_forward_bound(x, out_ref, ux, subnormal_error<X>());
    const auto bwd_bound = gelu_backward_bound(x, dout, dinp_ref, ux, subnormal_error<X>());

    // Each launch twice on a poisoned output: every element written, the same bits both times.
    DeviceBuffer<X> inp(x), out(n), dy(dout), dinp(n);
    out.poison();
    meg::cuda::gelu_forward(out.get(), inp.get(), n, nullptr);
    const auto out_first = out.download_raw();
    meg::test::check_close("out", out.download(), out_ref, fwd_bound, 1.0);
    out.poison();
    meg::cuda::gelu_forward(out.get(), inp.get(), n, nullptr);
    CHECK(same_bits(out_first, out.download_raw()));

    dinp.poison();
    meg::cuda::gelu_backward(dinp.get(), dy.get(), inp.get(), n, nullptr);
    const auto dinp_first = dinp.download_raw();
    meg::test::check_close("dinp", dinp.download(), dinp_ref, bwd_bound, 1.0);
    dinp.poison();
    meg::cuda::gelu_backward(dinp.get(), dy.get(), inp.get(), n, nullptr);
    CHECK(same_bits(dinp_first, dinp.download_raw()));

    // In place: the backward over dout (before the forward overwrites inp), then the forward.
    meg::cuda::gelu_backward(dy.get(), dy.get(), inp.get(), n, nullptr);
    CHECK(same_bits(dinp_first, dy.download_raw()));
    meg::cuda::gelu_forward(inp.get(), inp.get(), n, nullptr);
    CHECK(same_bits(out_first, inp.download_raw()));
  }
}

TEMPLATE_TEST_CASE("CUDA gelu goes one element at a time on misaligned pointers",
                   "[gpu][activations]", float, __nv_bfloat16, __half) {
  // Views starting one element in: not 16-byte aligned, so no 16-byte accesses.
  using X = TestType;
  const double ux = unit_roundoff<X>();
  std::mt19937 rng(1213);
  const size_t n = 1001;
  const auto x = meg::test::round_to<X>(meg::test::random_floats(n + 1, -5.0f, 5.0f, rng));
  const auto dout = meg::test::round_to<X>(meg::test::random_floats(n + 1, -1.0f, 1.0f, rng));
  const std::vector<float> xv(x.begin() + 1, x.end()), doutv(dout.begin() + 1, dout.end());

  std::vector<double> out_ref(n), dinp_ref(n, 0.0);
  meg::cpu::gelu_forward(out_ref.data(), widen(xv).data(), n);
  meg::cpu::gelu_backward(dinp_ref.data(), widen(doutv).data(), widen(xv).data(), n);

  DeviceBuffer<X> inp(x), out(n + 1), dy(dout), dinp(n + 1);
  out.poison(), dinp.poison();
  meg::cuda::gelu_forward(out.get() + 1, inp.get() + 1, n, nullptr);
  meg::cuda::gelu_backward(dinp.get() + 1, dy.get() + 1, inp.get() + 1, n, nullptr);
  const auto got = out.download(), dgot = dinp.download();
  CHECK(std::isnan(got[0]));  // nothing written before the views
  CHECK(std::isnan(dgot[0]));
  meg::test::check_close("out", {got.begin() + 1, got.end()}, out_ref,
                         gelu_forward_bound(xv, out_ref, ux, subnormal_error<X>()), 1.0);
  meg::test::check_close("dinp", {dgot.begin() + 1, dgot.end()}, dinp_ref,
                         gelu_backward_bound(xv, doutv, dinp_ref, ux, subnormal_error<X>()), 1.0);
}

TEMPLATE_TEST_CASE("CUDA swiglu_forward and swiglu_backward match the CPU reference",
                   "[gpu][activations]", float, __nv_bfloat16, __half) {
  using X = TestType;
  const double ux = unit_roundoff<X>();
  std::mt19937 rng(1415);
  // H multiple of 8 (16-byte packs for every type), of 4 only (packs for fp32 only), odd.
  const int shapes[][2] = {{1, 1}, {7, 13}, {64, 768}, {33, 1380}, {4097, 8}};
  for (const auto& shape : shapes) {
    const int N = shape[0], H = shape[1];
    const size_t NH = size_t(N) * H;
    INFO(meg::test::type_name<X>() << " N=" << N << " H=" << H);
    auto inp_h = meg::test::round_to<X>(meg::test::random_floats(2 * NH, -5.0f, 5.0f, rng));
    // Far tails in the first gates: exp(-g) overflows fp32 at g = -100.
    const float tails[] = {-100.0f, -30.0f, 30.0f, 100.0f};
    for (int j = 0; j < std::min(H, 4); ++j) inp_h[j] = tails[j];
    const auto dout_h = meg::test::round_to<X>(meg::test::random_floats(NH, -1.0f, 1.0f, rng));

    std::vector<double> out_ref(NH), dinp_ref(2 * NH, 0.0);  // the CPU's backward accumulates
    meg::cpu::swiglu_forward(out_ref.data(), widen(inp_h).data(), N, H);
    meg::cpu::swiglu_backward(dinp_ref.data(), widen(dout_h).data(), widen(inp_h).data(), N, H);

    // Bounds. exp(-|g|) is of an exact argument (2 ulps); the sigmoids and the products add one
    // rounding each: out = g s up within ~5 fp32 roundings, d up = dy g s likewise, and
    // d gate = dy up s (1 + g (1 - s)) within ~8 of |dy up s| (1 + |g (1 - s)|), the sum's terms:
    // 10 covers all three. Where s or 1 - s falls below fp32's normal range (exp(-100) = 4e-44) it
    // keeps only an absolute 2^-126, times the other factors.
    constexpr double kMinNormal32 = 0x1p-126;
    std::vector<double> out_bound(NH), dinp_bound(2 * NH);
    for (int i = 0; i < N; ++i) {
      for (int j = 0; j < H; ++j) {
        const size_t k = size_t(i) * H + j, kg = size_t(i) * 2 * H + j, ku = kg + H;
        const double g = inp_h[kg], up = inp_h[ku], dy = dout_h[k];
        const auto [s, sc] = sigmoid_pair(g);
        out_bound[k] = (ux + 10 * kU32) * std::abs(out_ref[k]) +
                       kMinNormal32 * std::abs(g * up) + subnormal_error<X>();
        dinp_bound[kg] = ux * std::abs(dinp_ref[kg]) +
                         10 * kU32 * std::abs(dy * up * s) * (1 + std::abs(g * sc)) +
                         kMinNormal32 * std::abs(dy * up) * (1 + std::abs(g)) +
                         subnormal_error<X>();
        dinp_bound[ku] = (ux + 10 * kU32) * std::abs(dinp_ref[ku]) +
                         kMinNormal32 * std::abs(dy * g) + subnormal_error<X>();
      }
    }

    // Each launch twice on a poisoned output: every element written, the same bits both times.
    DeviceBuffer<X> inp(inp_h), out(NH), dout(dout_h), dinp(2 * NH);
    out.poison();
    meg::cuda::swiglu_forward(out.get(), inp.get(), N, H, nullptr);
    const auto out_first = out.download_raw();
    meg::test::check_close("out", out.download(), out_ref, out_bound, 1.0);
    out.poison();
    meg::cuda::swiglu_forward(out.get(), inp.get(), N, H, nullptr);
    CHECK(same_bits(out_first, out.download_raw()));

    dinp.poison();
    meg::cuda::swiglu_backward(dinp.get(), dout.get(), inp.get(), N, H, nullptr);
    const auto dinp_first = dinp.download_raw();
    meg::test::check_close("dinp", dinp.download(), dinp_ref, dinp_bound, 1.0);
    dinp.poison();
    meg::cuda::swiglu_backward(dinp.get(), dout.get(), inp.get(), N, H, nullptr);
    CHECK(same_bits(dinp_first, dinp.download_raw()));

    // In place: the gradient overwrites the forward's input.
    meg::cuda::swiglu_backward(inp.get(), dout.get(), inp.get(), N, H, nullptr);
    CHECK(same_bits(dinp_first, inp.download_raw()));
  }
}
