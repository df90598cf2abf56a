// The CUDA loss and optimizer kernels against the CPU reference ops: kernels/cross_entropy.cu
// (fused softmax cross-entropy and its gradient), kernels/adamw.cu (multi-tensor AdamW) and
// kernels/reduce.cu (sum of squares). The method is gpu_test_util.hpp's: inputs rounded to the
// activation type X, outputs poisoned, a double reference, per-element bounds from the size of
// the terms, and every launch run twice for the same bits.
//
// The bounds count roundings: u_X = unit_roundoff<X>() for each rounding to X, u = 2^-24 for each
// fp32 operation on the GPU, and subnormal_error<X>() for a result that underflows into X's
// subnormals.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "catch.hpp"
#include "gpu/gpu_test_util.hpp"
#include "ops/cpu/ops.hpp"
#include "ops/cuda/ops.hpp"

using namespace meg::test;

namespace {

constexpr double kU32 = 0x1p-24;  // unit roundoff of fp32, the GPU's arithmetic

// ---- cross-entropy -------------------------------------------------------------------------

struct CrossEntropyCase {
  int N, V, Vp;
  float spread;  // logits uniform in [-spread, spread]
};

// Targets in [0, V) with every fourth position ignored (-1), and the first and last columns used.
std::vector<int32_t> random_targets(int N, int V, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> t(N);
  for (int i = 0; i < N; ++i) t[i] = i % 4 == 3 ? -1 : dist(rng);
  t[0] = V - 1;
  if (N > 1) t[1] = 0;
  return t;
}

}  // namespace

TEMPLATE_TEST_CASE("CUDA cross_entropy_fused matches the CPU reference", "[gpu][loss]", float,
                   __nv_bfloat16, __half) {
  using X = TestType;
  const double ux = unit_roundoff<X>();
  std::mt19937 rng(2024);
  // GPT-2's padded vocabulary (16-byte packs, 47 padded columns); logits of +-30, where a naive
  // exp overflows fp16 and sum-exp loses everything but the max; widths that are not a multiple
  // of the pack (one element at a time); a vocabulary of one.
  const CrossEntropyCase cases[] = {{64, 50257, 50304, 4.0f}, {16, 50257, 50304, 30.0f},
                                    {9, 127, 128, 4.0f},      {33, 1000, 1003, 30.0f},
                                    {7, 37, 41, 4.0f},        {5, 1, 8, 4.0f}};
  for (const auto& c : cases) {
    const int N = c.N, V = c.V, Vp = c.Vp;
    const size_t NV = size_t(N) * Vp;
    INFO(meg::test::type_name<X>() << " N=" << N << " V=" << V << " Vp=" << Vp
                                   << " spread=" << c.spread);
    const auto logits_h = meg::test::round_to<X>(meg::test::random_floats(NV, -c.spread, c.spread, rng));
    const auto targets_h = random_targets(N, V, rng);
    const int count = int(std::count_if(targets_h.begin(), targets_h.end(), [](int32_t t) { return t >= 0; }));
    // The mean's gradient, times a loss scale for fp16 so that the gradients stay clear of its
    // subnormals.
    const float dloss = (std::is_same_v<X, __half> ? 1024.0f : 1.0f) / float(count);

    std::vector<double> loss_ref(N), grad_ref(NV);
    meg::cpu::cross_entropy_forward(loss_ref.data(), widen(logits_h).data(), targets_h.data(), N, V, Vp);
    // The CPU's backward takes the gradient of the mean: dloss * count per row over count rows.
    meg::cpu::cross_entropy_backward(grad_ref.data(), widen(logits_h).data(), targets_h.data(), N, V,
                                     Vp, double(dloss) * count);

    // Bounds. The row's sum of exp(x - max) is a sum of positive terms through at most ~100 fp32
    // roundings on any one path (a thread's ~13 packs, each adding W terms and rescaling the
    // running sum once; then two butterflies of 5 levels, each rescaling): 256 u relative,
    // counting the hardware exp2's ~4 u per term. So the loss log(sum) + max - x[target] is within
    // 256 u of 1 + |max| + |x[target]| + |loss|, its terms. Each exp(x - max) is taken as
    // 2^(x log2 e - max log2 e): the two products' roundings, amplified by exp, make a relative
    // (|x - max| + |max|) u. So the gradient dloss (p - onehot) is within (256 + |x - max| + |max|) u
    // of dloss (p + onehot), then the rounding to X; plus dloss 2^-126 where exp2 flushes a tiny
    // probability to zero. Ignored rows and padded columns must be exactly 0 (bound 0).
    std::vector<double> loss_bound(N, 0.0), grad_bound(NV, 0.0);
    for (int i = 0; i < N; ++i) {
      if (targets_h[i] < 0) continue;
      const float* row = logits_h.data() + size_t(i) * Vp;
      const double mx = *std::max_element(row, row + V);
      loss_bound[i] = 256 * kU32 * (1 + std::abs(mx) + std::abs(double(row[targets_h[i]])) + std::abs(loss_ref[i]));
      for (int j = 0; j < V; ++j) {
        const size_t k = size_t(i) * Vp + j;
        const double p = std::exp(row[j] - mx) / std::exp(loss_ref[i] + row[targets_h[i]] - mx);
        const double terms = double(dloss) * (p + (j == targets_h[i] ? 1.0 : 0.0));
        grad_bound[k] = ux * std::abs(grad_ref[k]) + (256 + (mx - row[j]) + std::abs(mx)) * kU32 * terms +
                        double(dloss) * 0x1p-126 + subnormal_error<X>();
      }
    }

    DeviceBuffer<X> logits(logits_h);
    DeviceBuffer<int32_t> targets{size_t(N)};
    targets.upload_raw(targets_h);
    DeviceBuffer<float> losses{size_t(N)};

    // Loss only: the logits are left alone.
    const auto logits_bits = logits.download_raw();
    losses.poison();
    meg::cuda::cross_entropy_fused(logits.get(), losses.get(), targets.get(), N, V, Vp, 0.0f, nullptr);
    const auto losses_first = losses.download_raw();
    meg::test::check_close("losses (dloss 0)", losses.download(), loss_ref, loss_bound, 1.0);
    CHECK(same_bits(logits_bits, logits.download_raw()));

    // Loss and gradient, twice from the same logits: the same bits both times, and the same
    // losses as without the gradient.
    losses.poison();
    meg::cuda::cross_entropy_fused(logits.get(), losses.get(), targets.get(), N, V, Vp, dloss, nullptr);
    const auto grad_first = logits.download_raw();
    CHECK(same_bits(losses_first, losses.download_raw()));
    meg::test::check_close("dlogits", logits.download(), grad_ref, grad_bound, 1.0);
    logits.upload_raw(logits_bits);
    losses.poison();
    meg::cuda::cross_entropy_fused(logits.get(), losses.get(), targets.get(), N, V, Vp, dloss, nullptr);
    CHECK(same_bits(grad_first, logits.download_raw()));
    CHECK(same_bits(losses_first, losses.download_raw()));
  }
}

// Vocabulary parallelism: the logits cut into RANKS column blocks, each "rank" computes its
// partials, the partials are gathered, and every rank combines them. Against the fused kernel on
// the whole row: the same losses on every rank (bit for bit among the ranks) and, block by block,
// the same gradient, up to the order in which the partials merge (a few fp32 roundings) and the
// rounding to X.
TEMPLATE_TEST_CASE("CUDA vocabulary-parallel cross-entropy matches the fused kernel", "[gpu][loss]", float,
                   __nv_bfloat16, __half) {
  using X = TestType;
  const double ux = unit_roundoff<X>();
  std::mt19937 rng(2027);
  // A rank of padding only (the last of 4 over V = 9 of Vp = 16), ranks of 2 and 4 over GPT-2's
  // padded vocabulary.
  const CrossEntropyCase cases[] = {{64, 50257, 50304, 4.0f}, {16, 50257, 50304, 30.0f}, {9, 9, 16, 4.0f}};
  for (const int ranks : {2, 4}) {
    for (const auto& c : cases) {
      const int N = c.N, V = c.V, Vp = c.Vp, Vr = Vp / ranks;
      INFO(type_name<X>() << " ranks=" << ranks << " N=" << N << " V=" << V << " Vp=" << Vp);
      const auto logits_h = round_to<X>(random_floats(size_t(N) * Vp, -c.spread, c.spread, rng));
      const auto targets_h = random_targets(N, V, rng);
      const float dloss = (std::is_same_v<X, __half> ? 1024.0f : 1.0f) / float(N);
      DeviceBuffer<int32_t> targets{size_t(N)};
      targets.upload_raw(targets_h);

      // The whole rows through the fused kernel.
      DeviceBuffer<X> whole(logits_h);
      DeviceBuffer<float> losses_whole{size_t(N)};
      meg::cuda::cross_entropy_fused(whole.get(), losses_whole.get(), targets.get(), N, V, Vp, dloss, nullptr);
      const auto grad_whole = whole.download();
      const auto loss_whole = losses_whole.download();

      // Each rank's columns, its partials into its block of the gathered array.
      std::vector<std::unique_ptr<DeviceBuffer<X>>> parts;
      DeviceBuffer<float> gathered{size_t(ranks) * N * 3};
      for (int r = 0; r < ranks; ++r) {
        std::vector<float> block(size_t(N) * Vr);
        for (int i = 0; i < N; ++i)
          std::copy_n(logits_h.begin() + std::ptrdiff_t(size_t(i) * Vp + size_t(r) * Vr), Vr,
                      block.begin() + std::ptrdiff_t(size_t(i) * Vr));
        parts.push_back(std::make_unique<DeviceBuffer<X>>(block));
        const int real = std::clamp(V - r * Vr, 0, Vr);
        meg::cuda::cross_entropy_partials(parts.back()->get(), gathered.get() + size_t(r) * N * 3, targets.get(), N,
                                          real, Vr, r * Vr, nullptr);
      }
      std::vector<float> first_losses;
      for (int r = 0; r < ranks; ++r) {
        const int real = std::clamp(V - r * Vr, 0, Vr);
        DeviceBuffer<float> losses{size_t(N)};
        losses.poison();
        meg::cuda::cross_entropy_parallel(parts[size_t(r)]->get(), losses.get(), gathered.get(), ranks, targets.get(), N,
                                          real, Vr, r * Vr, dloss, nullptr);
        const auto bits = losses.download_raw();
        if (r == 0) first_losses = bits;
        CHECK(same_bits(bits, first_losses));
        const auto loss = losses.download();
        const auto grad = parts[size_t(r)]->download();
        size_t bad = 0;
        for (int i = 0; i < N; ++i) {
          bad += !(std::abs(loss[size_t(i)] - loss_whole[size_t(i)]) <= 16 * kU32 * (1 + std::abs(loss_whole[size_t(i)])));
          for (int j = 0; j < Vr; ++j) {
            const double got = grad[size_t(i) * Vr + j], want = grad_whole[size_t(i) * Vp + size_t(r) * Vr + j];
            const bool zero = targets_h[size_t(i)] < 0 || r * Vr + j >= V;
            bad += zero ? got != 0.0 : !(std::abs(got - want) <= 2 * ux * std::abs(want) + 64 * kU32 * double(dloss) +
                                                                   subnormal_error<X>());
          }
        }
        CHECK(bad == 0);
      }
    }
  }
}

// ---- AdamW ---------------------------------------------------------------------------------

namespace {

// Three AdamW steps over flat arrays of L elements cut into SEGS_H, checked after each step
// against the CPU in double and in float.
template <typename X>
void check_adamw_steps(const std::vector<meg::cuda::AdamWSegment>& segs_h, size_t L, std::mt19937& rng) {
  constexpr double u = kU32;
  const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, grad_scale = 0.3f;

  std::vector<float> p_h = meg::test::random_floats(L, -1.0f, 1.0f, rng);
  std::vector<float> m_h = meg::test::random_floats(L, -0.1f, 0.1f, rng);
  std::vector<float> v_h = meg::test::random_floats(L, 1e-4f, 1e-2f, rng);
  const auto p0 = p_h, m0 = m_h, v0 = v_h;

  DeviceBuffer<float> params(p_h), m(m_h), v(v_h), grads(L);
  DeviceBuffer<X> params_x(L);
  DeviceBuffer<meg::cuda::AdamWSegment> segs(segs_h.size());
  segs.upload_raw(segs_h);
  params_x.poison();
  const auto x_poison = params_x.download_raw();

  for (int64_t t = 1; t <= 3; ++t) {
    INFO(meg::test::type_name<X>() << " step " << t);
    const auto g_h = meg::test::random_floats(L, -1.0f, 1.0f, rng);
    grads.upload(g_h);

    // Each step starts both sides from the GPU's state after the last one, so the bounds are
    // those of one step. The references: the CPU in double on the scaled gradient, and the CPU in
    // float on the gradient scaled in fp32 as the GPU scales it.
    std::vector<double> p_ref = widen(p_h), m_ref = widen(m_h), v_ref = widen(v_h);
    std::vector<float> p_f = p_h, m_f = m_h, v_f = v_h;
    std::vector<double> g_ref(L);
    std::vector<float> g_f(L);
    for (size_t i = 0; i < L; ++i) g_ref[i] = double(g_h[i]) * grad_scale, g_f[i] = g_h[i] * grad_scale;
    for (const auto& s : segs_h) {
      meg::cpu::adamw_step(p_ref.data() + s.offset, g_ref.data() + s.offset, m_ref.data() + s.offset,
                           v_ref.data() + s.offset, s.numel, double(lr), double(beta1), double(beta2),
                           double(eps), double(s.weight_decay), t);
      meg::cpu::adamw_step(p_f.data() + s.offset, g_f.data() + s.offset, m_f.data() + s.offset,
                           v_f.data() + s.offset, s.numel, lr, beta1, beta2, eps, s.weight_decay, t);
    }

    // Bounds of one fp32 step, g = grad * grad_scale rounded once:
    //   m' = b1 m + (1-b1) g: 4 roundings of its terms b1|m| + (1-b1)|g|;
    //   v' = b2 v + (1-b2) g^2: positive terms, 6 roundings of v' itself;
    //   update = (m'/c1) / (sqrt(v'/c2) + eps): m' (4), half of v' (3), c1 and c2 rounded to fp32
    //     (2), two divisions, the sqrt and the add (4): 13 roundings of its terms, m' by its
    //     terms; 16 taken;
    //   p' = p - lr (update + wd p): the update's error times lr, and 4 roundings of its terms.
    // Against the CPU in float, which is the double result rounded once: u |ref| more.
    const double c1 = 1.0 - std::pow(double(beta1), double(t)), c2 = 1.0 - std::pow(double(beta2), double(t));
    std::vector<double> p_bound(L, 0.0), m_bound(L, 0.0), v_bound(L, 0.0);
    for (const auto& s : segs_h) {
      for (size_t i = s.offset; i < s.offset + s.numel; ++i) {
        const double m_terms = beta1 * std::abs(double(m_h[i])) + (1.0 - beta1) * std::abs(g_ref[i]);
        const double upd_terms = (m_terms / c1) / (std::sqrt(v_ref[i] / c2) + eps);
        const double wd_p = s.weight_decay * std::abs(double(p_h[i]));
        m_bound[i] = 4 * u * m_terms;
        v_bound[i] = 6 * u * v_ref[i];
        p_bound[i] = 16 * u * lr * upd_terms + 4 * u * (std::abs(double(p_h[i])) + lr * (upd_terms + wd_p));
      }
    }
    auto plus_rounding = [&](std::vector<double> b, const std::vector<double>& ref) {
      for (size_t i = 0; i < b.size(); ++i) b[i] += u * std::abs(ref[i]);
      return b;
    };

    // Twice from the same state: the same bits. The second launch writes no compute copy.
    meg::cuda::adamw_step(params.get(), params_x.get(), grads.get(), m.get(), v.get(), segs.get(),
                          int(segs_h.size()), lr, beta1, beta2, eps, grad_scale, t, nullptr);
    const auto p_bits = params.download_raw(), m_bits = m.download_raw(), v_bits = v.download_raw();
    const auto x_bits = params_x.download_raw();
    params.upload(p_h), m.upload(m_h), v.upload(v_h);
    meg::cuda::adamw_step(params.get(), static_cast<X*>(nullptr), grads.get(), m.get(), v.get(), segs.get(),
                          int(segs_h.size()), lr, beta1, beta2, eps, grad_scale, t, nullptr);
    CHECK(same_bits(p_bits, params.download_raw()));
    CHECK(same_bits(m_bits, m.download_raw()));
    CHECK(same_bits(v_bits, v.download_raw()));

    p_h = params.download(), m_h = m.download(), v_h = v.download();
    meg::test::check_close("params vs double", p_h, p_ref, p_bound, 1.0);
    meg::test::check_close("m vs double", m_h, m_ref, m_bound, 1.0);
    meg::test::check_close("v vs double", v_h, v_ref, v_bound, 1.0);
    meg::test::check_close("params vs float", p_h, widen(p_f), plus_rounding(p_bound, p_ref), 1.0);
    meg::test::check_close("m vs float", m_h, widen(m_f), plus_rounding(m_bound, m_ref), 1.0);
    meg::test::check_close("v vs float", v_h, widen(v_f), plus_rounding(v_bound, v_ref), 1.0);

    // The compute copy is the new master rounded to X, exactly; the gaps keep their poison.
    size_t copy_bad = 0;
    std::vector<bool> in_segment(L, false);
    for (const auto& s : segs_h) std::fill_n(in_segment.begin() + s.offset, s.numel, true);
    for (size_t i = 0; i < L; ++i) {
      const X want = in_segment[i] ? meg::test::to_x<X>(p_h[i]) : x_poison[i];
      if (std::memcmp(&x_bits[i], &want, sizeof(X)) != 0) ++copy_bad;
    }
    CHECK(copy_bad == 0);
    size_t gap_bad = 0;
    for (size_t i = 0; i < L; ++i)
      if (!in_segment[i] && (p_h[i] != p0[i] || m_h[i] != m0[i] || v_h[i] != v0[i])) ++gap_bad;
    CHECK(gap_bad == 0);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("CUDA adamw_step matches the CPU reference over several steps", "[gpu][loss]",
                   float, __nv_bfloat16, __half) {
  std::mt19937 rng(777);
  SECTION("a few segments of every kind") {
    // A multiple of 4; a ragged tail; an offset that is not a multiple of 4 (one element at a
    // time); many chunks; a single element; out of order; weight decay on some. The gaps between
    // them ([5180, 5184) and the last 10 elements) must stay untouched.
    check_adamw_steps<TestType>({{0, 1000, 0.1f}, {1000, 4099, 0.0f}, {5103, 77, 0.1f},
                                 {5184, 300000, 0.1f}, {305185, 5, 0.05f}, {305184, 1, 0.0f}},
                                305200, rng);
  }
  SECTION("more segments than one tile of the segment table") {
    // 600 small segments of random sizes, offsets and decays, with random gaps between them.
    std::vector<meg::cuda::AdamWSegment> segs;
    std::uniform_int_distribution<size_t> size(1, 700), gap(0, 5);
    size_t offset = 0;
    for (int i = 0; i < 600; ++i) {
      offset += gap(rng);
      segs.push_back({offset, size(rng), i % 3 == 0 ? 0.0f : 0.1f});
      offset += segs.back().numel;
    }
    check_adamw_steps<TestType>(segs, offset + 3, rng);
  }
}

// ---- sum of squares ------------------------------------------------------------------------

namespace {

// sum_squares into a fresh double, with a poisoned scratch.
double gpu_sum_squares(const float* x, size_t n) {
  DeviceBuffer<double> out(1), scratch(meg::cuda::sum_squares_scratch(n));
  out.poison(), scratch.poison();
  meg::cuda::sum_squares(out.get(), x, n, scratch.get(), nullptr);
  return out.download_raw()[0];
}

// Squares and sums in double on both sides; a path through the GPU's sum is at most ~2^14 adds
// long for any n here (a thread's grid-stride loop, then two trees), so its relative error is
// under 2^14 * 2^-53 = 2^-39 of the sum (all terms positive). 2^-38 taken.
constexpr double kSumRtol = 0x1p-38;

}  // namespace

TEST_CASE("CUDA sum_squares matches a double sum, propagates NaN and Inf", "[gpu][loss]") {
  std::mt19937 rng(4242);
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(1000003)}) {
    INFO("n=" << n);
    const auto x = meg::test::random_floats(n + 1, -2.0f, 2.0f, rng);
    const std::vector<float> xv(x.begin() + 1, x.end());
    const double want = meg::cpu::grad_sum_squares(x.data(), n);
    const double want_view = meg::cpu::grad_sum_squares(xv.data(), n);
    DeviceBuffer<float> d(x);
    const double got = gpu_sum_squares(d.get(), n);
    CHECK(std::abs(got - want) <= kSumRtol * want);
    const double again = gpu_sum_squares(d.get(), n);
    CHECK(std::memcmp(&got, &again, sizeof got) == 0);
    // One float in: not 16-byte aligned, one element at a time.
    const double got_view = gpu_sum_squares(d.get() + 1, n);
    CHECK(std::abs(got_view - want_view) <= kSumRtol * want_view);
  }

  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto x = meg::test::random_floats(1000003, -2.0f, 2.0f, rng);
  DeviceBuffer<float> d(x);
  CHECK(gpu_sum_squares(d.get(), 1) == double(x[0]) * x[0]);
  x[500001] = nan;
  d.upload(x);
  CHECK(std::isnan(gpu_sum_squares(d.get(), x.size())));
  x[500001] = -inf;
  d.upload(x);
  CHECK(gpu_sum_squares(d.get(), x.size()) == INFINITY);
  x[1000002] = nan;  // the last element, in the ragged tail
  d.upload(x);
  CHECK(std::isnan(gpu_sum_squares(d.get(), x.size())));
}

TEST_CASE("CUDA sum_squares over more than 2^31 elements", "[gpu][loss]") {
  // 8.6 GB of one value (every byte 0x3F: 0.748...), with distinct values at indices past 2^31 and
  // at the very end, which 32-bit indexing would miss. Skipped where the GPU lacks the memory.
  const size_t n = (size_t(1) << 31) + 1029;
  size_t free_bytes = 0, total_bytes = 0;
  MEG_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < n * sizeof(float) + (size_t(1) << 30)) SKIP(free_bytes << " bytes free on the GPU");
  DeviceBuffer<float> d(n);
  MEG_CUDA_CHECK(cudaMemset(d.get(), 0x3F, n * sizeof(float)));
  float fill;
  std::memset(&fill, 0x3F, sizeof fill);
  const float big = 1000.0f, mid = -7.0f;
  MEG_CUDA_CHECK(cudaMemcpy(d.get() + n - 1, &big, sizeof big, cudaMemcpyHostToDevice));
  MEG_CUDA_CHECK(cudaMemcpy(d.get() + (size_t(1) << 31) + 3, &mid, sizeof mid, cudaMemcpyHostToDevice));
  const double want = double(n - 2) * (double(fill) * fill) + double(big) * big + double(mid) * mid;
  const double got = gpu_sum_squares(d.get(), n);
  CHECK(std::abs(got - want) <= kSumRtol * want);
  const double again = gpu_sum_squares(d.get(), n);
  CHECK(std::memcmp(&got, &again, sizeof got) == 0);
}
