// The cuBLASLt products of ops/cuda/gemm.hpp against the CPU's linear layer, plain and with their
// fused epilogues (bias, GELU with its input kept, the GELU derivative).
//
// Bounds: fp32 products accumulate K terms in fp32 in some blocked order, an error of a few K *
// 2^-24 of the sum of absolute values at worst and far less in practice; 1e-5 of that sum (the
// scale below) is met with margin for K <= 1024 and fails any wrong index or transposition. GELU
// and its derivative add a few ulps of their own. In bf16 the output is rounded to 8 bits (unit
// roundoff 2^-8), so the bound is 1e-2 of the scale.
#include <cmath>
#include <random>
#include <vector>

#include "gpu_test_util.hpp"
#include "ops/cpu/ops.hpp"
#include "ops/cuda/gemm.hpp"

namespace {

using meg::test::DeviceBuffer;
using meg::test::check_close;
using meg::test::random_floats;
using meg::test::round_to;
using meg::test::widen;

struct Case {
  int N, C, OC;
  std::vector<float> inp, W, bias, dout;
};

template <typename X>
Case make_case(int N, int C, int OC, std::mt19937& rng) {
  return {N, C, OC, round_to<X>(random_floats(size_t(N) * C, -1, 1, rng)),
          round_to<X>(random_floats(size_t(OC) * C, -0.5f, 0.5f, rng)), round_to<X>(random_floats(OC, -1, 1, rng)),
          round_to<X>(random_floats(size_t(N) * OC, -1, 1, rng))};
}

template <typename X>
double tolerance() {
  return std::is_same_v<X, float> ? 1e-5 : 1e-2;
}

template <typename X>
void check_forward(const Case& t) {
  meg::cuda::Gemm gemm(nullptr);
  DeviceBuffer<X> inp(t.inp), W(t.W), bias(t.bias), out(size_t(t.N) * t.OC), pre(size_t(t.N) * t.OC);
  std::vector<double> ref(size_t(t.N) * t.OC);
  meg::cpu::linear_forward(ref.data(), widen(t.inp).data(), widen(t.W).data(), widen(t.bias).data(), t.N, t.C, t.OC);
  const auto scale = meg::test::product_error_scale(t.inp, t.W, t.bias, t.N, t.C, t.OC);

  out.poison();
  gemm.linear_forward(out.get(), inp.get(), W.get(), bias.get(), t.N, t.C, t.OC);
  check_close("linear_forward", out.download(), ref, scale, tolerance<X>());

  out.poison();
  pre.poison();
  REQUIRE(gemm.linear_gelu_forward(out.get(), pre.get(), inp.get(), W.get(), bias.get(), t.N, t.C, t.OC));
  check_close("linear_gelu_forward: GELU input", pre.download(), ref, scale, tolerance<X>());
  std::vector<double> act(ref.size());
  meg::cpu::gelu_forward(act.data(), ref.data(), ref.size());
  check_close("linear_gelu_forward: GELU output (tanh approximation)", out.download(), act, scale, tolerance<X>());
}

template <typename X>
void check_backward(const Case& t) {
  meg::cuda::Gemm gemm(nullptr);
  // As a GELU's backward: dinp[N,C] = (dout[N,OC] @ W[OC,C]) * gelu'(pre[N,C]); pre is inp itself.
  DeviceBuffer<X> inp(t.inp), W(t.W), dout(t.dout), dinp(size_t(t.N) * t.C);
  std::vector<double> dmm(size_t(t.N) * t.C, 0.0), dW_unused(size_t(t.OC) * t.C, 0.0);
  meg::cpu::linear_backward(dmm.data(), dW_unused.data(), static_cast<double*>(nullptr), widen(t.dout).data(),
                            widen(t.inp).data(), widen(t.W).data(), t.N, t.C, t.OC);
  std::vector<double> scale(dmm.size());
  for (int i = 0; i < t.N; ++i)
    for (int c = 0; c < t.C; ++c) {
      double a = 0;
      for (int o = 0; o < t.OC; ++o) a += std::abs(double(t.dout[size_t(i) * t.OC + o]) * t.W[size_t(o) * t.C + c]);
      scale[size_t(i) * t.C + c] = a;
    }
  dinp.poison();
  gemm.linear_backward_input(dinp.get(), dout.get(), W.get(), t.N, t.C, t.OC);
  check_close("linear_backward_input", dinp.download(), dmm, scale, tolerance<X>());

  std::vector<double> dgelu(dmm.size(), 0.0);
  meg::cpu::gelu_backward(dgelu.data(), dmm.data(), widen(t.inp).data(), dmm.size());
  dinp.poison();
  REQUIRE(gemm.linear_dgelu_backward_input(dinp.get(), dout.get(), W.get(), inp.get(), t.N, t.C, t.OC));
  check_close("linear_dgelu_backward_input", dinp.download(), dgelu, scale, tolerance<X>());

  // dW accumulates onto random values.
  std::mt19937 rng(5);
  const auto dW0 = random_floats(size_t(t.OC) * t.C, -1, 1, rng);
  DeviceBuffer<float> dW(dW0);
  std::vector<double> dW_ref = widen(dW0);
  meg::cpu::linear_backward(static_cast<double*>(nullptr), dW_ref.data(), static_cast<double*>(nullptr),
                            widen(t.dout).data(), widen(t.inp).data(), widen(t.W).data(), t.N, t.C, t.OC);
  std::vector<double> dW_scale(dW_ref.size());
  for (int o = 0; o < t.OC; ++o)
    for (int c = 0; c < t.C; ++c) {
      double a = std::abs(dW0[size_t(o) * t.C + c]);
      for (int i = 0; i < t.N; ++i) a += std::abs(double(t.dout[size_t(i) * t.OC + o]) * t.inp[size_t(i) * t.C + c]);
      dW_scale[size_t(o) * t.C + c] = a;
    }
  gemm.linear_backward_weight(dW.get(), dout.get(), inp.get(), t.N, t.C, t.OC);
  // The products are exact in fp32 from X inputs and accumulate in fp32: 1e-5 for every X.
  check_close("linear_backward_weight", dW.download(), dW_ref, dW_scale, 1e-5);
}

}  // namespace

TEST_CASE("cuBLASLt products and fused epilogues match the CPU linear layer", "[gpu][gemm]") {
  std::mt19937 rng(77);
  const int shapes[][3] = {{64, 128, 256}, {200, 96, 320}, {1024, 768, 3072}};
  for (const auto& s : shapes) {
    INFO("N=" << s[0] << " C=" << s[1] << " OC=" << s[2]);
    check_forward<float>(make_case<float>(s[0], s[1], s[2], rng));
    check_backward<float>(make_case<float>(s[0], s[1], s[2], rng));
    check_forward<__nv_bfloat16>(make_case<__nv_bfloat16>(s[0], s[1], s[2], rng));
    check_backward<__nv_bfloat16>(make_case<__nv_bfloat16>(s[0], s[1], s[2], rng));
  }
}
