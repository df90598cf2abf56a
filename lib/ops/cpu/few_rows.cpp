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
// bits do not depend on the machine, on N or on the threads.
#include "ops/cpu/few_rows.hpp"

#include <cstddef>
#include <stdexcept>

#include "core/parallel.hpp"
#include "ops/cpu/lanes.hpp"

namespace meg::cpu::detail {
namespace {

// Weight rows [o0, o1) against N input rows: each weight row's vectors are loaded once and
// multiplied into N sums. (Two weight rows at a time, for more independent sums at 2 and 3 input
// rows, was slower: GPT-2 124M decode on 2 cores, 25.2-25.7 ms a step at 2 rows against 26.2-28.0,
// 27.7-28.7 at 3 against 30.7-31.6.)
template <int N>
__attribute__((always_inline)) inline void product_rows(float* out, const float* inp, const float* W, int C, int OC,
                                                        int o0, int o1) {
  const int whole = C / kLanes * kLanes;
  for (int o = o0; o < o1; ++o) {
    const float* w = W + size_t(o) * C;
    Lanes acc[N] = {};
    for (int c = 0; c < whole; c += kLanes) {
      Lanes wv;
      load_lanes(wv, w + c);
#pragma GCC unroll 8
      for (int n = 0; n < N; ++n) {
        Lanes xv;
        load_lanes(xv, inp + size_t(n) * C + c);
        acc[n] += wv * xv;
      }
    }
    for (int n = 0; n < N; ++n) {
      float s = sum_lanes(acc[n]);
      for (int c = whole; c < C; ++c) s += w[c] * inp[size_t(n) * C + c];
      out[size_t(n) * OC + o] += s;
    }
  }
}

__attribute__((always_inline)) inline void product(float* out, const float* inp, const float* W, int N, int C, int OC,
                                                   int o0, int o1) {
  switch (N) {
    case 2: return product_rows<2>(out, inp, W, C, OC, o0, o1);
    case 3: return product_rows<3>(out, inp, W, C, OC, o0, o1);
    case 4: return product_rows<4>(out, inp, W, C, OC, o0, o1);
    case 5: return product_rows<5>(out, inp, W, C, OC, o0, o1);
    case 6: return product_rows<6>(out, inp, W, C, OC, o0, o1);
    case 7: return product_rows<7>(out, inp, W, C, OC, o0, o1);
    default: return product_rows<8>(out, inp, W, C, OC, o0, o1);
  }
}

void product_portable(float* out, const float* inp, const float* W, int N, int C, int OC, int o0, int o1) {
  product(out, inp, W, N, C, OC, o0, o1);
}

MEG_TARGET_AVX2 void product_avx2(float* out, const float* inp, const float* W, int N, int C, int OC, int o0, int o1) {
  product(out, inp, W, N, C, OC, o0, o1);
}

}  // namespace

void few_rows_product(float* out, const float* inp, const float* W, int N, int C, int OC, bool portable) {
  if (N < 2 || N > kFewRows) throw std::invalid_argument("few_rows_product: 2 to 8 input rows");
  auto* const run = has_avx2() && !portable ? product_avx2 : product_portable;
  // Two runs of weight rows a thread (each output is summed alike whatever run it falls in).
  const size_t grain = (size_t(OC) + 2 * num_threads() - 1) / (2 * num_threads());
  parallel_for(size_t(OC), grain, [&](size_t begin, size_t end) {
    run(out, inp, W, N, C, OC, int(begin), int(end));
  });
}

}  // namespace meg::cpu::detail
