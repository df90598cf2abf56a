// The CUDA LayerNorm and RMSNorm (kernels/layernorm.cu, kernels/rmsnorm.cu) against the CPU
// reference ops in double, for X = fp32, bf16 and fp16. The method is gpu_test_util.hpp's: inputs
// rounded to X, outputs poisoned, accumulated gradients pre-filled with random values, and each
// element held to |gpu - ref| <= rtol * scale with scale the magnitude of the terms it is made of.
// Every backward also runs twice on the same inputs and must give the same bits (the dweight and
// dbias reductions are ordered, not atomic), each gradient alone must give its bits of the full
// run and leave the others as they were, and the scratch is poisoned before each run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "gpu/gpu_test_util.hpp"
#include "ops/cpu/ops.hpp"
#include "ops/cuda/ops.hpp"

using namespace meg::test;

namespace {

// Bounds.
// kFp32: the kernels' own fp32 arithmetic. The longest fp32 chain feeding an output is a row sum:
// at most 24 sequential adds per thread (its slots), 5 shuffle levels and up to 16 warp partials,
// about 45 adds, i.e. 45 * 2^-24 = 2.7e-6 of the scale; 1e-5 leaves a 3x margin.
// kFp32Reduce: dweight and dbias, sums over all N rows (fp32 whatever X is). An addend passes
// through the rows of its block's row lane (N / G / lanes, <= 4 here), the block's lanes (<= 4),
// and G/32 + 32 adds in the reduction of the G <= 1024 partial rows: about 72 adds for N = 4097,
// 4.3e-6 of the sum of absolute values, plus the error of each recomputed norm (~1e-6); 2e-5
// leaves a 3x margin.
// Outputs of type X take one more rounding to X at the end, which costs unit_roundoff<X>() of
// their value, and the value is bounded by the scale: rtol = unit_roundoff<X>() + kFp32.
constexpr double kFp32 = 1e-5;
constexpr double kFp32Reduce = 2e-5;

template <typename X>
double rtol_x() {
  return unit_roundoff<X>() + kFp32;
}

// Odd shapes on purpose: C = 3, 1601 and 4097 take the one-element path, 1600, 4097 and 8192 rows
// of several warps (which meet at barriers of their own); N = 1 and 4097 leave blocks
// part-filled, and row groups idle in the backward's last round.
const std::pair<int, int> kShapes[] = {{1, 768},    {7, 3},    {4097, 3}, {256, 1600},
                                       {4097, 768}, {5, 1601}, {33, 8192}, {3, 4097}};

// A case's random inputs, rounded to X: the rows [N, C], with an offset against the spread (so
// that LayerNorm must really subtract the mean), and the weight [C].
struct Inputs {
  std::vector<float> inp, weight;
};

template <typename X>
Inputs random_inputs(int N, int C, std::mt19937& rng) {
  auto inp = round_to<X>(random_floats(size_t(N) * C, -1.0f, 2.0f, rng));
  return {std::move(inp), round_to<X>(random_floats(C, 0.5f, 1.5f, rng))};
}

// One accumulated gradient output of a backward, its device buffer seen as raw bytes: reset()
// uploads its starting values, bits() reads it back.
struct Gradient {
  std::function<void()> reset;
  std::function<std::vector<unsigned char>()> bits;
};

template <typename T>
Gradient gradient(DeviceBuffer<T>& d, const std::vector<float>& init) {
  return {[&d, &init] { d.upload(init); },
          [&d] {
            const auto v = d.download_raw();
            std::vector<unsigned char> b(v.size() * sizeof(T));
            std::memcpy(b.data(), v.data(), b.size());
            return b;
          }};
}

// The pointer to pass for gradient K in a run of gradient ONLY (-1: all of them).
template <typename T>
T* if_run(const DeviceBuffer<T>& d, int k, int only) {
  return only < 0 || only == k ? d.get() : nullptr;
}

// The checks of a backward beyond its values, RUN(only) running it with every gradient (-1) or
// with gradient ONLY of GRADS alone: from the same starting gradients a second run gives the bits
// of the first (the run just checked, whose results GRADS hold), and each gradient alone gives its
// bits of the full run and leaves the others at their starting values.
void check_repeats(const std::vector<Gradient>& grads, const std::function<void(int)>& run) {
  std::vector<std::vector<unsigned char>> first, init;
  for (const auto& g : grads) first.push_back(g.bits());
  for (const auto& g : grads) g.reset(), init.push_back(g.bits());
  run(-1);
  for (size_t k = 0; k < grads.size(); ++k) CHECK(grads[k].bits() == first[k]);
  for (int only = 0; only < int(grads.size()); ++only) {
    INFO("gradient " << only << " alone");
    for (const auto& g : grads) g.reset();
    run(only);
    for (size_t k = 0; k < grads.size(); ++k)
      CHECK(grads[k].bits() == (int(k) == only ? first[k] : init[k]));
  }
}

double row_mean_abs(const std::vector<float>& a, int i, int C) {
  double s = 0;
  for (int c = 0; c < C; ++c) s += std::abs(double(a[size_t(i) * C + c]));
  return s / C;
}

}  // namespace

TEMPLATE_TEST_CASE("CUDA layernorm_forward matches the CPU reference", "[gpu][kernels]", float,
                   __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(1234);
  for (auto [N, C] : kShapes) {
    INFO(type_name<X>() << " N=" << N << " C=" << C);
    const size_t NC = size_t(N) * C;
    const auto [inp, weight] = random_inputs<X>(N, C, rng);
    const auto bias = round_to<X>(random_floats(C, -0.5f, 0.5f, rng));
    const float eps = 1e-5f;

    std::vector<double> out_ref(NC), mean_ref(N), rstd_ref(N), out_nobias(NC);
    meg::cpu::layernorm_forward(out_ref.data(), mean_ref.data(), rstd_ref.data(), widen(inp).data(),
                                widen(weight).data(), widen(bias).data(), N, C, double(eps));
    meg::cpu::layernorm_forward(out_nobias.data(), nullptr, nullptr, widen(inp).data(),
                                widen(weight).data(), nullptr, N, C, double(eps));

    // Scales. mean: the row's mean |x|. rstd: rstd itself, plus the part fed by the mean's error
    // through (x - mean). out = norm * w + b: its terms, plus |w| * rstd * mean|x| for the error
    // of the mean carried into norm.
    std::vector<double> out_scale(NC), mean_scale(N), rstd_scale(N);
    for (int i = 0; i < N; ++i) {
      const double mabs = row_mean_abs(inp, i, C), s = rstd_ref[i];
      mean_scale[i] = mabs;
      rstd_scale[i] = s * (1 + s * mabs);
      for (int c = 0; c < C; ++c) {
        const double norm = (inp[size_t(i) * C + c] - mean_ref[i]) * s;
        out_scale[size_t(i) * C + c] =
            std::abs(double(weight[c])) * (std::abs(norm) + s * mabs) + std::abs(double(bias[c]));
      }
    }

    DeviceBuffer<X> d_inp(inp), d_weight(weight), d_bias(bias), d_out(NC);
    DeviceBuffer<float> d_mean(N), d_rstd(N);
    d_out.poison(), d_mean.poison(), d_rstd.poison();
    meg::cuda::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(),
                                 d_weight.get(), d_bias.get(), N, C, eps, nullptr);
    check_close_x<X>("out", d_out.download(), out_ref, out_scale, rtol_x<X>());
    check_close("mean", d_mean.download(), mean_ref, mean_scale, kFp32);
    check_close("rstd", d_rstd.download(), rstd_ref, rstd_scale, kFp32);

    d_out.poison();
    meg::cuda::layernorm_forward<X>(d_out.get(), nullptr, nullptr, d_inp.get(), d_weight.get(),
                                 nullptr, N, C, eps, nullptr);
    check_close_x<X>("out (no bias, no statistics)", d_out.download(), out_nobias, out_scale,
                rtol_x<X>());
  }
}

TEMPLATE_TEST_CASE("CUDA layernorm_backward matches the CPU reference, accumulates, repeats",
                   "[gpu][kernels]", float, __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(5678);
  for (auto [N, C] : kShapes) {
    INFO(type_name<X>() << " N=" << N << " C=" << C);
    const size_t NC = size_t(N) * C;
    const auto [inp, weight] = random_inputs<X>(N, C, rng);
    const auto dout = round_to<X>(random_floats(NC, -1.0f, 1.0f, rng));

    // The saved statistics, rounded to fp32 once and handed to both sides, so the comparison is
    // of the backward alone.
    std::vector<double> mean_d(N), rstd_d(N), tmp(NC);
    meg::cpu::layernorm_forward(tmp.data(), mean_d.data(), rstd_d.data(), widen(inp).data(),
                                widen(weight).data(), nullptr, N, C, 1e-5);
    const std::vector<float> mean(mean_d.begin(), mean_d.end()), rstd(rstd_d.begin(), rstd_d.end());

    // Pre-filled gradients: the kernels must add to them.
    const auto dinp0 = round_to<X>(random_floats(NC, -1.0f, 1.0f, rng));
    const auto dweight0 = random_floats(C, -1.0f, 1.0f, rng);
    const auto dbias0 = random_floats(C, -1.0f, 1.0f, rng);

    std::vector<double> dinp_ref = widen(dinp0), dweight_ref = widen(dweight0),
                        dbias_ref = widen(dbias0);
    meg::cpu::layernorm_backward(dinp_ref.data(), dweight_ref.data(), dbias_ref.data(),
                                 widen(dout).data(), widen(inp).data(), widen(weight).data(),
                                 widen(mean).data(), widen(rstd).data(), N, C);

    // Scales. dinp = init + rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)): each term,
    // the row means taken over absolute values (their fp32 error is relative to those).
    // dweight = init + sum_i norm * dy, with |dy| * rstd * (|x| + |mean|) added for the error of
    // each recomputed norm; dbias = init + sum_i dy.
    std::vector<double> dinp_scale(NC), dweight_scale(C), dbias_scale(C);
    for (int c = 0; c < C; ++c)
      dweight_scale[c] = std::abs(double(dweight0[c])), dbias_scale[c] = std::abs(double(dbias0[c]));
    for (int i = 0; i < N; ++i) {
      const double m = mean[i], s = rstd[i];
      double dnorm_abs = 0, dnorm_norm_abs = 0;
      for (int c = 0; c < C; ++c) {
        const size_t k = size_t(i) * C + c;
        const double norm = (inp[k] - m) * s, dnorm = double(weight[c]) * dout[k];
        dnorm_abs += std::abs(dnorm);
        dnorm_norm_abs += std::abs(dnorm * norm);
        dweight_scale[c] += std::abs(double(dout[k])) *
                            (std::abs(norm) + s * (std::abs(double(inp[k])) + std::abs(m)));
        dbias_scale[c] += std::abs(double(dout[k]));
      }
      dnorm_abs /= C, dnorm_norm_abs /= C;
      for (int c = 0; c < C; ++c) {
        const size_t k = size_t(i) * C + c;
        const double norm = (inp[k] - m) * s, dnorm = double(weight[c]) * dout[k];
        dinp_scale[k] = std::abs(double(dinp0[k])) +
                        s * (std::abs(dnorm) + dnorm_abs +
                             (std::abs(norm) + s * std::abs(m)) * dnorm_norm_abs);
      }
    }

    DeviceBuffer<X> d_inp(inp), d_weight(weight), d_dout(dout), d_dinp(dinp0);
    DeviceBuffer<float> d_mean(mean), d_rstd(rstd), d_dweight(dweight0), d_dbias(dbias0);
    DeviceBuffer<float> scratch(meg::cuda::layernorm_backward_scratch(N, C));
    auto run = [&](int only) {
      scratch.poison();
      meg::cuda::layernorm_backward(if_run(d_dinp, 0, only), if_run(d_dweight, 1, only),
                                    if_run(d_dbias, 2, only), d_dout.get(), d_inp.get(),
                                    d_weight.get(), d_mean.get(), d_rstd.get(), N, C,
                                    scratch.get(), nullptr);
    };

    run(-1);
    check_close_x<X>("dinp", d_dinp.download(), dinp_ref, dinp_scale, rtol_x<X>());
    check_close("dweight", d_dweight.download(), dweight_ref, dweight_scale, kFp32Reduce);
    check_close("dbias", d_dbias.download(), dbias_ref, dbias_scale, kFp32Reduce);
    check_repeats(
        {gradient(d_dinp, dinp0), gradient(d_dweight, dweight0), gradient(d_dbias, dbias0)}, run);
  }
}

TEMPLATE_TEST_CASE("CUDA rmsnorm_forward matches the CPU reference", "[gpu][kernels]", float,
                   __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(4321);
  for (auto [N, C] : kShapes) {
    INFO(type_name<X>() << " N=" << N << " C=" << C);
    const size_t NC = size_t(N) * C;
    const auto [inp, weight] = random_inputs<X>(N, C, rng);
    const float eps = 1e-5f;

    std::vector<double> out_ref(NC), rstd_ref(N);
    meg::cpu::rmsnorm_forward(out_ref.data(), rstd_ref.data(), widen(inp).data(),
                              widen(weight).data(), N, C, double(eps));

    // Scales: rstd itself (a sum of squares, no cancellation); out = x * rstd * w, its size.
    std::vector<double> out_scale(NC);
    for (int i = 0; i < N; ++i)
      for (int c = 0; c < C; ++c) {
        const size_t k = size_t(i) * C + c;
        out_scale[k] = std::abs(double(inp[k]) * rstd_ref[i] * weight[c]);
      }

    DeviceBuffer<X> d_inp(inp), d_weight(weight), d_out(NC);
    DeviceBuffer<float> d_rstd(N);
    d_out.poison(), d_rstd.poison();
    meg::cuda::rmsnorm_forward(d_out.get(), d_rstd.get(), d_inp.get(), d_weight.get(), N, C, eps,
                               nullptr);
    check_close_x<X>("out", d_out.download(), out_ref, out_scale, rtol_x<X>());
    check_close("rstd", d_rstd.download(), rstd_ref, rstd_ref, kFp32);

    d_out.poison();
    meg::cuda::rmsnorm_forward(d_out.get(), nullptr, d_inp.get(), d_weight.get(), N, C, eps,
                               nullptr);
    check_close_x<X>("out (no rstd)", d_out.download(), out_ref, out_scale, rtol_x<X>());
  }
}

TEMPLATE_TEST_CASE("CUDA rmsnorm_backward matches the CPU reference, accumulates, repeats",
                   "[gpu][kernels]", float, __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(8765);
  for (auto [N, C] : kShapes) {
    INFO(type_name<X>() << " N=" << N << " C=" << C);
    const size_t NC = size_t(N) * C;
    const auto [inp, weight] = random_inputs<X>(N, C, rng);
    const auto dout = round_to<X>(random_floats(NC, -1.0f, 1.0f, rng));

    std::vector<double> rstd_d(N), tmp(NC);
    meg::cpu::rmsnorm_forward(tmp.data(), rstd_d.data(), widen(inp).data(), widen(weight).data(),
                              N, C, 1e-5);
    const std::vector<float> rstd(rstd_d.begin(), rstd_d.end());

    const auto dinp0 = round_to<X>(random_floats(NC, -1.0f, 1.0f, rng));
    const auto dweight0 = random_floats(C, -1.0f, 1.0f, rng);

    std::vector<double> dinp_ref = widen(dinp0), dweight_ref = widen(dweight0);
    meg::cpu::rmsnorm_backward(dinp_ref.data(), dweight_ref.data(), widen(dout).data(),
                               widen(inp).data(), widen(weight).data(), widen(rstd).data(), N, C);

    // Scales. dinp = init + rstd * (dnorm - norm * mean(dnorm * norm)): its terms, the row mean
    // over absolute values. dweight = init + sum_i norm * dy: its terms.
    std::vector<double> dinp_scale(NC), dweight_scale(C);
    for (int c = 0; c < C; ++c) dweight_scale[c] = std::abs(double(dweight0[c]));
    for (int i = 0; i < N; ++i) {
      const double s = rstd[i];
      double dnorm_norm_abs = 0;
      for (int c = 0; c < C; ++c) {
        const size_t k = size_t(i) * C + c;
        const double norm = inp[k] * s;
        dnorm_norm_abs += std::abs(double(weight[c]) * dout[k] * norm);
        dweight_scale[c] += std::abs(norm * dout[k]);
      }
      dnorm_norm_abs /= C;
      for (int c = 0; c < C; ++c) {
        const size_t k = size_t(i) * C + c;
        const double norm = inp[k] * s, dnorm = double(weight[c]) * dout[k];
        dinp_scale[k] =
            std::abs(double(dinp0[k])) + s * (std::abs(dnorm) + std::abs(norm) * dnorm_norm_abs);
      }
    }

    DeviceBuffer<X> d_inp(inp), d_weight(weight), d_dout(dout), d_dinp(dinp0);
    DeviceBuffer<float> d_rstd(rstd), d_dweight(dweight0);
    DeviceBuffer<float> scratch(meg::cuda::rmsnorm_backward_scratch(N, C));
    auto run = [&](int only) {
      scratch.poison();
      meg::cuda::rmsnorm_backward(if_run(d_dinp, 0, only), if_run(d_dweight, 1, only),
                                  d_dout.get(), d_inp.get(), d_weight.get(), d_rstd.get(), N, C,
                                  scratch.get(), nullptr);
    };

    run(-1);
    check_close_x<X>("dinp", d_dinp.download(), dinp_ref, dinp_scale, rtol_x<X>());
    check_close("dweight", d_dweight.download(), dweight_ref, dweight_scale, kFp32Reduce);
    check_repeats({gradient(d_dinp, dinp0), gradient(d_dweight, dweight0)}, run);
  }
}

// The residual add fused into the norm (the inference path's unfused layers: a branch's output
// added into the residual stream by the next norm's launch) must be add() then the norm, bit for
// bit: the residual stream it writes and the normalised rows, for both norms, on the vector and
// the one-element paths (arrays offset by one element: not 16-byte aligned).
TEMPLATE_TEST_CASE("CUDA add_layernorm_forward and add_rmsnorm_forward equal add, then the norm", "[gpu][kernels]",
                   float, __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(91);
  for (auto [N, C] : kShapes) {
    for (int offset : {0, 1}) {
      INFO(type_name<X>() << " N=" << N << " C=" << C << " offset " << offset);
      const size_t NC = size_t(N) * C;
      auto [x0, weight] = random_inputs<X>(N, C, rng);
      const auto bias = round_to<X>(random_floats(C, -0.5f, 0.5f, rng));
      auto part = round_to<X>(random_floats(NC, -1.0f, 1.0f, rng));
      x0.insert(x0.begin(), float(offset), 0.0f);
      part.insert(part.begin(), float(offset), 0.0f);
      const float eps = 1e-5f;
      DeviceBuffer<X> d_part(part), d_weight(weight), d_bias(bias);
      const X* p = d_part.get() + offset;
      for (bool rms : {false, true}) {
        INFO((rms ? "rmsnorm" : "layernorm"));
        DeviceBuffer<X> want_x(x0), want_out(NC + offset), got_x(x0), got_out(NC + offset);
        want_out.poison(), got_out.poison();
        X *wx = want_x.get() + offset, *wo = want_out.get() + offset;
        X *gx = got_x.get() + offset, *go = got_out.get() + offset;
        meg::cuda::add(wx, wx, p, NC, nullptr);
        if (rms) {
          meg::cuda::rmsnorm_forward(wo, nullptr, wx, d_weight.get(), N, C, eps, nullptr);
          meg::cuda::add_rmsnorm_forward(go, gx, p, d_weight.get(), N, C, eps, nullptr);
        } else {
          meg::cuda::layernorm_forward(wo, nullptr, nullptr, wx, d_weight.get(), d_bias.get(), N, C, eps, nullptr);
          meg::cuda::add_layernorm_forward(go, gx, p, d_weight.get(), d_bias.get(), N, C, eps, nullptr);
        }
        CHECK(same_bits(got_x.download_raw(), want_x.download_raw()));
        CHECK(same_bits(got_out.download_raw(), want_out.download_raw()));
      }
    }
  }
}
