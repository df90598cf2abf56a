// A few input rows against a weight matrix, each weight row read once for all of them.
//
// A decode step's products are a handful of input rows against weights far larger than the
// caches, so the time is the time to read the weights. BLAS reads them once a row as a
// matrix-vector product, or packs them all before a matrix product; here a thread takes a run of
// weight rows and multiplies each, while it is in registers, by every input row, which stay in
// the cache.
//
// The arithmetic is eight lanes wide (lanes.hpp): one AVX register where the machine has AVX2 (the
// function is compiled twice and chosen at run time), two SSE registers elsewhere. Both do the
// same lane-by-lane multiplies and adds (ISO C++ contracts nothing into fused multiply-adds), and
// each output adds its lanes and then its row's last C % 8 products in one fixed order, so the
// bits do not depend on the machine, on N or on the threads. More rows than kFewRows (8) go in
// groups of 8 over blocks of weight rows that stay in the cache, so the same holds for any N.
#include "ops/cpu/few_rows.hpp"

#include <algorithm>
#include <cstddef>
#include <stdexcept>

#include "core/parallel.hpp"
#include "ops/cpu/lanes.hpp"

namespace meg::cpu::detail {
namespace {

// The weight bytes a block of rows holds while each group of input rows passes over it (more than
// kFewRows rows): small enough to stay in a core's L2 cache between groups. GPT-2 124M decode on 2
// cores, ms a step (medians of five runs alternating): blocks of 64 KB at 12, 16 and 32 rows 63.6,
// 88.5, 156.6; each group over the thread's whole run of weight rows 71.6, 85.6, 176.7.
constexpr size_t kCachedWeightBytes = size_t(64) << 10;

// Weight rows [o, o + R) against N input rows: each weight row's vectors are loaded once and
// multiplied into N sums. Each output's sum runs over its own lanes in the same order whatever R:
// R only interleaves independent sums.
template <int N, int R>
__attribute__((always_inline)) inline void product_block(float* out, const float* inp, const float* W, int C, int OC,
                                                         int o) {
  const int whole = C / kLanes * kLanes;
  const float* w = W + size_t(o) * C;
  Lanes acc[R][N] = {};
  for (int c = 0; c < whole; c += kLanes) {
    Lanes wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) load_lanes(wv[r], w + size_t(r) * C + c);
#pragma GCC unroll 8
    for (int n = 0; n < N; ++n) {
      Lanes xv;
      load_lanes(xv, inp + size_t(n) * C + c);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][n] += wv[r] * xv;
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int n = 0; n < N; ++n) {
      float s = sum_lanes(acc[r][n]);
      for (int c = whole; c < C; ++c) s += w[size_t(r) * C + c] * inp[size_t(n) * C + c];
      out[size_t(n) * OC + o + r] += s;
    }
  }
}

// Weight rows [o0, o1) against N input rows. One input row takes four weight rows at a time:
// alone, a row's chain of dependent adds held the loop back (four rows at a time run as fast as
// BLAS's matrix-vector product). Two at a time for 2 and 3 input rows was slower.
template <int N>
__attribute__((always_inline)) inline void product_rows(float* out, const float* inp, const float* W, int C, int OC,
                                                        int o0, int o1) {
  constexpr int R = N == 1 ? 4 : 1;
  int o = o0;
  for (; o + R <= o1; o += R) product_block<N, R>(out, inp, W, C, OC, o);
  for (; o < o1; ++o) product_block<N, 1>(out, inp, W, C, OC, o);
}

__attribute__((always_inline)) inline void product(float* out, const float* inp, const float* W, int N, int C, int OC,
                                                   int o0, int o1) {
  switch (N) {
    case 1: return product_rows<1>(out, inp, W, C, OC, o0, o1);
    case 2: return product_rows<2>(out, inp, W, C, OC, o0, o1);
    case 3: return product_rows<3>(out, inp, W, C, OC, o0, o1);
    case 4: return product_rows<4>(out, inp, W, C, OC, o0, o1);
    case 5: return product_rows<5>(out, inp, W, C, OC, o0, o1);
    case 6: return product_rows<6>(out, inp, W, C, OC, o0, o1);
    case 7: return product_rows<7>(out, inp, W, C, OC, o0, o1);
    default: return product_rows<8>(out, inp, W, C, OC, o0, o1);
  }
}

// More than kFewRows input rows go in groups of kFewRows, a block of weight rows at a time: the
// block is read from memory for the first group and from the cache for the others.
__attribute__((always_inline)) inline void product_groups(float* out, const float* inp, const float* W, int N, int C,
                                                          int OC, int o0, int o1) {
  if (N <= kFewRows) return product(out, inp, W, N, C, OC, o0, o1);
  // A multiple of four weight rows, which a last group of one input row takes at a time.
  const int block = std::max(4, int(kCachedWeightBytes / (size_t(C) * sizeof(float))) / 4 * 4);
  for (int b0 = o0; b0 < o1; b0 += block) {
    const int b1 = std::min(o1, b0 + block);
    for (int n0 = 0; n0 < N; n0 += kFewRows)
      product(out + size_t(n0) * OC, inp + size_t(n0) * C, W, std::min(kFewRows, N - n0), C, OC, b0, b1);
  }
}

void product_portable(float* out, const float* inp, const float* W, int N, int C, int OC, int o0, int o1) {
  product_groups(out, inp, W, N, C, OC, o0, o1);
}

MEG_TARGET_AVX2 void product_avx2(float* out, const float* inp, const float* W, int N, int C, int OC, int o0, int o1) {
  product_groups(out, inp, W, N, C, OC, o0, o1);
}

}  // namespace

void few_rows_product(float* out, const float* inp, const float* W, int N, int C, int OC, bool portable) {
  if (N < 1) throw std::invalid_argument("few_rows_product: no input rows");
  auto* const run = has_avx2() && !portable ? product_avx2 : product_portable;
  // Two runs of weight rows a thread (each output is summed alike whatever run it falls in).
  const size_t grain = (size_t(OC) + 2 * num_threads() - 1) / (2 * num_threads());
  parallel_for(size_t(OC), grain, [&](size_t begin, size_t end) {
    run(out, inp, W, N, C, OC, int(begin), int(end));
  });
}

}  // namespace meg::cpu::detail
