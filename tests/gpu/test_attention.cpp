// The CUDA attention of kernels/attention.cu against the CPU reference ops/cpu/attention.cpp.
//
// Method (gpu_test_util.hpp): random non-zero inputs rounded to the activation type first, outputs
// poisoned with NaN before the launch, the reference instantiated for double. The CPU reference
// takes separate q, k, v arrays and returns the probabilities, not the log-sum-exp: the test
// gathers q, k and v out of its qkv array and computes the reference lse itself, in double.
//
// Bounds. fp32 runs the fallback, exact fp32 arithmetic: every element within 2e-5 of the largest
// reference magnitude of its tensor (the longest sums, 800 terms of dk for T = 200 and 4 heads per
// group, stay near 1e-6). bf16 and fp16 run the tensor-core path for head sizes 64 and 128, where
// the probabilities and dS are rounded to the activation type before their products and the
// outputs are rounded on the way out: those are judged by the relative L2 error of each tensor
// (floored, see kFloor), plus a loose per-element sanity bound (16 unit roundoffs of the largest
// magnitude) that catches single wrong elements and NaN. lse is fp32 in every path and is checked
// per element.
//
// Attention dropout is checked the same way against the CPU reference with dropout, given the same
// key: the GPU must drop exactly the CPU's elements (a single element dropped differently moves an
// output by a probability times 1/(1-p), far beyond the bounds).
//
// Sliding windows (Megatron's --window-size (W, 0)) against the CPU reference's mask: windows of 0
// and 1 key back, windows ending mid-tile and on tile boundaries of the tensor-core path, and
// windows as long as the sequence or longer (the full causal attention, bit for bit).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpu_test_util.hpp"
#include "ops/cpu/ops.hpp"
#include "ops/cuda/ops.hpp"

namespace {

using namespace meg::test;

constexpr double kRtolFp32 = 2e-5;
constexpr double kRtolLse = 5e-5;  // of max(1, |lse|): fp32 scores (tensor-core sums too), sums, log

template <typename X>
constexpr double l2_bound() {
  if constexpr (std::is_same_v<X, __nv_bfloat16>) return 1e-2;
  else return 2e-3;
}

struct Shape {
  int B, T, NH, NKV, HS;
  int window = -1;  // the sliding window, -1 for none
  int width() const { return (NH + 2 * NKV) * HS; }  // a row of qkv
};

std::string describe(const Shape& s) {
  std::ostringstream os;
  os << "B=" << s.B << " T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV << " HS=" << s.HS << " window=" << s.window;
  return os.str();
}

// The reference's inputs, gathered out of qkv [B, T, (NH + 2*NKV) * HS].
struct Heads {
  std::vector<double> q, k, v;  // [B, T, NH, HS], [B, T, NKV, HS] twice
};

Heads split_qkv(const std::vector<float>& qkv, const Shape& s) {
  Heads h;
  const size_t rows = size_t(s.B) * s.T;
  for (size_t r = 0; r < rows; ++r) {
    const float* row = qkv.data() + r * s.width();
    h.q.insert(h.q.end(), row, row + s.NH * s.HS);
    h.k.insert(h.k.end(), row + s.NH * s.HS, row + (s.NH + s.NKV) * s.HS);
    h.v.insert(h.v.end(), row + (s.NH + s.NKV) * s.HS, row + s.width());
  }
  return h;
}

// The reverse: dq, dk, dv laid out as a dqkv row.
std::vector<double> join_qkv(const std::vector<double>& q, const std::vector<double>& k,
                             const std::vector<double>& v, const Shape& s) {
  std::vector<double> out;
  const size_t rows = size_t(s.B) * s.T;
  const size_t nq = size_t(s.NH) * s.HS, nk = size_t(s.NKV) * s.HS;
  for (size_t r = 0; r < rows; ++r) {
    out.insert(out.end(), q.begin() + r * nq, q.begin() + (r + 1) * nq);
    out.insert(out.end(), k.begin() + r * nk, k.begin() + (r + 1) * nk);
    out.insert(out.end(), v.begin() + r * nk, v.begin() + (r + 1) * nk);
  }
  return out;
}

// lse[b, h, t] = log sum_{t2 <= t} exp(q.k / sqrt(HS)) over the keys of the window, max-subtracted,
// in double.
std::vector<double> reference_lse(const Heads& x, const Shape& s) {
  std::vector<double> lse(size_t(s.B) * s.NH * s.T), row(s.T);
  const double scale = 1.0 / std::sqrt(double(s.HS));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      const int g = h / (s.NH / s.NKV);
      for (int t = 0; t < s.T; ++t) {
        const double* q = x.q.data() + ((size_t(b) * s.T + t) * s.NH + h) * s.HS;
        const int first = s.window < 0 ? 0 : std::max(0, t - s.window);
        double mx = -INFINITY;
        for (int t2 = first; t2 <= t; ++t2) {
          const double* k = x.k.data() + ((size_t(b) * s.T + t2) * s.NKV + g) * s.HS;
          double dot = 0;
          for (int d = 0; d < s.HS; ++d) dot += q[d] * k[d];
          row[t2] = dot * scale;
          mx = std::max(mx, row[t2]);
        }
        double sum = 0;
        for (int t2 = first; t2 <= t; ++t2) sum += std::exp(row[t2] - mx);
        lse[(size_t(b) * s.NH + h) * s.T + t] = mx + std::log(sum);
      }
    }
  return lse;
}

// Elements [begin, begin + n) of every row of width W: one of q, k, v out of a qkv-shaped array.
template <typename T>
std::vector<T> columns(const std::vector<T>& a, size_t W, size_t begin, size_t n) {
  std::vector<T> out;
  for (size_t r = 0; r < a.size() / W; ++r)
    out.insert(out.end(), a.begin() + r * W + begin, a.begin() + r * W + begin + n);
  return out;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// A tensor can be zero in exact arithmetic (dq and dk for T = 1, where p = 1 and dS = 0), where the
// GPU leaves a rounding residue of 1e-7; magnitudes are judged against at least kFloor, a small
// fraction of this test's typical gradients (values of order 1).
constexpr double kFloor = 1e-3;

// relative_l2 with ||want|| floored at the norm of a tensor of kFloor's.
double l2_error(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, kFloor * kFloor * double(want.size())));
}

template <typename X>
void check_tensor(const std::string& what, const std::vector<float>& got,
                  const std::vector<double>& want) {
  const double scale = std::max(max_abs(want), kFloor);
  if constexpr (std::is_same_v<X, float>) {
    check_close(what, got, want, scale, kRtolFp32);
  } else {
    const double err = l2_error(got, want);
    INFO(what << ": relative L2 error " << err << ", bound " << l2_bound<X>());
    CHECK(err < l2_bound<X>());
    check_close(what, got, want, scale, 16 * unit_roundoff<X>());
  }
}

// Inputs of one case: qkv and dout, already rounded to X.
struct Inputs {
  std::vector<float> qkv, dout;
};

template <typename X>
Inputs random_inputs(const Shape& s, unsigned seed) {
  std::mt19937 rng(seed);
  // Scores of a few units: a peaked but not one-hot softmax.
  Inputs in;
  in.qkv = round_to<X>(random_floats(size_t(s.B) * s.T * s.width(), -2.0f, 2.0f, rng));
  in.dout = round_to<X>(random_floats(size_t(s.B) * s.T * s.NH * s.HS, -1.0f, 1.0f, rng));
  return in;
}

// Attention dropout of one case: probability and key (p = 0: none).
struct Drop {
  double p = 0;
  meg::cpu::DropoutKey key;
};

// Forward and backward on the GPU; returns out, lse and dqkv.
struct GpuRun {
  std::vector<float> out, lse, dqkv;
};

template <typename X>
GpuRun run_gpu(const Inputs& in, const Shape& s, const Drop& drop) {
  const uint64_t stream = meg::cpu::dropout_stream(drop.key);
  DeviceBuffer<X> qkv(in.qkv), dout(in.dout);
  DeviceBuffer<X> out(size_t(s.B) * s.T * s.NH * s.HS), dqkv(in.qkv.size());
  DeviceBuffer<float> lse(size_t(s.B) * s.NH * s.T);
  DeviceBuffer<float> scratch(meg::cuda::attention_backward_scratch(s.B, s.T, s.NH));
  out.poison();
  lse.poison();
  dqkv.poison();
  scratch.poison();
  meg::cuda::attention_forward<X>(out.get(), lse.get(), qkv.get(), s.B, s.T, s.NH, s.NKV, s.HS, 0,
                                  drop.p, stream, s.window);
  meg::cuda::attention_backward<X>(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(), s.B,
                                   s.T, s.NH, s.NKV, s.HS, scratch.get(), 0, drop.p, stream, s.window);
  return {out.download(), lse.download(), dqkv.download()};
}

template <typename X>
void check_case(const Shape& s, unsigned seed, const Drop& drop = {}) {
  INFO(type_name<X>() << " " << describe(s) << " dropout " << drop.p);
  const Inputs in = random_inputs<X>(s, seed);

  const Heads x = split_qkv(in.qkv, s);
  std::vector<double> out(size_t(s.B) * s.T * s.NH * s.HS);
  std::vector<double> att(size_t(s.B) * s.NH * s.T * s.T);
  meg::cpu::attention_forward<double>(out.data(), att.data(), x.q.data(), x.k.data(), x.v.data(),
                                      s.B, s.T, s.NH, s.NKV, s.HS, drop.p, drop.key, s.window);
  std::vector<double> dq(x.q.size()), dk(x.k.size()), dv(x.v.size());
  const std::vector<double> dout = widen(in.dout);
  meg::cpu::attention_backward<double>(dq.data(), dk.data(), dv.data(), dout.data(), x.q.data(),
                                       x.k.data(), x.v.data(), att.data(), s.B, s.T, s.NH, s.NKV,
                                       s.HS, drop.p, drop.key, s.window);
  const std::vector<double> lse = reference_lse(x, s);  // of the undropped softmax either way
  const std::vector<double> dqkv = join_qkv(dq, dk, dv, s);

  const GpuRun gpu = run_gpu<X>(in, s, drop);
  check_tensor<X>("out", gpu.out, out);
  std::vector<double> lse_scale(lse.size());
  for (size_t i = 0; i < lse.size(); ++i) lse_scale[i] = std::max(1.0, std::abs(lse[i]));
  check_close("lse", gpu.lse, lse, lse_scale, kRtolLse);
  // q, k and v gradients separately: their magnitudes differ.
  const size_t W = s.width(), nq = size_t(s.NH) * s.HS, nk = size_t(s.NKV) * s.HS;
  check_tensor<X>("dq", columns(gpu.dqkv, W, 0, nq), columns(dqkv, W, 0, nq));
  check_tensor<X>("dk", columns(gpu.dqkv, W, nq, nk), columns(dqkv, W, nq, nk));
  check_tensor<X>("dv", columns(gpu.dqkv, W, nq + nk, nk), columns(dqkv, W, nq + nk, nk));
}

template <typename X>
void check_cases(const std::vector<Shape>& shapes, double dropout_p = 0) {
  unsigned seed = 1;
  for (const Shape& s : shapes) {
    check_case<X>(s, seed, {dropout_p, {seed, 3, 1, 4}});
    ++seed;
  }
}

// Head sizes 64 and 128 take the tensor-core path for bf16/fp16 (the fallback for fp32); 16, 6
// and 256 take the fallback for every type. The tensor-core tiles are 64 or 128 queries by 32 or
// 64 keys: T = 1, 37, 200, 300 end mid-tile, 256 on a tile boundary.
const std::vector<Shape> kTiny = {
    {1, 1, 2, 1, 64}, {2, 37, 4, 4, 64}, {1, 5, 2, 1, 128}, {2, 37, 4, 2, 16}, {1, 9, 3, 3, 6}};
const std::vector<Shape> kLarger = {
    {2, 200, 8, 2, 64},  // GQA, 4 query heads per kv head
    {1, 256, 4, 4, 64},  // MHA, T a multiple of every tile
    {1, 300, 4, 1, 128}, {2, 130, 6, 3, 128}, {1, 200, 4, 4, 16}, {1, 20, 2, 1, 256}};

}  // namespace

TEST_CASE("attention: tiny shapes in every type", "[gpu][attention]") {
  check_cases<float>(kTiny);
  check_cases<__nv_bfloat16>(kTiny);
  check_cases<__half>(kTiny);
}

TEST_CASE("attention: fp32 (the fallback)", "[gpu][attention]") { check_cases<float>(kLarger); }

TEST_CASE("attention: bf16", "[gpu][attention]") { check_cases<__nv_bfloat16>(kLarger); }

TEST_CASE("attention: fp16", "[gpu][attention]") { check_cases<__half>(kLarger); }

// Dropout: GQA, T off the tile boundaries, the fallback (head size 16, and fp32 throughout) and
// both tensor-core head sizes. T = 1 is left out: there dq and dk are zero in exact arithmetic
// (dS = P o (dP - D) = 0), and D = rowsum(dO o O), taken from the stored O = v / (1 - p), which is
// rounded unless 1 / (1 - p) is a power of two, leaves a residue of that rounding, tiny against
// real gradients but not against the zero reference.
const std::vector<Shape> kDropout = {{2, 37, 4, 2, 16},  {2, 200, 8, 2, 64},  {1, 256, 4, 4, 64},
                                     {2, 130, 6, 3, 128}, {1, 300, 4, 1, 128}, {1, 5, 2, 1, 128}};

TEST_CASE("attention: dropout drops what the CPU drops", "[gpu][attention]") {
  for (const double p : {0.1, 0.5}) {
    check_cases<float>(kDropout, p);
    check_cases<__nv_bfloat16>(kDropout, p);
    check_cases<__half>(kDropout, p);
  }
}

// Windows of W keys back on the tensor-core path (tiles of 64 or 128 queries by 32 or 64 keys) and
// the fallback (head size 16, and fp32 throughout): W = 0 and 1, W ending mid-tile (17, 100) and
// on tile boundaries (63, 64, 128), W = T - 1 and beyond (every key: full attention).
std::vector<Shape> window_shapes() {
  std::vector<Shape> shapes;
  for (const int window : {0, 1, 17, 63, 64, 100, 128, 299, 400}) {
    shapes.push_back({2, 300, 4, 2, 64, window});
    shapes.push_back({1, 300, 4, 1, 128, window});
    shapes.push_back({1, 300, 2, 1, 16, window});
  }
  shapes.push_back({2, 37, 4, 4, 64, 1});  // a sequence shorter than a tile
  return shapes;
}

TEST_CASE("attention: sliding windows match the CPU's mask", "[gpu][attention][window]") {
  const std::vector<Shape> shapes = window_shapes();
  check_cases<float>(shapes);
  check_cases<__nv_bfloat16>(shapes);
  check_cases<__half>(shapes);
  // with dropout too: the same elements dropped inside the window
  const std::vector<Shape> dropped = {{2, 200, 8, 2, 64, 50}, {1, 300, 4, 1, 128, 70}, {2, 37, 4, 2, 16, 5}};
  check_cases<__nv_bfloat16>(dropped, 0.1);
  check_cases<float>(dropped, 0.1);
}

TEST_CASE("attention: a window covering the sequence is full attention, bit for bit", "[gpu][attention][window]") {
  for (const Shape full : {Shape{2, 200, 4, 2, 64}, Shape{1, 130, 4, 4, 128}, Shape{1, 50, 2, 1, 16}}) {
    const Inputs in = random_inputs<__nv_bfloat16>(full, 5);
    const GpuRun plain = run_gpu<__nv_bfloat16>(in, full, {});
    for (const int window : {full.T - 1, full.T, 10 * full.T}) {
      Shape s = full;
      s.window = window;
      const GpuRun windowed = run_gpu<__nv_bfloat16>(in, s, {});
      CHECK(windowed.out == plain.out);
      CHECK(windowed.lse == plain.lse);
      CHECK(windowed.dqkv == plain.dqkv);
    }
  }
}

// p = 0 is no dropout whatever the stream: the same bits as the default arguments.
TEST_CASE("attention: dropout 0 is the plain attention", "[gpu][attention]") {
  const Shape s{2, 130, 4, 2, 64};
  const Inputs in = random_inputs<__nv_bfloat16>(s, 11);
  const Drop none{0, {1, 2, 3, 4}};
  const GpuRun with_key = run_gpu<__nv_bfloat16>(in, s, none);
  const GpuRun plain = run_gpu<__nv_bfloat16>(in, s, {});
  CHECK(with_key.out == plain.out);
  CHECK(with_key.lse == plain.lse);
  CHECK(with_key.dqkv == plain.dqkv);
  // and dropout does change the result
  const GpuRun dropped = run_gpu<__nv_bfloat16>(in, s, {0.1, {1, 2, 3, 4}});
  CHECK(dropped.out != plain.out);
  CHECK(dropped.lse == plain.lse);
}

// Bit-identical results from run to run: every sum in a fixed order, no atomics; with dropout, the
// same mask.
template <typename X>
void check_deterministic(const Shape& s, double dropout_p = 0) {
  INFO(type_name<X>() << " " << describe(s) << " dropout " << dropout_p);
  const uint64_t stream = meg::cpu::dropout_stream({9, 8, 7, 6});
  const Inputs in = random_inputs<X>(s, 7);
  DeviceBuffer<X> qkv(in.qkv), dout(in.dout);
  DeviceBuffer<X> out(size_t(s.B) * s.T * s.NH * s.HS), dqkv(in.qkv.size());
  DeviceBuffer<float> lse(size_t(s.B) * s.NH * s.T);
  DeviceBuffer<float> scratch(meg::cuda::attention_backward_scratch(s.B, s.T, s.NH));
  std::vector<std::vector<X>> outs, runs;
  for (int run = 0; run < 2; ++run) {
    out.poison();
    dqkv.poison();
    scratch.poison();
    meg::cuda::attention_forward<X>(out.get(), lse.get(), qkv.get(), s.B, s.T, s.NH, s.NKV, s.HS,
                                    0, dropout_p, stream);
    meg::cuda::attention_backward<X>(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(), s.B,
                                     s.T, s.NH, s.NKV, s.HS, scratch.get(), 0, dropout_p, stream);
    outs.push_back(out.download_raw());
    runs.push_back(dqkv.download_raw());
  }
  CHECK(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(X)) == 0);
  CHECK(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(X)) == 0);
}

TEST_CASE("attention: backward is bit-for-bit deterministic", "[gpu][attention]") {
  for (const double p : {0.0, 0.1}) {
    check_deterministic<__nv_bfloat16>({2, 333, 8, 2, 64}, p);
    check_deterministic<__half>({1, 200, 4, 2, 128}, p);
    check_deterministic<float>({1, 100, 4, 2, 16}, p);
  }
}

template <typename F>
bool throws_invalid_argument(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument&) {
    return true;
  }
  return false;
}

TEST_CASE("attention: invalid shapes throw", "[gpu][attention]") {
  float* none = nullptr;
  CHECK(throws_invalid_argument([&] {  // odd head size
    meg::cuda::attention_forward<float>(none, none, none, 1, 4, 2, 1, 7, 0);
  }));
  CHECK(throws_invalid_argument([&] {  // head size over 256
    meg::cuda::attention_forward<float>(none, none, none, 1, 4, 2, 1, 258, 0);
  }));
  CHECK(throws_invalid_argument([&] {  // 6 query heads over 4 kv heads
    meg::cuda::attention_backward<float>(none, none, none, none, none, 1, 4, 6, 4, 16, none, 0);
  }));
  CHECK(throws_invalid_argument([&] {  // dropout 1
    meg::cuda::attention_forward<float>(none, none, none, 1, 4, 2, 1, 16, 0, 1.0, 0);
  }));
  CHECK(throws_invalid_argument([&] {  // negative dropout
    meg::cuda::attention_backward<float>(none, none, none, none, none, 1, 4, 2, 1, 16, none, 0, -0.1,
                                         0);
  }));
}
