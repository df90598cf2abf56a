// The CUDA elementwise ops (kernels/elementwise.cu: add, cast_from_float, bias_backward), RoPE
// (kernels/rope.cu) and dropout (kernels/dropout.cu) against the CPU reference, for X = fp32, bf16
// and fp16, with gpu_test_util.hpp's method: inputs rounded to X, outputs poisoned, accumulated
// gradients pre-filled with random values, element-wise bounds. Views that start one element in
// check the paths for misaligned pointers.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpu/gpu_test_util.hpp"
#include "ops/cpu/ops.hpp"
#include "ops/cuda/ops.hpp"

using namespace meg::test;

namespace {

// Lengths: a single value, a ragged tail after whole vectors, and ~1M values (many blocks).
const size_t kLengths[] = {1, 7, 4097 * 3 + 1, 1 << 20};

template <typename T>
std::vector<T> drop_first(const std::vector<T>& v) {
  return {v.begin() + 1, v.end()};
}

}  // namespace

TEMPLATE_TEST_CASE("CUDA add matches the CPU sum, also in place and misaligned", "[gpu][kernels]",
                   float, __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(11);
  for (size_t n : kLengths) {
    INFO(type_name<X>() << " n=" << n);
    // One extra value in front, for the view that starts one element in.
    const auto a = round_to<X>(random_floats(n + 1, -2.0f, 2.0f, rng));
    const auto b = round_to<X>(random_floats(n + 1, -2.0f, 2.0f, rng));
    std::vector<double> want(n + 1), scale(n + 1);
    for (size_t i = 0; i <= n; ++i) {
      want[i] = double(a[i]) + b[i];
      scale[i] = std::abs(double(a[i])) + std::abs(double(b[i]));
    }
    // One fp32 addition rounded to X: unit_roundoff<X>() of |a + b| <= |a| + |b| (for bf16 and
    // fp16 inputs the fp32 sum is exact and only the rounding to X remains).
    const double rtol = unit_roundoff<X>();

    DeviceBuffer<X> d_a(a), d_b(b), d_out(n + 1);
    d_out.poison();
    meg::cuda::add(d_out.get(), d_a.get(), d_b.get(), n + 1, nullptr);
    check_close("out", d_out.download(), want, scale, rtol);

    d_out.poison();
    meg::cuda::add(d_out.get() + 1, d_a.get() + 1, d_b.get() + 1, n, nullptr);
    const auto got = d_out.download();
    CHECK(std::isnan(got[0]));  // nothing written before the view
    check_close("out (misaligned)", drop_first(got), drop_first(want), drop_first(scale), rtol);

    meg::cuda::add(d_a.get(), d_a.get(), d_b.get(), n + 1, nullptr);
    check_close("out (in place)", d_a.download(), want, scale, rtol);
  }
}

TEMPLATE_TEST_CASE("CUDA cast_from_float rounds to nearest like the host", "[gpu][kernels]", float,
                   __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(12);
  for (size_t n : kLengths) {
    INFO(type_name<X>() << " n=" << n);
    const auto v = random_floats(n + 1, -3.0f, 3.0f, rng);
    // The host's round-to-nearest-even conversion, which the device's must equal: bound 0.
    const auto want = widen(round_to<X>(v));
    DeviceBuffer<float> d_inp(v);
    DeviceBuffer<X> d_out(n + 1);
    d_out.poison();
    meg::cuda::cast_from_float(d_out.get(), d_inp.get(), n + 1, nullptr);
    check_close("out", d_out.download(), want, 1.0, 0.0);

    d_out.poison();
    meg::cuda::cast_from_float(d_out.get() + 1, d_inp.get() + 1, n, nullptr);
    const auto got = d_out.download();
    CHECK(std::isnan(got[0]));
    check_close("out (misaligned)", drop_first(got), drop_first(want), 1.0, 0.0);
  }
}

TEMPLATE_TEST_CASE("CUDA bias_backward is the column sum, accumulates, repeats", "[gpu][kernels]",
                   float, __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(13);
  for (int N : {1, 7, 300, 4097}) {
    for (int OC : {3, 768, 1601}) {
      INFO(type_name<X>() << " N=" << N << " OC=" << OC);
      const auto dout = round_to<X>(random_floats(size_t(N) * OC, -1.0f, 1.0f, rng));
      const auto dbias0 = random_floats(OC, -1.0f, 1.0f, rng);
      // The reference: a double column sum. The bound: an fp32 chain of at most ~40 adds per
      // addend (its chunk's row lane, 8 lanes, the chunks' reduction), 2.4e-6 of the sum of
      // absolute values for N = 4097; 1e-5 leaves a 4x margin. X is only the input here.
      std::vector<double> want = widen(dbias0), scale(OC);
      for (int c = 0; c < OC; ++c) scale[c] = std::abs(double(dbias0[c]));
      for (int i = 0; i < N; ++i)
        for (int c = 0; c < OC; ++c) {
          want[c] += dout[size_t(i) * OC + c];
          scale[c] += std::abs(double(dout[size_t(i) * OC + c]));
        }

      DeviceBuffer<X> d_dout(dout);
      DeviceBuffer<float> d_dbias(dbias0), scratch(meg::cuda::bias_backward_scratch(N, OC));
      scratch.poison();
      meg::cuda::bias_backward(d_dbias.get(), d_dout.get(), N, OC, scratch.get(), nullptr);
      const auto first = d_dbias.download_raw();
      check_close("dbias", d_dbias.download(), want, scale, 1e-5);

      d_dbias.upload(dbias0);
      scratch.poison();
      meg::cuda::bias_backward(d_dbias.get(), d_dout.get(), N, OC, scratch.get(), nullptr);
      CHECK(same_bits(d_dbias.download_raw(), first));
    }
  }
}

namespace {

struct RopeShape {
  int B, T, NH, NKV, HS;
};

// HS = 64 and 128 take the vector path for every type, HS = 8 for fp32 only, HS = 6 none; NKV < NH
// is grouped-query attention's layout.
const RopeShape kRopeShapes[] = {
    {1, 1, 2, 2, 8}, {2, 7, 4, 2, 64}, {3, 33, 12, 12, 64}, {1, 257, 4, 1, 6}, {2, 65, 8, 2, 128}};

// Copies heads [h0, h0 + heads) of every row of qkv [N, width] into a [N, heads, HS] array.
std::vector<double> take_heads(const std::vector<float>& qkv, int N, int width, int h0, int heads,
                               int HS) {
  std::vector<double> out(size_t(N) * heads * HS);
  for (int r = 0; r < N; ++r)
    for (int e = 0; e < heads * HS; ++e)
      out[(size_t(r) * heads) * HS + e] = qkv[size_t(r) * width + size_t(h0) * HS + e];
  return out;
}

// The element's scale, |x_i| + |x_pair|: the size of the two terms each output is made of.
std::vector<double> pair_scale(const std::vector<double>& x, int HS) {
  std::vector<double> s(x.size());
  const int half = HS / 2;
  for (size_t k = 0; k < x.size(); ++k) {
    const size_t i = k % HS, pair = i < size_t(half) ? k + half : k - half;
    s[k] = std::abs(x[k]) + std::abs(x[pair]);
  }
  return s;
}

}  // namespace

TEMPLATE_TEST_CASE("CUDA rope rotates q and k in place like the CPU, and leaves v alone",
                   "[gpu][kernels]", float, __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(14);
  const double theta = 10000;
  // cos and sin rounded to fp32 (2^-24 each, relative to the |x| they multiply) and two fp32
  // products and a sum (3 * 2^-24), then one rounding to X: unit_roundoff<X>() + 5 * 2^-24 of
  // |x_i| + |x_pair|.
  const double rtol = unit_roundoff<X>() + 5 * 0x1p-24;
  for (const auto& s : kRopeShapes) {
    INFO(type_name<X>() << " B=" << s.B << " T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV
                        << " HS=" << s.HS);
    const int N = s.B * s.T, width = (s.NH + 2 * s.NKV) * s.HS;
    const auto qkv = round_to<X>(random_floats(size_t(N) * width, -2.0f, 2.0f, rng));
    const auto q = take_heads(qkv, N, width, 0, s.NH, s.HS);
    const auto k = take_heads(qkv, N, width, s.NH, s.NKV, s.HS);

    // The table may be longer than T (it is built once for the longest sequence).
    const auto table = meg::cuda::rope_table(s.T + 5, s.HS, theta);
    DeviceBuffer<float> d_table(table);
    DeviceBuffer<X> d_qkv(qkv);

    for (bool backward : {false, true}) {
      INFO((backward ? "backward" : "forward"));
      std::vector<double> q_ref(q.size()), k_ref(k.size());  // zeros: the CPU backward adds
      if (backward) {
        meg::cpu::rope_backward(q_ref.data(), q.data(), s.B, s.T, s.NH, s.HS, theta);
        meg::cpu::rope_backward(k_ref.data(), k.data(), s.B, s.T, s.NKV, s.HS, theta);
        d_qkv.upload(qkv);
        meg::cuda::rope_backward(d_qkv.get(), d_table.get(), s.B, s.T, s.NH, s.NKV, s.HS, nullptr);
      } else {
        meg::cpu::rope_forward(q_ref.data(), q.data(), s.B, s.T, s.NH, s.HS, theta);
        meg::cpu::rope_forward(k_ref.data(), k.data(), s.B, s.T, s.NKV, s.HS, theta);
        d_qkv.upload(qkv);
        meg::cuda::rope_forward(d_qkv.get(), d_table.get(), s.B, s.T, s.NH, s.NKV, s.HS, nullptr);
      }
      const auto got = d_qkv.download();
      const auto gq = take_heads(got, N, width, 0, s.NH, s.HS);
      const auto gk = take_heads(got, N, width, s.NH, s.NKV, s.HS);
      check_close_x<X>("q", {gq.begin(), gq.end()}, q_ref, pair_scale(q, s.HS), rtol);
      check_close_x<X>("k", {gk.begin(), gk.end()}, k_ref, pair_scale(k, s.HS), rtol);
      const auto v_in = take_heads(qkv, N, width, s.NH + s.NKV, s.NKV, s.HS);
      const auto v_out = take_heads(got, N, width, s.NH + s.NKV, s.NKV, s.HS);
      CHECK(v_in == v_out);
    }
  }
}

TEMPLATE_TEST_CASE("CUDA dropout_apply drops what the CPU drops, with the CPU's values",
                   "[gpu][kernels]", float, __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(15);
  for (size_t n : kLengths) {
    for (double p : {0.1, 0.5}) {
      const meg::cpu::DropoutKey key{rng(), rng(), rng() % 8, rng() % 100};
      INFO(type_name<X>() << " n=" << n << " p=" << p << " seed=" << key.seed);
      // Values of either sign, away from zero so that no input rounds to zero in X.
      auto x = random_floats(n + 1, 0.25f, 2.0f, rng);
      for (auto& v : x) v = rng() % 2 ? v : -v;
      x = round_to<X>(x);

      // The CPU in fp32 (the GPU's arithmetic: x * float(1 / (1 - p))), then rounded to X: the
      // GPU must give exactly these values. The CPU in double gives the zero pattern to match.
      std::vector<float> want_f(n + 1);
      meg::cpu::dropout_forward(want_f.data(), x.data(), n + 1, p, key);
      const auto want = widen(round_to<X>(want_f));
      std::vector<double> want_d(n + 1);
      meg::cpu::dropout_forward(want_d.data(), widen(x).data(), n + 1, p, key);
      const uint64_t stream_key = meg::cpu::dropout_stream(key);

      DeviceBuffer<X> d_inp(x), d_out(n + 1);
      d_out.poison();
      meg::cuda::dropout_apply(d_out.get(), d_inp.get(), n + 1, p, stream_key, nullptr);
      const auto got = d_out.download();
      check_close("out", got, want, 1.0, 0.0);
      size_t zero_mismatch = 0;
      for (size_t i = 0; i <= n; ++i) zero_mismatch += (got[i] == 0) != (want_d[i] == 0);
      CHECK(zero_mismatch == 0);

      // In place gives the same; a view one element in is element i + 1 of the array, so it is
      // checked against the CPU's array of n values from that view (index 0 = element 1).
      meg::cuda::dropout_apply(d_inp.get(), d_inp.get(), n + 1, p, stream_key, nullptr);
      check_close("out (in place)", d_inp.download(), want, 1.0, 0.0);
      d_inp.upload(x);
      d_out.poison();
      meg::cuda::dropout_apply(d_out.get() + 1, d_inp.get() + 1, n, p, stream_key, nullptr);
      std::vector<float> view_f(n);
      meg::cpu::dropout_forward(view_f.data(), x.data() + 1, n, p, key);
      const auto got_view = d_out.download();
      CHECK(std::isnan(got_view[0]));
      check_close("out (misaligned)", drop_first(got_view), widen(round_to<X>(view_f)), 1.0, 0.0);
    }
  }
}

// A sequence-parallel rank applies dropout to its rows of the stream only, passing the index of its
// first element: its values must be exactly its slice of the whole array's (the same masks as one
// process), from a separate, aligned buffer (the vector path) and from a misaligned view.
TEMPLATE_TEST_CASE("CUDA dropout_apply with an element offset equals the slice of the whole array's",
                   "[gpu][kernels]", float, __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(16);
  for (size_t n : kLengths) {
    const meg::cpu::DropoutKey key{rng(), rng(), rng() % 8, rng() % 100};
    const uint64_t stream_key = meg::cpu::dropout_stream(key);
    const auto x = round_to<X>(random_floats(n, 0.25f, 2.0f, rng));
    DeviceBuffer<X> d_whole(x);
    meg::cuda::dropout_apply(d_whole.get(), d_whole.get(), n, 0.5, stream_key, nullptr);
    const auto whole = d_whole.download();
    // Two ranks' halves (a ragged second one when n is odd), and a slice at an odd offset.
    for (size_t first : {size_t(0), n / 2, n / 3 + 1}) {
      if (first >= n) continue;
      INFO(type_name<X>() << " n=" << n << " first=" << first);
      const std::vector<float> part(x.begin() + std::ptrdiff_t(first), x.end());
      const std::vector<float> want(whole.begin() + std::ptrdiff_t(first), whole.end());
      DeviceBuffer<X> d_part(part), d_out(part.size() + 1);
      d_out.poison();
      meg::cuda::dropout_apply(d_out.get(), d_part.get(), part.size(), 0.5, stream_key, nullptr, first);
      const auto got = d_out.download();
      check_close("slice", {got.begin(), got.end() - 1}, widen(want), 1.0, 0.0);
      d_out.poison();
      meg::cuda::dropout_apply(d_out.get() + 1, d_part.get(), part.size(), 0.5, stream_key, nullptr, first);
      check_close("slice (misaligned)", drop_first(d_out.download()), widen(want), 1.0, 0.0);
    }
  }
}
