// CPU reference ops: forwards against hand values and independent formulas, every backward
// against central finite differences. The ops are templates instantiated for float and double;
// gradient checks run the double instantiation (the very code the float path runs) so the finite
// differences are accurate enough for a tight tolerance, and a separate test checks that float
// agrees with double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <vector>

#include "catch.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "ops/cpu/few_rows.hpp"
#include "ops/cpu/ops.hpp"

using namespace meg::cpu;

namespace {

using Vec = std::vector<double>;

// Uniform in [lo,hi): random and (with probability one) never zero.
Vec random_vec(size_t n, std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<float> to_float(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double max_abs_diff(const Vec& a, const Vec& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

template <typename A, typename B>
double max_rel_diff(const A& a, const B& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::abs(double(a[i]) - double(b[i])) / std::max(1.0, std::abs(double(b[i]))));
  return m;
}

// The worst error of `analytic`, the claimed gradient of f with respect to x, against central
// differences, relative to max(1, |numeric|). f reads x (captured by reference elsewhere).
double fd_error(Vec& x, const Vec& analytic, const std::function<double()>& f) {
  const double h = 1e-5;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double fp = f();
    x[i] = saved - h;
    const double fm = f();
    x[i] = saved;
    const double numeric = (fp - fm) / (2 * h);
    worst = std::max(worst, std::abs(numeric - analytic[i]) / std::max(1.0, std::abs(numeric)));
  }
  return worst;
}

// In double, central differences are good to ~1e-10 on these small problems; a wrong gradient is
// off by orders of magnitude more.
constexpr double kFdTol = 1e-6;

}  // namespace

// ---- linear --------------------------------------------------------------------------------------

TEST_CASE("linear forward matches a naive product, backward matches finite differences", "[ops]") {
  std::mt19937 rng(1);
  struct Shape { int N, C, OC; };
  for (const Shape& shape : {Shape{5, 12, 7}, Shape{1, 3, 1}, Shape{6, 8, 16}}) {
    const int N = shape.N, C = shape.C, OC = shape.OC;  // lambdas below capture them
    CAPTURE(N, C, OC);
    Vec inp = random_vec(size_t(N) * C, rng), W = random_vec(size_t(OC) * C, rng),
        bias = random_vec(OC, rng), w = random_vec(size_t(N) * OC, rng);
    Vec out(size_t(N) * OC);

    linear_forward(out.data(), inp.data(), W.data(), bias.data(), N, C, OC);
    Vec naive(out.size());
    for (int i = 0; i < N; ++i)
      for (int o = 0; o < OC; ++o) {
        double s = bias[o];
        for (int c = 0; c < C; ++c) s += inp[i * C + c] * W[o * C + c];
        naive[i * OC + o] = s;
      }
    CHECK(max_abs_diff(out, naive) < 1e-12);

    linear_forward(out.data(), inp.data(), W.data(), nullptr, N, C, OC);
    for (int i = 0; i < N; ++i)
      for (int o = 0; o < OC; ++o) naive[i * OC + o] -= bias[o];
    CHECK(max_abs_diff(out, naive) < 1e-12);

    auto loss = [&] {
      linear_forward(out.data(), inp.data(), W.data(), bias.data(), N, C, OC);
      return dot(out, w);
    };
    Vec dinp(inp.size(), 0.0), dW(W.size(), 0.0), dbias(OC, 0.0);
    linear_backward(dinp.data(), dW.data(), dbias.data(), w.data(), inp.data(), W.data(), N, C, OC);
    CHECK(fd_error(inp, dinp, loss) < kFdTol);
    CHECK(fd_error(W, dW, loss) < kFdTol);
    CHECK(fd_error(bias, dbias, loss) < kFdTol);

    // The backward accumulates: a second call doubles every gradient.
    Vec dinp2 = dinp, dW2 = dW, dbias2 = dbias;
    linear_backward(dinp2.data(), dW2.data(), dbias2.data(), w.data(), inp.data(), W.data(), N, C,
                    OC);
    for (auto& x : dinp) x *= 2;
    for (auto& x : dW) x *= 2;
    for (auto& x : dbias) x *= 2;
    CHECK(max_abs_diff(dinp2, dinp) < 1e-12);
    CHECK(max_abs_diff(dW2, dW) < 1e-12);
    CHECK(max_abs_diff(dbias2, dbias) < 1e-12);

    // Null gradients are skipped.
    Vec only_dW(W.size(), 0.0);
    linear_backward<double>(nullptr, only_dW.data(), nullptr, w.data(), inp.data(), W.data(), N, C,
                            OC);
    for (auto& x : dW) x /= 2;
    CHECK(max_abs_diff(only_dW, dW) < 1e-12);
  }
}

// A decode step of fp32 rows reads each weight row once for all of them (few_rows.hpp): close to
// the exact product, and bit for bit the same row alone or whatever rows share the step, whatever
// the thread count, and on the AVX2 and portable paths. 21 rows: two groups of 8 and a partial
// one. C = 37 and 40 leave a partial vector of 5 and none; C = 1040 makes blocks of 12 weight rows,
// 11 of them over OC = 131, more rows than the threads' runs divide evenly.
TEST_CASE("few-row products match a naive product and give each row the same bits alone or in company",
          "[ops]") {
  std::mt19937 rng(7);
  constexpr int OC = 131, kRows = 21;
  for (const int C : {37, 40, 1040}) {
    CAPTURE(C);
    const std::vector<float> W = to_float(random_vec(size_t(OC) * C, rng));
    const std::vector<float> rows = to_float(random_vec(size_t(kRows) * C, rng));
    // Rows [first, first + N) of ROWS, as one step.
    auto step = [&](int first, int N, bool portable) {
      std::vector<float> out(size_t(N) * OC, 0.5f);  // the product adds to what is there
      meg::cpu::detail::few_rows_product(out.data(), rows.data() + size_t(first) * C, W.data(), N, C, OC, portable);
      return out;
    };
    const std::vector<float> all = step(0, kRows, false);
    const double tolerance = 1e-5 * std::max(1, C / 40);  // float sums of C products of [-1, 1]
    for (int n = 0; n < kRows; ++n)
      for (int o = 0; o < OC; ++o) {
        double s = 0.5;
        for (int c = 0; c < C; ++c) s += double(rows[size_t(n) * C + c]) * W[size_t(o) * C + c];
        CHECK(std::abs(all[size_t(n) * OC + o] - s) < tolerance);
      }
    // Row 11 alone and in steps of 2 to 21 rows: the same bits wherever it sits among them.
    constexpr int kRow = 11;
    for (int N = 1; N <= kRows; ++N) {
      const int first = std::clamp(kRow - N + 1 + N / 3, 0, kRows - N);  // row 11 last, or further in
      const std::vector<float> out = step(first, N, false);
      for (int o = 0; o < OC; ++o) CHECK(out[size_t(kRow - first) * OC + o] == all[kRow * size_t(OC) + o]);
    }
    CHECK(step(0, kRows, true) == all);
    CHECK(step(kRow, 1, true) == std::vector<float>(all.begin() + kRow * OC, all.begin() + (kRow + 1) * OC));
    meg::set_num_threads(1);
    CHECK(step(0, kRows, false) == all);
    meg::set_num_threads(3);
    CHECK(step(0, kRows, false) == all);
    meg::set_num_threads(0);
  }
  std::vector<float> out(OC), inp(4), W(size_t(OC) * 4);
  CHECK_THROWS_AS(meg::cpu::detail::few_rows_product(out.data(), inp.data(), W.data(), 0, 4, OC),
                  std::invalid_argument);
}

// ---- norms ---------------------------------------------------------------------------------------

TEST_CASE("layernorm normalises each row and its backward matches finite differences", "[ops]") {
  std::mt19937 rng(2);
  for (const auto& shape : {std::pair{6, 12}, std::pair{3, 7}, std::pair{1, 2}}) {
    const int N = shape.first, C = shape.second;  // lambdas below capture them
    CAPTURE(N, C);
    // Rows with an offset and a spread, so mean and variance both matter.
    Vec inp = random_vec(size_t(N) * C, rng, 0.5, 3.0), weight = random_vec(C, rng),
        bias = random_vec(C, rng), w = random_vec(size_t(N) * C, rng);
    Vec out(inp.size()), mean(N), rstd(N);

    // Before the affine part: mean 0, variance 1 per row.
    Vec ones(C, 1.0);
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), ones.data(), nullptr, N, C,
                      1e-12);
    for (int i = 0; i < N; ++i) {
      double m = 0, v = 0, xm = 0;
      for (int c = 0; c < C; ++c) m += out[i * C + c], xm += inp[i * C + c];
      m /= C;
      for (int c = 0; c < C; ++c) v += (out[i * C + c] - m) * (out[i * C + c] - m);
      CHECK(std::abs(m) < 1e-12);
      CHECK(std::abs(v / C - 1.0) < 1e-9);
      CHECK(std::abs(mean[i] - xm / C) < 1e-12);
    }

    const double eps = 1e-5;
    auto loss = [&] {
      layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(),
                        N, C, eps);
      return dot(out, w);
    };
    loss();  // leaves mean and rstd of the unperturbed input for the backward
    Vec dinp(inp.size(), 0.0), dweight(C, 0.0), dbias(C, 0.0);
    layernorm_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(),
                       weight.data(), mean.data(), rstd.data(), N, C);
    CHECK(fd_error(inp, dinp, loss) < kFdTol);
    CHECK(fd_error(weight, dweight, loss) < kFdTol);
    CHECK(fd_error(bias, dbias, loss) < kFdTol);
  }
}

TEST_CASE("rmsnorm gives unit mean square and its backward matches finite differences", "[ops]") {
  std::mt19937 rng(3);
  for (const auto& shape : {std::pair{6, 12}, std::pair{3, 7}, std::pair{2, 1}}) {
    const int N = shape.first, C = shape.second;  // lambdas below capture them
    CAPTURE(N, C);
    Vec inp = random_vec(size_t(N) * C, rng, -2.0, 2.0), weight = random_vec(C, rng),
        w = random_vec(size_t(N) * C, rng);
    Vec out(inp.size()), rstd(N);

    Vec ones(C, 1.0);
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), ones.data(), N, C, 1e-12);
    for (int i = 0; i < N; ++i) {
      double ms = 0, xs = 0;
      for (int c = 0; c < C; ++c) {
        ms += out[i * C + c] * out[i * C + c];
        xs += inp[i * C + c] * inp[i * C + c];
      }
      CHECK(std::abs(ms / C - 1.0) < 1e-9);
      CHECK(std::abs(rstd[i] - 1.0 / std::sqrt(xs / C)) < 1e-9 * rstd[i]);
    }

    const double eps = 1e-6;
    auto loss = [&] {
      rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, eps);
      return dot(out, w);
    };
    loss();
    Vec dinp(inp.size(), 0.0), dweight(C, 0.0);
    rmsnorm_backward(dinp.data(), dweight.data(), w.data(), inp.data(), weight.data(), rstd.data(), N,
                     C);
    CHECK(fd_error(inp, dinp, loss) < kFdTol);
    CHECK(fd_error(weight, dweight, loss) < kFdTol);
  }
}

// ---- activations ---------------------------------------------------------------------------------

TEST_CASE("gelu is close to the exact erf form and its backward matches finite differences",
          "[ops]") {
  std::mt19937 rng(4);
  const size_t n = 37;
  Vec inp = random_vec(n, rng, -4.0, 4.0), w = random_vec(n, rng), out(n);

  gelu_forward(out.data(), inp.data(), n);
  for (size_t i = 0; i < n; ++i) {
    const double exact = 0.5 * inp[i] * (1.0 + std::erf(inp[i] / std::sqrt(2.0)));
    CHECK(std::abs(out[i] - exact) < 1e-3);  // the tanh form is within ~2e-4 of it
  }
  double one = 1.0, g1 = 0;
  gelu_forward(&g1, &one, 1);
  CHECK(std::abs(g1 - 0.8411919906082768) < 1e-15);

  auto loss = [&] {
    gelu_forward(out.data(), inp.data(), n);
    return dot(out, w);
  };
  Vec dinp(n, 0.0);
  gelu_backward(dinp.data(), w.data(), inp.data(), n);
  CHECK(fd_error(inp, dinp, loss) < kFdTol);
}

TEST_CASE("swiglu is silu(gate) * up and its backward matches finite differences", "[ops]") {
  std::mt19937 rng(5);
  const int N = 3, H = 5;
  Vec inp = random_vec(size_t(N) * 2 * H, rng, -3.0, 3.0), w = random_vec(size_t(N) * H, rng);
  Vec out(size_t(N) * H);

  swiglu_forward(out.data(), inp.data(), N, H);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < H; ++j) {
      const double g = inp[i * 2 * H + j], u = inp[i * 2 * H + H + j];
      CHECK(std::abs(out[i * H + j] - g / (1.0 + std::exp(-g)) * u) < 1e-14);
    }

  auto loss = [&] {
    swiglu_forward(out.data(), inp.data(), N, H);
    return dot(out, w);
  };
  Vec dinp(inp.size(), 0.0);
  swiglu_backward(dinp.data(), w.data(), inp.data(), N, H);
  CHECK(fd_error(inp, dinp, loss) < kFdTol);
}

// ---- rope ----------------------------------------------------------------------------------------

TEST_CASE("rope rotates rotate_half pairs by position and its backward matches finite differences",
          "[ops]") {
  std::mt19937 rng(6);

  SECTION("hand values: head size 4, position 1") {
    // Pairs (0,2) and (1,3); angles t * 10000^(-0/4) = 1 and t * 10000^(-2/4) = 0.01.
    const double x[8] = {0.3, -0.7, 1.1, 0.4, /* t=1: */ 0.3, -0.7, 1.1, 0.4};
    double y[8];
    rope_forward(y, x, 1, 2, 1, 4, 10000.0);
    for (int i = 0; i < 4; ++i) CHECK(y[i] == x[i]);  // position 0 is not rotated
    CHECK(std::abs(y[4] - (0.3 * std::cos(1.0) - 1.1 * std::sin(1.0))) < 1e-15);
    CHECK(std::abs(y[6] - (1.1 * std::cos(1.0) + 0.3 * std::sin(1.0))) < 1e-15);
    CHECK(std::abs(y[5] - (-0.7 * std::cos(0.01) - 0.4 * std::sin(0.01))) < 1e-15);
    CHECK(std::abs(y[7] - (0.4 * std::cos(0.01) + -0.7 * std::sin(0.01))) < 1e-15);
  }

  SECTION("scores depend only on the relative position; in place equals out of place") {
    const int T = 6, HS = 8;
    const Vec qv = random_vec(HS, rng), kv = random_vec(HS, rng);
    Vec q(size_t(T) * HS), k(size_t(T) * HS);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < HS; ++i) q[t * HS + i] = qv[i], k[t * HS + i] = kv[i];
    Vec qr(q.size()), kr(k.size());
    rope_forward(qr.data(), q.data(), 1, T, 1, HS, 500.0);
    rope_forward(kr.data(), k.data(), 1, T, 1, HS, 500.0);
    auto score = [&](int t1, int t2) {
      double s = 0;
      for (int i = 0; i < HS; ++i) s += qr[t1 * HS + i] * kr[t2 * HS + i];
      return s;
    };
    CHECK(std::abs(score(3, 1) - score(5, 3)) < 1e-12);
    CHECK(std::abs(score(2, 2) - score(0, 0)) < 1e-12);
    rope_forward(q.data(), q.data(), 1, T, 1, HS, 500.0);
    CHECK(max_abs_diff(q, qr) == 0.0);
  }

  SECTION("backward") {
    struct Shape { int B, T, NH, HS; };
    for (const Shape& shape : {Shape{2, 5, 3, 8}, Shape{1, 3, 1, 2}, Shape{1, 4, 2, 6}}) {
      const int B = shape.B, T = shape.T, NH = shape.NH, HS = shape.HS;  // lambdas below capture them
      CAPTURE(B, T, NH, HS);
      const size_t n = size_t(B) * T * NH * HS;
      Vec inp = random_vec(n, rng), w = random_vec(n, rng), out(n);
      auto loss = [&] {
        rope_forward(out.data(), inp.data(), B, T, NH, HS);
        return dot(out, w);
      };
      Vec dinp(n, 0.0);
      rope_backward(dinp.data(), w.data(), B, T, NH, HS);
      CHECK(fd_error(inp, dinp, loss) < kFdTol);
    }
  }
}

// ---- attention -----------------------------------------------------------------------------------

namespace {

// Straightforward causal GQA attention, one output at a time, independent of the GEMM version;
// with WINDOW >= 0, query t sees the keys t2 with t - WINDOW <= t2 <= t (Megatron's window).
Vec naive_attention(const Vec& q, const Vec& k, const Vec& v, int B, int T, int NH, int NKV,
                    int HS, int window = -1) {
  Vec out(size_t(B) * T * NH * HS, 0.0);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) {
        const int g = h / (NH / NKV), first = window < 0 ? 0 : std::max(0, t - window);
        const double* qi = &q[((size_t(b) * T + t) * NH + h) * HS];
        Vec s(t + 1);
        double mx = -1e300, sum = 0;
        for (int t2 = first; t2 <= t; ++t2) {
          const double* kj = &k[((size_t(b) * T + t2) * NKV + g) * HS];
          s[t2] = 0;
          for (int i = 0; i < HS; ++i) s[t2] += qi[i] * kj[i] / std::sqrt(double(HS));
          mx = std::max(mx, s[t2]);
        }
        for (int t2 = first; t2 <= t; ++t2) sum += (s[t2] = std::exp(s[t2] - mx));
        double* o = &out[((size_t(b) * T + t) * NH + h) * HS];
        for (int t2 = first; t2 <= t; ++t2) {
          const double* vj = &v[((size_t(b) * T + t2) * NKV + g) * HS];
          for (int i = 0; i < HS; ++i) o[i] += s[t2] / sum * vj[i];
        }
      }
  return out;
}

}  // namespace

TEST_CASE("attention matches a naive version, is causal, and its backward matches finite "
          "differences", "[ops]") {
  std::mt19937 rng(7);
  struct Shape { int B, T, NH, NKV, HS; };
  for (const Shape& shape : {Shape{2, 5, 3, 1, 4}, Shape{1, 4, 4, 2, 3}, Shape{1, 3, 2, 2, 5}, Shape{2, 1, 2, 1, 3}}) {
    const int B = shape.B, T = shape.T, NH = shape.NH, NKV = shape.NKV, HS = shape.HS;  // lambdas capture them
    CAPTURE(B, T, NH, NKV, HS);
    const size_t nq = size_t(B) * T * NH * HS, nk = size_t(B) * T * NKV * HS;
    Vec q = random_vec(nq, rng, -2, 2), k = random_vec(nk, rng, -2, 2), v = random_vec(nk, rng),
        w = random_vec(nq, rng);
    Vec out(nq), att(size_t(B) * NH * T * T);

    attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, NH, NKV, HS);
    CHECK(max_abs_diff(out, naive_attention(q, k, v, B, T, NH, NKV, HS)) < 1e-12);

    // Probabilities: rows sum to one, nothing above the diagonal.
    for (int r = 0; r < B * NH * T; ++r) {
      const int t = r % T;
      double sum = 0;
      for (int t2 = 0; t2 < T; ++t2) {
        if (t2 > t) CHECK(att[size_t(r) * T + t2] == 0.0);
        sum += att[size_t(r) * T + t2];
      }
      CHECK(std::abs(sum - 1.0) < 1e-12);
    }

    // With T = 1 each head attends only to itself: out is v of the head's group.
    if (T == 1)
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
          for (int i = 0; i < HS; ++i)
            CHECK(std::abs(out[(size_t(b) * NH + h) * HS + i] -
                           v[(size_t(b) * NKV + h / (NH / NKV)) * HS + i]) < 1e-15);

    // Causal: changing the last position of q, k and v leaves every earlier output unchanged.
    {
      Vec q2 = q, k2 = k, v2 = v, out2(nq), att2(att.size());
      for (int b = 0; b < B; ++b) {
        for (int i = 0; i < NH * HS; ++i) q2[(size_t(b) * T + T - 1) * NH * HS + i] += 1.5;
        for (int i = 0; i < NKV * HS; ++i) {
          k2[(size_t(b) * T + T - 1) * NKV * HS + i] -= 0.7;
          v2[(size_t(b) * T + T - 1) * NKV * HS + i] += 2.0;
        }
      }
      attention_forward(out2.data(), att2.data(), q2.data(), k2.data(), v2.data(), B, T, NH, NKV, HS);
      for (int b = 0; b < B; ++b)
        for (size_t i = 0; i < size_t(T - 1) * NH * HS; ++i)
          CHECK(out2[size_t(b) * T * NH * HS + i] == out[size_t(b) * T * NH * HS + i]);
    }

    auto loss = [&] {
      attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, NH, NKV, HS);
      return dot(out, w);
    };
    loss();
    Vec dq(nq, 0.0), dk(nk, 0.0), dv(nk, 0.0);
    attention_backward(dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(), v.data(),
                       att.data(), B, T, NH, NKV, HS);
    CHECK(fd_error(q, dq, loss) < kFdTol);
    CHECK(fd_error(k, dk, loss) < kFdTol);
    CHECK(fd_error(v, dv, loss) < kFdTol);
  }
}

TEST_CASE("sliding-window attention matches a naive masked version, forward and backward", "[ops][window]") {
  std::mt19937 rng(17);
  const int B = 2, T = 7, NH = 4, NKV = 2, HS = 3;
  const size_t nq = size_t(B) * T * NH * HS, nk = size_t(B) * T * NKV * HS;
  Vec q = random_vec(nq, rng, -2, 2), k = random_vec(nk, rng, -2, 2), v = random_vec(nk, rng), w = random_vec(nq, rng);
  Vec out(nq), att(size_t(B) * NH * T * T);
  for (const int window : {0, 1, 2, 5, T - 1, T + 3}) {
    CAPTURE(window);
    attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, NH, NKV, HS, 0, {}, window);
    CHECK(max_abs_diff(out, naive_attention(q, k, v, B, T, NH, NKV, HS, window)) < 1e-12);
    // Probabilities are zero outside the window, ones with window 0 (each query sees itself).
    for (int r = 0; r < B * NH * T; ++r)
      for (int t = r % T, t2 = 0; t2 < T; ++t2) {
        const double p = att[size_t(r) * T + t2];
        if (t2 > t || t - t2 > window) CHECK(p == 0.0);
        if (window == 0 && t2 == t) CHECK(p == 1.0);
      }
    // A window covering the sequence is full causal attention, bit for bit.
    if (window >= T - 1) {
      Vec full(nq), full_att(att.size());
      attention_forward(full.data(), full_att.data(), q.data(), k.data(), v.data(), B, T, NH, NKV, HS);
      CHECK(full == out);
    }
    auto loss = [&] {
      attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, NH, NKV, HS, 0, {}, window);
      return dot(out, w);
    };
    loss();
    Vec dq(nq, 0.0), dk(nk, 0.0), dv(nk, 0.0);
    attention_backward(dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(), v.data(), att.data(), B, T,
                       NH, NKV, HS, 0, {}, window);
    CHECK(fd_error(q, dq, loss) < kFdTol);
    CHECK(fd_error(k, dk, loss) < kFdTol);
    CHECK(fd_error(v, dv, loss) < kFdTol);
  }
}

// ---- loss ----------------------------------------------------------------------------------------

TEST_CASE("cross entropy ignores padding and -1 targets; backward matches finite differences",
          "[ops]") {
  std::mt19937 rng(8);
  const int N = 6, V = 11, Vp = 13;

  SECTION("uniform logits give log(V), whatever the padded columns hold") {
    Vec logits(size_t(N) * Vp, 0.25), losses(N);
    for (int i = 0; i < N; ++i) logits[i * Vp + V] = logits[i * Vp + V + 1] = 1e3;
    const std::vector<int32_t> targets = {0, 3, -1, 10, 7, -1};
    const double mean = cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
    CHECK(std::abs(mean - std::log(double(V))) < 1e-12);
    CHECK(losses[2] == 0.0);
    CHECK(std::abs(losses[3] - std::log(double(V))) < 1e-12);
  }

  SECTION("a hand case: two classes") {
    const double logits[2] = {2.0, -1.0};
    const int32_t target = 1;
    double loss = 0, dlogits[2];
    CHECK(std::abs(cross_entropy_forward(&loss, logits, &target, 1, 2, 2) -
                   std::log(1.0 + std::exp(3.0))) < 1e-12);
    cross_entropy_backward(dlogits, logits, &target, 1, 2, 2);
    const double p0 = 1.0 / (1.0 + std::exp(-3.0));
    CHECK(std::abs(dlogits[0] - p0) < 1e-12);
    CHECK(std::abs(dlogits[1] - (1.0 - p0 - 1.0)) < 1e-12);
  }

  SECTION("no counted target gives zero loss and zero gradient") {
    Vec logits = random_vec(size_t(2) * Vp, rng), dlogits(logits.size(), 9.0);
    const std::vector<int32_t> targets = {-1, -1};
    CHECK(cross_entropy_forward<double>(nullptr, logits.data(), targets.data(), 2, V, Vp) == 0.0);
    cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), 2, V, Vp);
    for (double d : dlogits) CHECK(d == 0.0);
  }

  SECTION("targets outside the vocabulary are rejected") {
    Vec logits = random_vec(Vp, rng), dlogits(Vp);
    for (int32_t bad : {V, V + 1, -2}) {
      CHECK_THROWS_AS(cross_entropy_forward<double>(nullptr, logits.data(), &bad, 1, V, Vp),
                      meg::InputError);
      CHECK_THROWS_AS(cross_entropy_backward(dlogits.data(), logits.data(), &bad, 1, V, Vp),
                      meg::InputError);
    }
  }

  SECTION("backward") {
    Vec logits = random_vec(size_t(N) * Vp, rng, -4, 4), dlogits(logits.size(), 5.0);
    const std::vector<int32_t> targets = {4, -1, 0, 10, 10, 2};
    const double dloss = 0.37;
    auto loss = [&] {
      return dloss * cross_entropy_forward<double>(nullptr, logits.data(), targets.data(), N, V, Vp);
    };
    cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), N, V, Vp, dloss);
    CHECK(fd_error(logits, dlogits, loss) < kFdTol);
    for (int i = 0; i < N; ++i) {
      CHECK(dlogits[i * Vp + V] == 0.0);
      CHECK(dlogits[i * Vp + V + 1] == 0.0);
    }
    for (int j = 0; j < Vp; ++j) CHECK(dlogits[1 * Vp + j] == 0.0);
  }
}

// ---- embedding -----------------------------------------------------------------------------------

TEST_CASE("embedding looks up token and position rows; backward matches finite differences",
          "[ops]") {
  std::mt19937 rng(9);
  const int B = 2, T = 3, C = 4, V = 5, maxT = 4;
  const std::vector<int32_t> tokens = {1, 4, 1, 0, 1, 3};  // repeats, so dwte rows accumulate
  Vec wte = random_vec(size_t(V) * C, rng), wpe = random_vec(size_t(maxT) * C, rng),
      w = random_vec(size_t(B) * T * C, rng), out(size_t(B) * T * C);

  embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V);
  // b=1, t=2 holds token 3 at position 2
  for (int c = 0; c < C; ++c) CHECK(out[(1 * T + 2) * C + c] == wte[3 * C + c] + wpe[2 * C + c]);
  embedding_forward(out.data(), tokens.data(), wte.data(), nullptr, B, T, C, V);
  for (int c = 0; c < C; ++c) CHECK(out[(1 * T + 2) * C + c] == wte[3 * C + c]);

  for (bool with_wpe : {true, false}) {
    CAPTURE(with_wpe);
    auto loss = [&] {
      embedding_forward(out.data(), tokens.data(), wte.data(), with_wpe ? wpe.data() : nullptr, B,
                        T, C, V);
      return dot(out, w);
    };
    Vec dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
    embedding_backward(dwte.data(), with_wpe ? dwpe.data() : nullptr, w.data(), tokens.data(), B, T,
                       C);
    CHECK(fd_error(wte, dwte, loss) < kFdTol);
    if (with_wpe) CHECK(fd_error(wpe, dwpe, loss) < kFdTol);
  }

  const int32_t bad[2] = {2, V};
  CHECK_THROWS_AS(embedding_forward(out.data(), bad, wte.data(), wpe.data(), 1, 2, C, V),
                  meg::InputError);
}

// ---- adamw and clipping --------------------------------------------------------------------------

TEST_CASE("adamw takes the hand-computed step", "[ops]") {
  SECTION("step 3 with moments and weight decay") {
    // m = 0.9*0.1 + 0.1*(-1) = -0.01;  v = 0.95*0.2 + 0.05*1 = 0.24
    // p = 2 - 0.01 * ((-0.01/(1-0.9^3)) / (sqrt(0.24/(1-0.95^3)) + 1e-6) + 0.1*2) = 1.99828446090159
    double p = 2.0, g = -1.0, m = 0.1, v = 0.2;
    adamw_step(&p, &g, &m, &v, 1, 0.01, 0.9, 0.95, 1e-6, 0.1, 3);
    CHECK(std::abs(m - -0.01) < 1e-15);
    CHECK(std::abs(v - 0.24) < 1e-15);
    CHECK(std::abs(p - 1.9982844609015915) < 1e-14);
  }

  SECTION("the first step moves every parameter by about lr, against the gradient's sign") {
    // At t = 1 the corrected moments are g and g^2, so the update is g / (|g| + eps) = sign(g).
    std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {0.3f, -4.0f, 1e-3f}, m(3, 0.0f), v(3, 0.0f);
    adamw_step(p.data(), g.data(), m.data(), v.data(), 3, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
    CHECK(std::abs(p[0] - 0.9) < 1e-6);
    CHECK(std::abs(p[1] - -1.9) < 1e-6);
    CHECK(std::abs(p[2] - 0.4) < 1e-5);  // eps shortens this step by a relative 1e-5
  }

  SECTION("gradient norm and clipping") {
    std::vector<float> g = {3.0f, -4.0f, 12.0f};
    CHECK(grad_sum_squares(g.data(), g.size()) == 169.0);
    scale_inplace(g.data(), g.size(), 1.0f / 13.0f);
    CHECK(std::abs(std::sqrt(grad_sum_squares(g.data(), g.size())) - 1.0) < 1e-6);
    CHECK(std::abs(g[1] - -4.0 / 13.0) < 1e-7);
  }
}

// ---- float against double ------------------------------------------------------------------------

TEST_CASE("the float instantiations agree with double", "[ops]") {
  std::mt19937 rng(10);
  const int B = 2, T = 7, C = 24, NH = 4, NKV = 2, HS = 6, OC = 40, V = 37, Vp = 40;
  const int N = B * T;
  // Inputs are drawn in double and rounded to float once; double runs on the rounded values too,
  // so the only difference left is float arithmetic inside the ops.
  auto rounded = [&](size_t n, double lo = -1, double hi = 1) {
    Vec v = random_vec(n, rng, lo, hi);
    for (auto& x : v) x = float(x);
    return v;
  };
  const double tol = 1e-5;

  Vec inp = rounded(size_t(N) * C), W = rounded(size_t(OC) * C), bias = rounded(OC),
      dout = rounded(size_t(N) * OC);
  Vec out(size_t(N) * OC), dinp(inp.size(), 0.0), dW(W.size(), 0.0), dbias(OC, 0.0);
  auto fi = to_float(inp), fW = to_float(W), fb = to_float(bias), fdout = to_float(dout);
  std::vector<float> fout(out.size()), fdinp(dinp.size(), 0.0f), fdW(dW.size(), 0.0f), fdb(OC, 0.0f);
  linear_forward(out.data(), inp.data(), W.data(), bias.data(), N, C, OC);
  linear_forward(fout.data(), fi.data(), fW.data(), fb.data(), N, C, OC);
  CHECK(max_rel_diff(fout, out) < tol);
  linear_backward(dinp.data(), dW.data(), dbias.data(), dout.data(), inp.data(), W.data(), N, C, OC);
  linear_backward(fdinp.data(), fdW.data(), fdb.data(), fdout.data(), fi.data(), fW.data(), N, C, OC);
  CHECK(max_rel_diff(fdinp, dinp) < tol);
  CHECK(max_rel_diff(fdW, dW) < tol);
  CHECK(max_rel_diff(fdb, dbias) < tol);

  // layernorm
  Vec x = rounded(size_t(N) * C, 1, 4), g = rounded(C), y(x.size()), mean(N), rstd(N);
  Vec dy = rounded(x.size()), dx(x.size(), 0.0), dg(C, 0.0);
  auto fx = to_float(x), fg = to_float(g), fdy = to_float(dy);
  std::vector<float> fy(y.size()), fmean(N), frstd(N), fdx(dx.size(), 0.0f), fdg(C, 0.0f);
  layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), nullptr, N, C, 1e-5);
  layernorm_forward(fy.data(), fmean.data(), frstd.data(), fx.data(), fg.data(), nullptr, N, C, 1e-5);
  CHECK(max_rel_diff(fy, y) < tol);
  layernorm_backward(dx.data(), dg.data(), nullptr, dy.data(), x.data(), g.data(), mean.data(),
                     rstd.data(), N, C);
  layernorm_backward(fdx.data(), fdg.data(), nullptr, fdy.data(), fx.data(), fg.data(), fmean.data(),
                     frstd.data(), N, C);
  CHECK(max_rel_diff(fdx, dx) < tol);
  CHECK(max_rel_diff(fdg, dg) < tol);

  // attention
  const size_t nq = size_t(B) * T * NH * HS, nk = size_t(B) * T * NKV * HS;
  Vec q = rounded(nq, -2, 2), k = rounded(nk, -2, 2), v = rounded(nk), da = rounded(nq);
  Vec ao(nq), att(size_t(B) * NH * T * T), dq(nq, 0.0), dk(nk, 0.0), dv(nk, 0.0);
  auto fq = to_float(q), fk = to_float(k), fv = to_float(v), fda = to_float(da);
  std::vector<float> fao(nq), fatt(att.size()), fdq(nq, 0.0f), fdk(nk, 0.0f), fdv(nk, 0.0f);
  attention_forward(ao.data(), att.data(), q.data(), k.data(), v.data(), B, T, NH, NKV, HS);
  attention_forward(fao.data(), fatt.data(), fq.data(), fk.data(), fv.data(), B, T, NH, NKV, HS);
  CHECK(max_rel_diff(fao, ao) < tol);
  attention_backward(dq.data(), dk.data(), dv.data(), da.data(), q.data(), k.data(), v.data(),
                     att.data(), B, T, NH, NKV, HS);
  attention_backward(fdq.data(), fdk.data(), fdv.data(), fda.data(), fq.data(), fk.data(), fv.data(),
                     fatt.data(), B, T, NH, NKV, HS);
  CHECK(max_rel_diff(fdq, dq) < tol);
  CHECK(max_rel_diff(fdk, dk) < tol);
  CHECK(max_rel_diff(fdv, dv) < tol);

  // cross entropy
  Vec logits = rounded(size_t(N) * Vp, -5, 5), dlogits(logits.size());
  auto flogits = to_float(logits);
  std::vector<float> fdlogits(logits.size());
  std::vector<int32_t> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = i % 5 == 4 ? -1 : int32_t(rng() % V);
  const double l64 = cross_entropy_forward<double>(nullptr, logits.data(), targets.data(), N, V, Vp);
  const double l32 = cross_entropy_forward<float>(nullptr, flogits.data(), targets.data(), N, V, Vp);
  CHECK(std::abs(l32 - l64) < tol * l64);
  cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), N, V, Vp);
  cross_entropy_backward(fdlogits.data(), flogits.data(), targets.data(), N, V, Vp);
  CHECK(max_rel_diff(fdlogits, dlogits) < 1e-7);  // entries are O(1/count); compare absolutely
}

TEST_CASE("dropout drops a fraction p, scales the rest, and depends only on its key", "[ops]") {
  const size_t n = size_t(1) << 20;
  const std::vector<double> ones(n, 1.0);
  std::vector<double> out(n), out4(n);
  for (double p : {0.1, 0.5}) {
    INFO("p " << p);
    const DropoutKey key{7, 3, 1, 5};
    meg::set_num_threads(1);
    dropout_forward(out.data(), ones.data(), n, p, key);
    meg::set_num_threads(4);
    dropout_forward(out4.data(), ones.data(), n, p, key);
    meg::set_num_threads(0);
    CHECK(out == out4);
    size_t dropped = 0;
    bool scaled = true;
    for (double x : out) {
      if (x == 0) ++dropped;
      else scaled = scaled && x == 1.0 / (1.0 - p);
    }
    CHECK(scaled);
    const double frac = double(dropped) / double(n);
    // The binomial standard deviation is below 5e-4 here.
    CHECK(std::abs(frac - p) < 3e-3);
    // The backward masks the gradient with the same mask and accumulates.
    std::vector<double> din(n, 1.0);
    dropout_backward(din.data(), ones.data(), n, p, key);
    bool same_mask = true;
    for (size_t i = 0; i < n; ++i) same_mask = same_mask && din[i] == 1.0 + out[i];
    CHECK(same_mask);
    // Another key (any of its four parts) gives another mask.
    for (const DropoutKey other : {DropoutKey{8, 3, 1, 5}, DropoutKey{7, 4, 1, 5},
                                        DropoutKey{7, 3, 2, 5}, DropoutKey{7, 3, 1, 6}}) {
      dropout_forward(out4.data(), ones.data(), n, p, other);
      CHECK(out4 != out);
    }
  }
  // p = 0 copies.
  std::vector<double> x(100);
  for (size_t i = 0; i < x.size(); ++i) x[i] = double(i) - 3.5;
  std::vector<double> y(100);
  dropout_forward(y.data(), x.data(), x.size(), 0.0, DropoutKey{});
  CHECK(y == x);
}

TEST_CASE("attention dropout drops the probabilities the forward's key names", "[ops]") {
  const int B = 2, T = 6, NH = 4, NKV = 2, HS = 4;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> nd(0.0, 1.0);
  auto rnd = [&](size_t n) {
    std::vector<double> v(n);
    for (auto& x : v) x = nd(rng);
    return v;
  };
  const auto q = rnd(size_t(B) * T * NH * HS), k = rnd(size_t(B) * T * NKV * HS),
             v = rnd(size_t(B) * T * NKV * HS);
  std::vector<double> out(q.size()), att(size_t(B) * NH * T * T), out_d(q.size()),
      att_d(att.size());
  const double p = 0.3;
  const DropoutKey key{1, 2, 3, 4};
  attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, NH, NKV, HS);
  attention_forward(out_d.data(), att_d.data(), q.data(), k.data(), v.data(), B, T, NH, NKV,
                         HS, p, key);
  CHECK(att_d == att);  // the undropped probabilities are saved
  // out = (P o M / (1 - p)) V, naively.
  std::vector<double> Pd(att.size());
  dropout_forward(Pd.data(), att.data(), att.size(), p, key);
  double worst = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t)
        for (int d = 0; d < HS; ++d) {
          double s = 0;
          for (int t2 = 0; t2 < T; ++t2)
            s += Pd[((size_t(b) * NH + h) * T + t) * T + t2] *
                 v[(size_t(b) * T + t2) * NKV * HS + size_t(h / (NH / NKV)) * HS + d];
          worst = std::max(worst, std::abs(s - out_d[(size_t(b) * T + t) * NH * HS + size_t(h) * HS + d]));
        }
  CHECK(worst < 1e-12);
}
