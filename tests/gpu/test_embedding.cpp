// The CUDA embedding (kernels/embedding.cu) against the CPU reference ops in double, for X = fp32,
// bf16 and fp16, with gpu_test_util.hpp's method (inputs rounded to X, outputs poisoned, gradients
// pre-filled with random values). The backward, a scatter-add without atomics, must also give the
// same bits when run twice.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "gpu/gpu_test_util.hpp"
#include "ops/cpu/ops.hpp"
#include "ops/cuda/ops.hpp"

using namespace meg::test;

namespace {

struct Shape {
  int B, T, C, V;
};

// Small vocabularies make long token groups in the backward (4095 positions over 50 tokens: ~80
// each); C = 3 and 1601 take the one-element path; N = 1 a grid of one block.
const Shape kShapes[] = {{1, 1, 768, 50},     {2, 7, 3, 5},       {3, 1365, 768, 50},
                         {4, 1025, 1600, 3000}, {1, 4097, 64, 7}, {2, 33, 1601, 40}};

std::vector<int32_t> random_tokens(size_t n, int V, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = dist(rng);
  return t;
}

}  // namespace

TEST_CASE("group_positions_by_token groups every position under its token, in order",
          "[gpu][kernels]") {
  std::mt19937 rng(42);
  for (int N : {0, 1, 2, 17, 4097}) {
    INFO("N=" << N);
    const auto tokens = random_tokens(size_t(N), 11, rng);
    std::map<int32_t, std::vector<int32_t>> want;
    for (int p = 0; p < N; ++p) want[tokens[p]].push_back(p);

    const auto g = meg::cuda::group_positions_by_token(tokens.data(), N);
    REQUIRE(g.unique.size() == want.size());
    REQUIRE(g.starts.size() == want.size() + 1);
    REQUIRE(g.positions.size() == size_t(N));
    size_t u = 0;
    for (const auto& [token, positions] : want) {
      CHECK(g.unique[u] == token);
      const std::vector<int32_t> got(g.positions.begin() + g.starts[u],
                                     g.positions.begin() + g.starts[u + 1]);
      CHECK(got == positions);
      ++u;
    }
    CHECK(g.starts.back() == N);
  }
}

TEST_CASE("group_positions_by_token keeps a vocabulary range's tokens, as rows of that range",
          "[gpu][kernels]") {
  std::mt19937 rng(43);
  const int N = 999, V = 40;
  const auto tokens = random_tokens(size_t(N), V, rng);
  for (const auto& [begin, size] : {std::pair{0, 10}, std::pair{10, 10}, std::pair{30, 10}, std::pair{35, 20}}) {
    INFO("range " << begin << " + " << size);
    std::map<int32_t, std::vector<int32_t>> want;  // row -> positions
    for (int p = 0; p < N; ++p)
      if (tokens[p] >= begin && tokens[p] < begin + size) want[tokens[p] - begin].push_back(p);
    const auto g = meg::cuda::group_positions_by_token(tokens.data(), N, begin, size);
    REQUIRE(g.unique.size() == want.size());
    size_t u = 0, total = 0;
    for (const auto& [row, positions] : want) {
      CHECK(g.unique[u] == row);
      CHECK(std::vector<int32_t>(g.positions.begin() + g.starts[u], g.positions.begin() + g.starts[u + 1]) ==
            positions);
      total += positions.size();
      ++u;
    }
    CHECK(g.positions.size() == total);
    CHECK(size_t(g.starts.back()) == total);
  }
}

// Vocabulary parallelism: each rank looks up the rows of its range, zero for the other tokens,
// and one rank adds the position embedding; the ranks' outputs sum to the whole lookup.
TEMPLATE_TEST_CASE("CUDA embedding_forward over a vocabulary range looks up that range only", "[gpu][kernels]",
                   float, __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(2026);
  const int B = 3, T = 17, C = 64, V = 40, parts = 4, rows = V / parts;
  const size_t N = size_t(B) * T;
  const auto tokens = random_tokens(N, V, rng);
  const auto wte = round_to<X>(random_floats(size_t(V) * C, -1.0f, 1.0f, rng));
  const auto wpe = round_to<X>(random_floats(size_t(T) * C, -1.0f, 1.0f, rng));
  DeviceBuffer<int32_t> d_tokens(N);
  d_tokens.upload_raw(tokens);
  DeviceBuffer<X> d_wpe(wpe), d_out(N * C);
  for (int r = 0; r < parts; ++r) {
    INFO(type_name<X>() << " part " << r);
    const std::vector<float> slice(wte.begin() + std::ptrdiff_t(r) * rows * C, wte.begin() + std::ptrdiff_t(r + 1) * rows * C);
    DeviceBuffer<X> d_slice(slice);
    d_out.poison();
    meg::cuda::embedding_forward<X>(d_out.get(), d_tokens.get(), d_slice.get(), r == 0 ? d_wpe.get() : nullptr, B, T,
                                    C, r * rows, rows, nullptr);
    std::vector<double> want(N * C), scale(N * C);
    for (size_t i = 0; i < N; ++i)
      for (int c = 0; c < C; ++c) {
        const bool mine = tokens[i] / rows == r;
        const double e = mine ? double(wte[size_t(tokens[i]) * C + c]) : 0.0;
        const double p = r == 0 ? double(wpe[(i % T) * C + c]) : 0.0;
        want[i * C + c] = e + p;
        scale[i * C + c] = std::abs(e) + std::abs(p);
      }
    check_close("out", d_out.download(), want, scale, unit_roundoff<X>());
  }
}

TEMPLATE_TEST_CASE("CUDA embedding_forward matches the CPU reference", "[gpu][kernels]", float,
                   __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(2024);
  for (const auto& s : kShapes) {
    INFO(type_name<X>() << " B=" << s.B << " T=" << s.T << " C=" << s.C << " V=" << s.V);
    const size_t N = size_t(s.B) * s.T, NC = N * s.C;
    const auto tokens = random_tokens(N, s.V, rng);
    const auto wte = round_to<X>(random_floats(size_t(s.V) * s.C, -1.0f, 1.0f, rng));
    const auto wpe = round_to<X>(random_floats(size_t(s.T) * s.C, -1.0f, 1.0f, rng));

    std::vector<double> out_ref(NC), out_nowpe(NC);
    meg::cpu::embedding_forward(out_ref.data(), tokens.data(), widen(wte).data(),
                                widen(wpe).data(), s.B, s.T, s.C, s.V);
    meg::cpu::embedding_forward(out_nowpe.data(), tokens.data(), widen(wte).data(), nullptr, s.B,
                                s.T, s.C, s.V);
    // wte + wpe is one fp32 addition rounded once to X: unit_roundoff<X>() of |wte| + |wpe| (for
    // bf16 and fp16 inputs the fp32 sum is exact and only the rounding to X remains). Without wpe
    // it is a copy, exact: bound 0.
    std::vector<double> scale(NC);
    for (size_t bt = 0; bt < N; ++bt)
      for (int c = 0; c < s.C; ++c)
        scale[bt * s.C + c] = std::abs(double(wte[size_t(tokens[bt]) * s.C + c])) +
                              std::abs(double(wpe[(bt % s.T) * s.C + c]));

    DeviceBuffer<int32_t> d_tokens(N);
    d_tokens.upload_raw(tokens);
    DeviceBuffer<X> d_wte(wte), d_wpe(wpe), d_out(NC);
    d_out.poison();
    meg::cuda::embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), s.B, s.T,
                                 s.C, 0, s.V, nullptr);
    check_close("out", d_out.download(), out_ref, scale, unit_roundoff<X>());
    d_out.poison();
    meg::cuda::embedding_forward<X>(d_out.get(), d_tokens.get(), d_wte.get(), nullptr, s.B, s.T, s.C,
                                    0, s.V, nullptr);
    check_close("out (no wpe)", d_out.download(), out_nowpe, scale, 0.0);
  }
}

// A decode step's rows are single tokens at positions of their own: each adds its position's row
// of wpe, given by the positions array rather than by its place in the batch.
TEMPLATE_TEST_CASE("CUDA embedding_forward adds the wpe rows of given positions", "[gpu][kernels]", float,
                   __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(2027);
  const int N = 37, C = 64, V = 50, P = 1024;
  const auto tokens = random_tokens(size_t(N), V, rng);
  const auto positions = random_tokens(size_t(N), P, rng);
  const auto wte = round_to<X>(random_floats(size_t(V) * C, -1.0f, 1.0f, rng));
  const auto wpe = round_to<X>(random_floats(size_t(P) * C, -1.0f, 1.0f, rng));
  std::vector<double> want(size_t(N) * C), scale(size_t(N) * C);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < C; ++c) {
      const double e = wte[size_t(tokens[i]) * C + c], p = wpe[size_t(positions[i]) * C + c];
      want[size_t(i) * C + c] = e + p;
      scale[size_t(i) * C + c] = std::abs(e) + std::abs(p);
    }
  DeviceBuffer<int32_t> d_tokens{size_t(N)}, d_positions{size_t(N)};
  d_tokens.upload_raw(tokens);
  d_positions.upload_raw(positions);
  DeviceBuffer<X> d_wte(wte), d_wpe(wpe), d_out(size_t(N) * C);
  d_out.poison();
  meg::cuda::embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), 1, N, C, 0, V, nullptr,
                               d_positions.get());
  check_close("out", d_out.download(), want, scale, unit_roundoff<X>());
}

TEMPLATE_TEST_CASE("CUDA embedding_backward matches the CPU reference, accumulates, repeats",
                   "[gpu][kernels]", float, __nv_bfloat16, __half) {
  using X = TestType;
  std::mt19937 rng(2025);
  for (const auto& s : kShapes) {
    INFO(type_name<X>() << " B=" << s.B << " T=" << s.T << " C=" << s.C << " V=" << s.V);
    const size_t N = size_t(s.B) * s.T, NC = N * s.C;
    const auto tokens = random_tokens(N, s.V, rng);
    const auto dout = round_to<X>(random_floats(NC, -1.0f, 1.0f, rng));
    const auto dwte0 = random_floats(size_t(s.V) * s.C, -1.0f, 1.0f, rng);
    const auto dwpe0 = random_floats(size_t(s.T) * s.C, -1.0f, 1.0f, rng);

    std::vector<double> dwte_ref = widen(dwte0), dwpe_ref = widen(dwpe0);
    meg::cpu::embedding_backward(dwte_ref.data(), dwpe_ref.data(), widen(dout).data(),
                                 tokens.data(), s.B, s.T, s.C);

    // Each gradient element is its initial value plus k fp32 terms (k = the token's count, or B
    // for a position), added in one fp32 chain of k adds: at most k * 2^-24 of the sum of the
    // absolute values. The bound is (k + 1) * 2^-24 of that sum (rtol 2^-24, the factor in the
    // scale); an untouched row must come back as it went in, to within that one rounding.
    std::vector<double> dwte_scale(dwte0.size()), dwpe_scale(dwpe0.size());
    std::vector<int> count(s.V, 0);
    for (size_t i = 0; i < dwte0.size(); ++i) dwte_scale[i] = std::abs(double(dwte0[i]));
    for (size_t i = 0; i < dwpe0.size(); ++i) dwpe_scale[i] = std::abs(double(dwpe0[i]));
    for (size_t bt = 0; bt < N; ++bt) {
      ++count[tokens[bt]];
      for (int c = 0; c < s.C; ++c) {
        const double d = std::abs(double(dout[bt * s.C + c]));
        dwte_scale[size_t(tokens[bt]) * s.C + c] += d;
        dwpe_scale[(bt % s.T) * s.C + c] += d;
      }
    }
    for (int v = 0; v < s.V; ++v)
      for (int c = 0; c < s.C; ++c) dwte_scale[size_t(v) * s.C + c] *= count[v] + 1;
    for (auto& x : dwpe_scale) x *= s.B + 1;

    const auto groups = meg::cuda::group_positions_by_token(tokens.data(), int(N));
    const int U = int(groups.unique.size());
    DeviceBuffer<int32_t> d_unique(groups.unique.size()), d_starts(groups.starts.size()),
        d_positions(groups.positions.size());
    d_unique.upload_raw(groups.unique), d_starts.upload_raw(groups.starts);
    d_positions.upload_raw(groups.positions);
    DeviceBuffer<X> d_dout(dout);
    DeviceBuffer<float> d_dwte(dwte0), d_dwpe(dwpe0);
    auto run = [&](float* dwte, float* dwpe) {
      meg::cuda::embedding_backward(dwte, dwpe, d_dout.get(), d_unique.get(), d_starts.get(),
                                    d_positions.get(), U, s.B, s.T, s.C, nullptr);
    };

    run(d_dwte.get(), d_dwpe.get());
    const auto dwte1 = d_dwte.download_raw(), dwpe1 = d_dwpe.download_raw();
    check_close("dwte", d_dwte.download(), dwte_ref, dwte_scale, 0x1p-24);
    check_close("dwpe", d_dwpe.download(), dwpe_ref, dwpe_scale, 0x1p-24);

    // Again from the same starting gradients: the same bits; then without dwpe, dwte as before.
    d_dwte.upload(dwte0), d_dwpe.upload(dwpe0);
    run(d_dwte.get(), d_dwpe.get());
    CHECK(same_bits(d_dwte.download_raw(), dwte1));
    CHECK(same_bits(d_dwpe.download_raw(), dwpe1));
    d_dwte.upload(dwte0);
    run(d_dwte.get(), nullptr);
    CHECK(same_bits(d_dwte.download_raw(), dwte1));
  }
}
