// The CUDA kernels of kernels/layernorm.cu and kernels/gelu.cu against the CPU reference ops.
//
// Method, for every op and shape:
//   - random non-zero inputs (fixed seed), made in fp32 so both sides see exactly the same values;
//   - outputs the kernel writes are poisoned with NaN (all bytes 0xFF) before the launch, so an
//     element the kernel forgets to write fails the check instead of passing as a stale value;
//   - gradient outputs are pre-filled with random values, checking that the kernels accumulate;
//   - the reference is meg::cpu::* instantiated for double on the same (widened) inputs, so what
//     remains is the GPU's own fp32 rounding;
//   - each element must satisfy |gpu - ref| <= rtol * scale, where scale is the magnitude of the
//     terms the element is made of (a sum of absolute values), not |ref| alone: a result that
//     cancels to near zero is still only as accurate as the terms that made it. NaN never passes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "ops/cpu/ops.hpp"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace {

// fp32 elementwise and per-row results. The longest fp32 chain on the GPU side is a row
// statistic: C/32 sequential adds per lane then 5 shuffle levels, 55 adds for C = 1600, i.e. at
// most ~55 * 2^-24 = 3.3e-6 of the scale; 1e-5 leaves a 3x margin.
constexpr double kRtol = 1e-5;
// dweight/dbias sum over all N rows. An addend passes through at most N / (8 * chunks) adds in
// its row lane, 3 more in the block and up to `chunks` (<= 256) in the final reduction: for
// N = 4097 (65 chunks of 64 rows) about 76 adds, ~4.5e-6 of the sum of absolute values, plus the
// error of each recomputed norm (~1e-6). The chain grows with N, hence a looser 2e-5.
constexpr double kRtolReduce = 2e-5;

const int kRows[] = {1, 7, 256, 4097};
const int kChannels[] = {64, 768, 1600, 3};

std::vector<float> random_floats(size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = dist(rng);
    while (x == 0.0f);  // never zeros as test data
  }
  return v;
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// A device array of floats, freed on scope exit.
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) { MEG_CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(float))); }
  explicit DeviceArray(const std::vector<float>& v) : DeviceArray(v.size()) { upload(v); }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  float* get() const { return p_; }
  void upload(const std::vector<float>& v) {
    REQUIRE(v.size() == n_);
    MEG_CUDA_CHECK(cudaMemcpy(p_, v.data(), n_ * sizeof(float), cudaMemcpyHostToDevice));
  }
  void poison() { MEG_CUDA_CHECK(cudaMemset(p_, 0xFF, n_ * sizeof(float))); }  // NaN everywhere
  std::vector<float> download() const {
    MEG_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> v(n_);
    MEG_CUDA_CHECK(cudaMemcpy(v.data(), p_, n_ * sizeof(float), cudaMemcpyDeviceToHost));
    return v;
  }

 private:
  float* p_ = nullptr;
  size_t n_;
};

// Every element: |got - want| <= rtol * scale. Reports the count and the worst offender.
void check_close(const std::string& what, const std::vector<float>& got, const std::vector<double>& want,
                 const std::vector<double>& scale, double rtol) {
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
            << ": got " << (got.empty() ? 0.0f : got[worst]) << ", want " << (want.empty() ? 0.0 : want[worst])
            << ", bound " << (scale.empty() ? 0.0 : rtol * scale[worst]));
  CHECK(bad == 0);
}

struct LayerNormCase {
  int N, C;
  std::vector<float> inp, weight, bias, dout;
};

LayerNormCase make_layernorm_case(int N, int C, std::mt19937& rng) {
  LayerNormCase t{N, C, {}, {}, {}, {}};
  // An offset against the spread, so the kernel must really subtract the mean.
  t.inp = random_floats(size_t(N) * C, -1.0f, 2.0f, rng);
  t.weight = random_floats(C, 0.5f, 1.5f, rng);
  t.bias = random_floats(C, -0.5f, 0.5f, rng);
  t.dout = random_floats(size_t(N) * C, -1.0f, 1.0f, rng);
  return t;
}

double row_mean_abs(const std::vector<float>& a, int i, int C) {
  double s = 0;
  for (int c = 0; c < C; ++c) s += std::abs(double(a[size_t(i) * C + c]));
  return s / C;
}

}  // namespace

TEST_CASE("CUDA layernorm_forward matches the CPU reference", "[gpu]") {
  std::mt19937 rng(1234);
  for (int N : kRows) {
    for (int C : kChannels) {
      INFO("N=" << N << " C=" << C);
      const auto t = make_layernorm_case(N, C, rng);
      const float eps = 1e-5f;
      const size_t NC = size_t(N) * C;

      std::vector<double> out_ref(NC), mean_ref(N), rstd_ref(N);
      meg::cpu::layernorm_forward(out_ref.data(), mean_ref.data(), rstd_ref.data(), widen(t.inp).data(),
                                  widen(t.weight).data(), widen(t.bias).data(), N, C, double(eps));

      // Scales. mean: the row's mean |x|. rstd: rstd itself, plus the part fed by the mean's error
      // through (x - mean). out = norm * w + b: its terms, plus |w| * rstd * mean|x| for the error
      // of the mean carried into norm.
      std::vector<double> out_scale(NC), mean_scale(N), rstd_scale(N);
      for (int i = 0; i < N; ++i) {
        const double mabs = row_mean_abs(t.inp, i, C), s = rstd_ref[i];
        mean_scale[i] = mabs;
        rstd_scale[i] = s * (1 + s * mabs);
        for (int c = 0; c < C; ++c) {
          const double norm = (t.inp[size_t(i) * C + c] - mean_ref[i]) * s;
          out_scale[size_t(i) * C + c] =
              std::abs(double(t.weight[c])) * (std::abs(norm) + s * mabs) + std::abs(double(t.bias[c]));
        }
      }

      DeviceArray inp(t.inp), weight(t.weight), bias(t.bias), out(NC), mean(N), rstd(N);
      SECTION("with bias, saving mean and rstd") {
        out.poison(), mean.poison(), rstd.poison();
        meg::cuda::layernorm_forward(out.get(), mean.get(), rstd.get(), inp.get(), weight.get(), bias.get(),
                                     N, C, eps);
        check_close("out", out.download(), out_ref, out_scale, kRtol);
        check_close("mean", mean.download(), mean_ref, mean_scale, kRtol);
        check_close("rstd", rstd.download(), rstd_ref, rstd_scale, kRtol);
      }
      SECTION("without bias, mean or rstd") {
        std::vector<double> out_nobias(NC);
        meg::cpu::layernorm_forward(out_nobias.data(), nullptr, nullptr, widen(t.inp).data(),
                                    widen(t.weight).data(), nullptr, N, C, double(eps));
        out.poison();
        meg::cuda::layernorm_forward(out.get(), nullptr, nullptr, inp.get(), weight.get(), nullptr, N, C, eps);
        check_close("out (no bias)", out.download(), out_nobias, out_scale, kRtol);
      }
    }
  }
}

TEST_CASE("CUDA layernorm_backward matches the CPU reference and accumulates", "[gpu]") {
  std::mt19937 rng(5678);
  for (int N : kRows) {
    for (int C : kChannels) {
      INFO("N=" << N << " C=" << C);
      const auto t = make_layernorm_case(N, C, rng);
      const size_t NC = size_t(N) * C;

      // The saved statistics, rounded to fp32 once and handed to both sides, so the comparison
      // is of the backward alone.
      std::vector<double> mean_d(N), rstd_d(N), scratch(NC);
      meg::cpu::layernorm_forward(scratch.data(), mean_d.data(), rstd_d.data(), widen(t.inp).data(),
                                  widen(t.weight).data(), nullptr, N, C, 1e-5);
      std::vector<float> mean_f(mean_d.begin(), mean_d.end()), rstd_f(rstd_d.begin(), rstd_d.end());

      // Pre-filled gradients: the kernels must add to them.
      const auto dinp0 = random_floats(NC, -1.0f, 1.0f, rng);
      const auto dweight0 = random_floats(C, -1.0f, 1.0f, rng);
      const auto dbias0 = random_floats(C, -1.0f, 1.0f, rng);

      std::vector<double> dinp_ref = widen(dinp0), dweight_ref = widen(dweight0), dbias_ref = widen(dbias0);
      meg::cpu::layernorm_backward(dinp_ref.data(), dweight_ref.data(), dbias_ref.data(), widen(t.dout).data(),
                                   widen(t.inp).data(), widen(t.weight).data(), widen(mean_f).data(),
                                   widen(rstd_f).data(), N, C);

      // Scales. dinp = init + rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)): each term
      // with the row means taken over absolute values (their fp32 error is relative to those).
      // dweight = init + sum_i norm * dy, with |dy| * rstd * (|x| + |mean|) added for the error of
      // each recomputed norm; dbias = init + sum_i dy.
      std::vector<double> dinp_scale(NC), dweight_scale(C), dbias_scale(C);
      for (int c = 0; c < C; ++c) dweight_scale[c] = std::abs(double(dweight0[c])), dbias_scale[c] = std::abs(double(dbias0[c]));
      for (int i = 0; i < N; ++i) {
        const double m = mean_f[i], s = rstd_f[i];
        double dnorm_abs = 0, dnorm_norm_abs = 0;
        for (int c = 0; c < C; ++c) {
          const size_t k = size_t(i) * C + c;
          const double norm = (t.inp[k] - m) * s, dnorm = double(t.weight[c]) * t.dout[k];
          dnorm_abs += std::abs(dnorm);
          dnorm_norm_abs += std::abs(dnorm * norm);
          dweight_scale[c] += std::abs(double(t.dout[k])) * (std::abs(norm) + s * (std::abs(double(t.inp[k])) + std::abs(m)));
          dbias_scale[c] += std::abs(double(t.dout[k]));
        }
        dnorm_abs /= C, dnorm_norm_abs /= C;
        for (int c = 0; c < C; ++c) {
          const size_t k = size_t(i) * C + c;
          const double norm = (t.inp[k] - m) * s, dnorm = double(t.weight[c]) * t.dout[k];
          dinp_scale[k] = std::abs(double(dinp0[k])) +
                          s * (std::abs(dnorm) + dnorm_abs + (std::abs(norm) + s * std::abs(m)) * dnorm_norm_abs);
        }
      }

      DeviceArray inp(t.inp), weight(t.weight), dout(t.dout), mean(mean_f), rstd(rstd_f);
      DeviceArray dinp(dinp0), dweight(dweight0), dbias(dbias0);
      SECTION("all three gradients") {
        meg::cuda::layernorm_backward(dinp.get(), dweight.get(), dbias.get(), dout.get(), inp.get(), weight.get(),
                                      mean.get(), rstd.get(), N, C);
        check_close("dinp", dinp.download(), dinp_ref, dinp_scale, kRtol);
        check_close("dweight", dweight.download(), dweight_ref, dweight_scale, kRtolReduce);
        check_close("dbias", dbias.download(), dbias_ref, dbias_scale, kRtolReduce);
      }
      SECTION("null gradients are skipped") {
        // dinp null: dweight and dbias as before. Then dbias alone: dinp and dweight untouched.
        meg::cuda::layernorm_backward(nullptr, dweight.get(), nullptr, dout.get(), inp.get(), weight.get(),
                                      mean.get(), rstd.get(), N, C);
        check_close("dweight (alone)", dweight.download(), dweight_ref, dweight_scale, kRtolReduce);
        meg::cuda::layernorm_backward(nullptr, nullptr, dbias.get(), dout.get(), inp.get(), weight.get(),
                                      mean.get(), rstd.get(), N, C);
        check_close("dbias (alone)", dbias.download(), dbias_ref, dbias_scale, kRtolReduce);
        CHECK(dinp.download() == dinp0);
      }
    }
  }
}

namespace {

// GELU scales. Forward: 0.5 x (1 + tanh u) loses ~ulp(1) * 0.5|x| when tanh u is near -1, so the
// scale is |ref| + 0.5|x|. Backward: |init| + |dout| * (1 + |x| * du/dx), the size of its terms.
std::vector<double> gelu_forward_scale(const std::vector<float>& x, const std::vector<double>& ref) {
  std::vector<double> s(x.size());
  for (size_t i = 0; i < x.size(); ++i) s[i] = std::abs(ref[i]) + 0.5 * std::abs(double(x[i]));
  return s;
}

std::vector<double> gelu_backward_scale(const std::vector<float>& x, const std::vector<float>& dout,
                                        const std::vector<float>& init) {
  std::vector<double> s(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i], du = 0.7978845608028654 * (1 + 3 * 0.044715 * xi * xi);
    s[i] = std::abs(double(init[i])) + std::abs(double(dout[i])) * (1 + std::abs(xi) * du);
  }
  return s;
}

}  // namespace

TEST_CASE("CUDA gelu_forward and gelu_backward match the CPU reference", "[gpu]") {
  std::mt19937 rng(91011);
  for (int N : kRows) {
    for (int C : kChannels) {
      const size_t n = size_t(N) * C;
      INFO("n=" << n << " (N=" << N << " C=" << C << ")");
      // [-5, 5] reaches the tails, where tanh saturates and the forward nearly cancels.
      const auto x = random_floats(n, -5.0f, 5.0f, rng);
      const auto dout = random_floats(n, -1.0f, 1.0f, rng);
      const auto dinp0 = random_floats(n, -1.0f, 1.0f, rng);

      std::vector<double> out_ref(n), dinp_ref = widen(dinp0);
      meg::cpu::gelu_forward(out_ref.data(), widen(x).data(), n);
      meg::cpu::gelu_backward(dinp_ref.data(), widen(dout).data(), widen(x).data(), n);
      const auto fwd_scale = gelu_forward_scale(x, out_ref);
      const auto bwd_scale = gelu_backward_scale(x, dout, dinp0);

      DeviceArray inp(x), out(n), dy(dout), dinp(dinp0);
      SECTION("forward") {
        out.poison();
        meg::cuda::gelu_forward(out.get(), inp.get(), n);
        check_close("out", out.download(), out_ref, fwd_scale, kRtol);
      }
      SECTION("forward in place") {
        meg::cuda::gelu_forward(inp.get(), inp.get(), n);
        check_close("out (in place)", inp.download(), out_ref, fwd_scale, kRtol);
      }
      SECTION("backward accumulates") {
        meg::cuda::gelu_backward(dinp.get(), dy.get(), inp.get(), n);
        check_close("dinp", dinp.download(), dinp_ref, bwd_scale, kRtol);
      }
    }
  }
}

TEST_CASE("CUDA gelu takes the scalar path on misaligned pointers", "[gpu]") {
  // Views starting one float in: not 16-byte aligned, so no float4 accesses.
  std::mt19937 rng(1213);
  const size_t n = 1001;
  const auto x = random_floats(n + 1, -5.0f, 5.0f, rng);
  const auto dout = random_floats(n + 1, -1.0f, 1.0f, rng);
  const auto dinp0 = random_floats(n + 1, -1.0f, 1.0f, rng);
  const std::vector<float> xv(x.begin() + 1, x.end()), doutv(dout.begin() + 1, dout.end()),
      dinp0v(dinp0.begin() + 1, dinp0.end());

  std::vector<double> out_ref(n), dinp_ref = widen(dinp0v);
  meg::cpu::gelu_forward(out_ref.data(), widen(xv).data(), n);
  meg::cpu::gelu_backward(dinp_ref.data(), widen(doutv).data(), widen(xv).data(), n);

  DeviceArray inp(x), out(n + 1), dy(dout), dinp(dinp0);
  out.poison();
  meg::cuda::gelu_forward(out.get() + 1, inp.get() + 1, n);
  meg::cuda::gelu_backward(dinp.get() + 1, dy.get() + 1, inp.get() + 1, n);
  auto got = out.download();
  CHECK(std::isnan(got[0]));  // nothing written before the view
  check_close("out", {got.begin() + 1, got.end()}, out_ref, gelu_forward_scale(xv, out_ref), kRtol);
  auto dgot = dinp.download();
  CHECK(dgot[0] == dinp0[0]);
  check_close("dinp", {dgot.begin() + 1, dgot.end()}, dinp_ref, gelu_backward_scale(xv, doutv, dinp0v), kRtol);
}
