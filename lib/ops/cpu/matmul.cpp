// Linear layer: out = inp @ W^T + bias, and its backward. The products go to BLAS (which has
// threads of its own), but for a forward of a few fp32 rows (decode steps: few_rows.hpp); the bias
// loops around them are split over threads here, by rows for the fill and by output channels for
// the bias gradient, so every sum keeps its order.
#include <cstddef>
#include <type_traits>
#include <vector>

#include "core/parallel.hpp"
#include "ops/cpu/blas.hpp"
#include "ops/cpu/few_rows.hpp"
#include "ops/cpu/ops.hpp"

namespace meg::cpu {

using detail::gemm;

// A forward of up to kRowsBeforeGemm fp32 rows (a decode step; a short request scored) is
// few_rows_product, which reads each weight row once for all of them: BLAS's GEMM packs the whole
// weight matrix before it multiplies, and a GEMV a row reads the weights once a row. Up to 32 rows
// few_rows_product is the fastest of the three (at one row as fast as the GEMV); from 48 rows on
// GEMM is as fast or faster (bench_generate_cpu). A row's result is then the same alone or in any
// company of up to kRowsBeforeGemm rows, so a sequence's tokens do not depend on how many others
// decode beside it.
constexpr int kRowsBeforeGemm = 32;

template <typename F>
void linear_forward(F* out, const F* inp, const F* W, const nd<F>* bias, int N, int C, int OC) {
  // Start each output row from the bias (or zero), then let the product add inp @ W^T onto it.
  parallel_for(size_t(N), 8192 / size_t(OC) + 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      F* row = out + i * OC;
      for (int o = 0; o < OC; ++o) row[o] = bias ? bias[o] : F(0);
    }
  });
  // out[N,OC] += inp[N,C] @ W[OC,C]^T.
  if constexpr (std::is_same_v<F, float>) {
    if (N <= kRowsBeforeGemm) return detail::few_rows_product(out, inp, W, N, C, OC);
  }
  gemm(false, true, N, OC, C, F(1), inp, C, W, C, F(1), out, OC);
}

template <typename F>
void linear_backward(nd<F>* dinp, nd<F>* dW, nd<F>* dbias, const F* dout, const F* inp, const F* W,
                     int N, int C, int OC) {
  // dinp[N,C] += dout[N,OC] @ W[OC,C]
  if (dinp) gemm(false, false, N, C, OC, F(1), dout, OC, W, C, F(1), dinp, C);
  // dW[OC,C] += dout[N,OC]^T @ inp[N,C]
  if (dW) gemm(true, false, OC, C, N, F(1), dout, OC, inp, C, F(1), dW, C);
  // dbias[OC] += sum over rows of dout, row by row (cache friendly), summed in double so long
  // batches lose nothing.
  if (dbias) {
    parallel_for(size_t(OC), 64, [&](size_t o0, size_t o1) {
      std::vector<double> sum(o1 - o0, 0.0);
      for (size_t i = 0; i < size_t(N); ++i)
        for (size_t o = o0; o < o1; ++o) sum[o - o0] += dout[i * OC + o];
      for (size_t o = o0; o < o1; ++o) dbias[o] += F(sum[o - o0]);
    });
  }
}

#define MEG_INSTANTIATE(F)                                                                     \
  template void linear_forward<F>(F*, const F*, const F*, const F*, int, int, int);           \
  template void linear_backward<F>(F*, F*, F*, const F*, const F*, const F*, int, int, int);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(double)
#undef MEG_INSTANTIATE

}  // namespace meg::cpu
