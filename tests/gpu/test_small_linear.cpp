// small_linear (kernels/small_linear.cu): the fused norm, product and epilogue of the decode step's
// linear layers, against the CPU ops computing the same chain in double.
//
// Bounds, as test_gemm's: the product's error is measured against the sum of the absolute values
// of its terms (and of the bias and the residual); fp32 gets 1e-5 of it, and bf16, which rounds
// the normalised input, y and the output to 8 bits, 1e-2. SwiGLU's output scales with both of
// its inputs: |up| times the gate's scale plus |silu(gate)| times the up's.
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "ops/cpu/ops.hpp"
#include "ops/cuda/ops.hpp"

namespace {

using meg::cuda::SmallLinearEpilogue;
using meg::test::DeviceBuffer;
using meg::test::random_floats;
using meg::test::round_to;
using meg::test::widen;

enum class NormKind { none, layernorm, layernorm_no_bias, rmsnorm };

struct Case {
  int N, C, OC;
  NormKind norm;
  SmallLinearEpilogue epilogue;
};

std::string describe(const Case& c) {
  static const char* norms[] = {"none", "layernorm", "layernorm without bias", "rmsnorm"};
  static const char* epilogues[] = {"store", "gelu", "swiglu", "residual"};
  return "N=" + std::to_string(c.N) + " C=" + std::to_string(c.C) + " OC=" + std::to_string(c.OC) +
         " norm=" + norms[int(c.norm)] + " epilogue=" + epilogues[int(c.epilogue)];
}

double silu(double g) { return g / (1.0 + std::exp(-g)); }

template <typename X>
void check_case(const Case& c, std::mt19937& rng) {
  INFO(describe(c) << " " << meg::test::type_name<X>());
  const bool swiglu = c.epilogue == SmallLinearEpilogue::swiglu;
  const int outputs = swiglu ? c.OC / 2 : c.OC;
  const float eps = 1e-5f;
  // Inputs with an offset, so that LayerNorm's mean matters.
  auto inp = round_to<X>(random_floats(size_t(c.N) * c.C, 0.5f, 2.5f, rng));
  const auto W = round_to<X>(random_floats(size_t(c.OC) * c.C, -0.5f, 0.5f, rng));
  const auto bias = round_to<X>(random_floats(size_t(c.OC), -1, 1, rng));
  const auto gamma = round_to<X>(random_floats(size_t(c.C), 0.5f, 1.5f, rng));
  const auto beta = round_to<X>(random_floats(size_t(c.C), -0.5f, 0.5f, rng));
  const auto residual = round_to<X>(random_floats(size_t(c.N) * outputs, -2, 2, rng));

  // The reference, in double: the norm, the product, the epilogue.
  std::vector<double> x = widen(inp);
  const bool has_bias = c.norm == NormKind::layernorm;
  if (c.norm == NormKind::rmsnorm)
    meg::cpu::rmsnorm_forward(x.data(), static_cast<double*>(nullptr), widen(inp).data(), widen(gamma).data(), c.N,
                              c.C, double(eps));
  else if (c.norm != NormKind::none)
    meg::cpu::layernorm_forward(x.data(), static_cast<double*>(nullptr), static_cast<double*>(nullptr),
                                widen(inp).data(), widen(gamma).data(), has_bias ? widen(beta).data() : nullptr,
                                c.N, c.C, double(eps));
  std::vector<double> y(size_t(c.N) * c.OC);
  meg::cpu::linear_forward(y.data(), x.data(), widen(W).data(), widen(bias).data(), c.N, c.C, c.OC);
  const std::vector<double> scale = meg::test::product_error_scale(x, W, bias, c.N, c.C, c.OC);
  std::vector<double> want(size_t(c.N) * outputs), want_scale(want.size());
  for (int n = 0; n < c.N; ++n)
    for (int o = 0; o < outputs; ++o) {
      const size_t i = size_t(n) * outputs + o, k = size_t(n) * c.OC + o;
      switch (c.epilogue) {
        case SmallLinearEpilogue::store: want[i] = y[k], want_scale[i] = scale[k]; break;
        case SmallLinearEpilogue::gelu:
          meg::cpu::gelu_forward(&want[i], &y[k], 1);
          want_scale[i] = 1.2 * scale[k];  // |gelu'| <= 1.13
          break;
        case SmallLinearEpilogue::residual:
          want[i] = residual[i] + y[k];
          want_scale[i] = std::abs(double(residual[i])) + scale[k];
          break;
        case SmallLinearEpilogue::swiglu: {
          const double g = y[k], u = y[k + outputs];
          want[i] = silu(g) * u;
          want_scale[i] = 1.2 * scale[k] * std::abs(u) + std::abs(silu(g)) * scale[k + outputs];
          break;
        }
        case SmallLinearEpilogue::kv_append: FAIL("kv_append has a test of its own");
      }
    }

  DeviceBuffer<X> d_inp(inp), d_W(W), d_bias(bias), d_gamma(gamma), d_beta(beta), out(want.size());
  meg::cuda::SmallLinearNorm<X> norm;
  if (c.norm != NormKind::none) {
    norm.weight = d_gamma.get();
    norm.bias = has_bias ? d_beta.get() : nullptr;
    norm.eps = eps;
    norm.rms = c.norm == NormKind::rmsnorm;
  }
  const auto run = [&] {
    if (c.epilogue == SmallLinearEpilogue::residual) out.upload(residual);
    else out.poison();
    REQUIRE(meg::cuda::small_linear(out.get(), d_inp.get(), d_W.get(), d_bias.get(), c.N, c.C, c.OC, norm,
                                    c.epilogue, nullptr));
    return out.download_raw();
  };
  const auto first = run();
  meg::test::check_close_x<X>("small_linear", out.download(), want, want_scale,
                              std::is_same_v<X, float> ? 1e-5 : 1e-2);
  CHECK(meg::test::same_bits(first, run()));  // the same order on every run
}

}  // namespace

TEST_CASE("small_linear fuses norm, product and epilogue as the unfused ops compute them", "[gpu][kernels]") {
  std::mt19937 rng(31);
  // Shapes: tiny, ragged (OC odd: the last task's second row is past the end; C not a multiple of
  // a warp's 16-byte vectors), GPT-2 124M's and Llama's layer widths, and one with rows of several
  // chunks (the last one partial) and more tasks than the persistent grid has warps, so that a
  // warp's pipeline crosses from chunk to chunk and from task to task. With one input row, the
  // shapes of rows up to half a chunk (C <= 1024 in bf16, 512 in fp32) and an even OC take two
  // rows a task; {200, 101}'s odd OC keeps one. With one input row, {2304, 1000}'s rows (288 vectors
  // in bf16, 576 in fp32) take the longer chunks of kLongRowLoads vectors a lane, one and two of
  // them, the last partial.
  const int shapes[][2] = {{64, 96}, {200, 101}, {768, 2304}, {1024, 512}, {2304, 1000}, {2600, 4500}};
  const SmallLinearEpilogue epilogues[] = {SmallLinearEpilogue::store, SmallLinearEpilogue::gelu,
                                           SmallLinearEpilogue::swiglu, SmallLinearEpilogue::residual};
  const NormKind norms[] = {NormKind::none, NormKind::layernorm, NormKind::layernorm_no_bias, NormKind::rmsnorm};
  for (const auto& s : shapes)
    for (int N = 1; N <= meg::cuda::kSmallLinearMaxRows; ++N)
      for (const auto e : epilogues) {
        if (e == SmallLinearEpilogue::swiglu && s[1] % 2 != 0) continue;
        const NormKind norm = norms[(N + int(e)) % 4];  // every norm meets every epilogue across N
        check_case<float>({N, s[0], s[1], norm, e}, rng);
        check_case<__nv_bfloat16>({N, s[0], s[1], norm, e}, rng);
      }
}

TEST_CASE("small_linear declines what it does not handle, queueing nothing", "[gpu][kernels]") {
  constexpr int kTooMany = meg::cuda::kSmallLinearMaxRows + 1;
  DeviceBuffer<float> inp(kTooMany * 64), W(64 * 64), out(kTooMany * 64);
  const meg::cuda::SmallLinearNorm<float> none;
  const auto store = SmallLinearEpilogue::store;
  CHECK_FALSE(meg::cuda::small_linear(out.get(), inp.get(), W.get(), static_cast<const float*>(nullptr), kTooMany, 64,
                                      64, none, store, nullptr));  // too many rows
  CHECK_FALSE(meg::cuda::small_linear(out.get(), inp.get(), W.get(), static_cast<const float*>(nullptr), 1, 62, 64,
                                      none, store, nullptr));  // rows not of whole 16-byte vectors
  CHECK_FALSE(meg::cuda::small_linear(out.get(), inp.get() + 1, W.get(), static_cast<const float*>(nullptr), 1, 64,
                                      64, none, store, nullptr));  // misaligned
  CHECK_FALSE(meg::cuda::small_linear(out.get(), inp.get(), W.get(), static_cast<const float*>(nullptr), 2, 1 << 15,
                                      64, none, store, nullptr));  // rows too wide to stage
  CHECK_FALSE(meg::cuda::small_linear(out.get(), inp.get(), W.get(), static_cast<const float*>(nullptr), 1, 64, 63,
                                      none, SmallLinearEpilogue::swiglu, nullptr));  // no gate/up pairs
}

// The kv_append epilogue against what it fuses: the stored projection, then kv_cache_append. The
// product's sums are the same (a lane adds its vectors in the same order whatever the rows of
// its task), so everything must match bit for bit: the projection (q and k rotated in place) and
// both caches.
template <typename X>
void check_kv_append(int N, int C, int NH, int NKV, int HS, bool rope, std::mt19937& rng) {
  INFO("N=" << N << " C=" << C << " NH=" << NH << " NKV=" << NKV << " HS=" << HS << " rope=" << rope << " "
            << meg::test::type_name<X>());
  const int OC = (NH + 2 * NKV) * HS, slots = 3, max_length = 40;
  DeviceBuffer<X> inp(round_to<X>(random_floats(size_t(N) * C, -1, 1, rng)));
  DeviceBuffer<X> W(round_to<X>(random_floats(size_t(OC) * C, -0.5f, 0.5f, rng)));
  DeviceBuffer<X> bias(round_to<X>(random_floats(size_t(OC), -1, 1, rng)));
  DeviceBuffer<X> gamma(round_to<X>(random_floats(size_t(C), 0.5f, 1.5f, rng)));
  const auto table = meg::cuda::rope_table(max_length, HS, 10000.0);
  DeviceBuffer<float> d_table(table);
  // Rows at scattered (slot, position) pairs, as a decode step's.
  std::vector<float> slot_list = {2, 0, 1, 2}, position_list = {7, 39, 0, 21};
  slot_list.resize(size_t(N));
  position_list.resize(size_t(N));
  DeviceBuffer<int32_t> slots_d(slot_list), positions_d(position_list);
  const size_t cache = size_t(slots) * NKV * max_length * HS;
  DeviceBuffer<X> qkv_want(size_t(N) * OC), qkv_got(size_t(N) * OC);
  DeviceBuffer<X> k_want(cache), v_want(cache), k_got(cache), v_got(cache);
  for (auto* b : {&k_want, &v_want, &k_got, &v_got}) b->upload(std::vector<float>(cache, 0.25f));
  meg::cuda::SmallLinearNorm<X> norm;
  norm.weight = gamma.get();
  norm.eps = 1e-5f;
  norm.rms = true;
  const float* t = rope ? d_table.get() : nullptr;

  REQUIRE(meg::cuda::small_linear(qkv_want.get(), inp.get(), W.get(), bias.get(), N, C, OC, norm,
                                  SmallLinearEpilogue::store, nullptr));
  meg::cuda::kv_cache_append(qkv_want.get(), k_want.get(), v_want.get(), slots_d.get(), positions_d.get(), t, N, NH,
                             NKV, HS, max_length, nullptr);
  const meg::cuda::SmallLinearKvAppend<X> append{k_got.get(), v_got.get(), slots_d.get(), positions_d.get(), t,
                                                 NH,          NKV,         HS,           max_length};
  REQUIRE(meg::cuda::small_linear(qkv_got.get(), inp.get(), W.get(), bias.get(), N, C, OC, norm,
                                  SmallLinearEpilogue::kv_append, nullptr, &append));
  CHECK(meg::test::same_bits(qkv_got.download_raw(), qkv_want.download_raw()));
  CHECK(meg::test::same_bits(k_got.download_raw(), k_want.download_raw()));
  CHECK(meg::test::same_bits(v_got.download_raw(), v_want.download_raw()));
}

TEST_CASE("small_linear's kv_append epilogue equals the projection followed by kv_cache_append", "[gpu][kernels]") {
  std::mt19937 rng(41);
  for (int N = 1; N <= meg::cuda::kSmallLinearMaxRows; ++N) {
    // GPT-2 (no RoPE, as many kv heads as heads) and Llama (RoPE, grouped-query) shapes: short rows
    // (two a task, paired for RoPE or not), GPT-2 1.5B's width (one row a task without RoPE) and
    // Llama 1B's (pairs whose rows take two chunks of a task's loads).
    check_kv_append<float>(N, 64, 4, 4, 16, false, rng);
    check_kv_append<__nv_bfloat16>(N, 64, 4, 4, 16, false, rng);
    check_kv_append<float>(N, 128, 8, 2, 16, true, rng);
    check_kv_append<__nv_bfloat16>(N, 256, 4, 1, 64, true, rng);
    check_kv_append<float>(N, 1600, 5, 5, 64, false, rng);
    check_kv_append<__nv_bfloat16>(N, 1600, 5, 5, 64, false, rng);
    check_kv_append<__nv_bfloat16>(N, 2048, 8, 2, 64, true, rng);
  }
}

// The argmax epilogue against what it fuses: the stored product, then argmax_rows over its
// columns [0, choices). The outputs must match bit for bit, the tokens exactly and the values as
// floats (argmax_rows gives a -0 maximum as -0, the epilogue as +0); twice, so that the scratch
// is left as the next launch needs it. W's rows are random where SPECIAL is empty, else SPECIAL
// (OC rows of C values, X-rounded when stored) against inputs all INPUT, without a norm.
template <typename X>
void check_argmax(int N, int C, int OC, int choices, const std::vector<float>& special, std::mt19937& rng,
                  float input = 1.0f) {
  INFO("N=" << N << " C=" << C << " OC=" << OC << " choices=" << choices << (special.empty() ? "" : " special")
            << " " << meg::test::type_name<X>());
  const bool random = special.empty();
  DeviceBuffer<X> inp(random ? round_to<X>(random_floats(size_t(N) * C, 0.5f, 2.5f, rng))
                             : std::vector<float>(size_t(N) * C, input));
  DeviceBuffer<X> W(random ? round_to<X>(random_floats(size_t(OC) * C, -0.5f, 0.5f, rng)) : special);
  DeviceBuffer<X> gamma(round_to<X>(random_floats(size_t(C), 0.5f, 1.5f, rng)));
  DeviceBuffer<X> beta(round_to<X>(random_floats(size_t(C), -0.5f, 0.5f, rng)));
  meg::cuda::SmallLinearNorm<X> norm;
  if (random) norm = {gamma.get(), beta.get(), 1e-5f, false};
  const X* no_bias = nullptr;

  DeviceBuffer<X> want_out(size_t(N) * OC), got_out(size_t(N) * OC);
  const size_t rows = static_cast<size_t>(N);
  DeviceBuffer<int32_t> want_tokens(rows), got_tokens(rows);
  DeviceBuffer<float> want_values(rows), got_values(rows);
  const meg::cuda::SmallLinearKvAppend<X>* no_kv = nullptr;
  REQUIRE(meg::cuda::small_linear(want_out.get(), inp.get(), W.get(), no_bias, N, C, OC, norm,
                                  SmallLinearEpilogue::store, nullptr));
  meg::cuda::argmax_rows(want_tokens.get(), want_out.get(), N, choices, OC, nullptr, want_values.get());
  DeviceBuffer<meg::cuda::SmallLinearArgmaxScratch> scratch(1);
  MEG_CUDA_CHECK(cudaMemset(scratch.get(), 0, sizeof(meg::cuda::SmallLinearArgmaxScratch)));
  const meg::cuda::SmallLinearArgmax argmax{got_tokens.get(), got_values.get(), scratch.get(), choices};
  const auto want_values_host = want_values.download_raw();
  for (int run = 0; run < 2; ++run) {
    INFO("run " << run);
    got_out.poison();
    got_tokens.poison();
    got_values.poison();
    REQUIRE(meg::cuda::small_linear(got_out.get(), inp.get(), W.get(), no_bias, N, C, OC, norm,
                                    SmallLinearEpilogue::argmax, nullptr, no_kv, &argmax));
    CHECK(meg::test::same_bits(got_out.download_raw(), want_out.download_raw()));
    CHECK(got_tokens.download_raw() == want_tokens.download_raw());
    const auto got_values_host = got_values.download_raw();
    for (int n = 0; n < N; ++n) {
      INFO("row " << n << ": " << got_values_host[size_t(n)] << " against " << want_values_host[size_t(n)]);
      CHECK((got_values_host[size_t(n)] == want_values_host[size_t(n)] ||
             (std::isnan(got_values_host[size_t(n)]) && std::isnan(want_values_host[size_t(n)]))));
    }
  }
  const auto left = scratch.download_raw()[0];
  for (int n = 0; n < meg::cuda::kSmallLinearMaxRows; ++n) CHECK(left.best[n] == 0);
  CHECK(left.blocks_done == 0);
}

// OC rows of C weights: row r's first value VALUES(r), the rest 0, so that against inputs of ones
// its output is VALUES(r) rounded to X.
std::vector<float> first_column(int C, int OC, const std::function<float(int)>& values) {
  std::vector<float> w(size_t(C) * OC, 0.0f);
  for (int r = 0; r < OC; ++r) w[size_t(r) * C] = values(r);
  return w;
}

TEST_CASE("small_linear's argmax epilogue equals the stored product followed by argmax_rows", "[gpu][kernels]") {
  std::mt19937 rng(43);
  // Random rows: small shapes, one row a task (odd OC) and two (short rows), a width of several
  // chunks, and GPT-2's output layer (50304 rows, 50257 of them chosen from).
  for (int N = 1; N <= meg::cuda::kSmallLinearMaxRows; ++N) {
    check_argmax<float>(N, 64, 96, 96, {}, rng);
    check_argmax<__nv_bfloat16>(N, 200, 101, 77, {}, rng);
    check_argmax<__nv_bfloat16>(N, 2600, 4500, 4500, {}, rng);
  }
  check_argmax<__nv_bfloat16>(1, 768, 50304, 50257, {}, rng);
  check_argmax<float>(2, 768, 50304, 50257, {}, rng);

  // Rows of ties, NaN and infinities (inputs of ones): the lowest of equal maxima, NaN never, the
  // first of several infinities, the first of all -inf, column 0 for a row of NaN; a maximum past
  // the choices ignored.
  const int C = 64, OC = 3000;
  const auto noise = [&](int r) { return -1.0f - float(r % 97) / 8.0f; };
  const std::vector<std::function<float(int)>> rows = {
      [&](int r) { return r == 1700 || r == 2900 || r == 2100 ? 5.0f : noise(r); },
      [&](int r) { return r % 7 == 3 ? NAN : r == 2500 ? 3.0f : noise(r); },
      [&](int r) { return r == 2222 || r == 999 ? INFINITY : r % 5 == 0 ? NAN : noise(r); },
      [&](int) { return -INFINITY; },
      [&](int) { return NAN; },
      [&](int r) { return r >= 2990 ? 9.0f : r == 4 ? 2.0f : noise(r); },
  };
  for (const auto& values : rows) {
    const std::vector<float> w = first_column(C, OC, values);
    check_argmax<float>(1, C, OC, 2990, w, rng);
    check_argmax<__nv_bfloat16>(1, C, OC, 2990, w, rng);
  }
  // A zero maximum of both signs: in fp16, against inputs of 2^-14, column 5's product -2^-28
  // rounds to -0 and column 9's is an exact +0. The lower column wins, as -0 == +0.
  const std::vector<float> zeros =
      first_column(C, OC, [&](int r) { return r == 5 ? -0x1p-14f : r == 9 ? 0.0f : noise(r); });
  check_argmax<__half>(1, C, OC, OC, zeros, rng, 0x1p-14f);
}

TEST_CASE("small_linear's argmax epilogue turns away a bias and checks its arguments", "[gpu][kernels]") {
  DeviceBuffer<float> inp(64), W(64 * 64), bias(64), out(64), values(1);
  DeviceBuffer<int32_t> tokens(1);
  DeviceBuffer<meg::cuda::SmallLinearArgmaxScratch> scratch(1);
  const meg::cuda::SmallLinearNorm<float> none;
  const auto argmax = SmallLinearEpilogue::argmax;
  const meg::cuda::SmallLinearKvAppend<float>* no_kv = nullptr;
  const meg::cuda::SmallLinearArgmax a{tokens.get(), values.get(), scratch.get(), 64};
  CHECK_FALSE(meg::cuda::small_linear(out.get(), inp.get(), W.get(), bias.get(), 1, 64, 64, none, argmax, nullptr,
                                      no_kv, &a));
  const float* no_bias = nullptr;
  CHECK_THROWS(meg::cuda::small_linear(out.get(), inp.get(), W.get(), no_bias, 1, 64, 64, none, argmax, nullptr));
  const meg::cuda::SmallLinearArgmax too_many{tokens.get(), values.get(), scratch.get(), 65};
  CHECK_THROWS(meg::cuda::small_linear(out.get(), inp.get(), W.get(), no_bias, 1, 64, 64, none, argmax, nullptr,
                                       no_kv, &too_many));
  CHECK_THROWS(meg::cuda::small_linear(out.get(), inp.get(), W.get(), no_bias, 1, 64, 64, none,
                                       SmallLinearEpilogue::store, nullptr, no_kv, &a));
}
