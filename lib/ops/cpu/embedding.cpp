// Token (+ learned position) embedding: a table lookup forward, a scatter-add backward.
#include <cstddef>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "ops/cpu/ops.hpp"

namespace meg::cpu {

namespace {
constexpr size_t kGrain = 8192;        // elements per chunk of rows
constexpr size_t kChannelGrain = 64;  // channels per chunk in the backward
}  // namespace

template <typename F>
void embedding_forward(F* out, const int32_t* tokens, const F* wte, const nd<F>* wpe, int B, int T,
                       int C, int V) {
  const size_t N = size_t(B) * T;
  // Check every token first, in order, so the error names the first bad position whatever the
  // threads do. A bad token id would read outside the table; it comes from data, so it is the
  // user's to fix.
  for (size_t bt = 0; bt < N; ++bt)
    if (tokens[bt] < 0 || tokens[bt] >= V)
      input_error("embedding: token {} at position {} is outside the vocabulary [0,{})", tokens[bt],
                  bt, V);
  // Each output row is one lookup: rows are split over threads.
  parallel_for(N, kGrain / C + 1, [&](size_t begin, size_t end) {
    for (size_t bt = begin; bt < end; ++bt) {
      const F* te = wte + size_t(tokens[bt]) * C;
      const F* pe = wpe ? wpe + (bt % T) * C : nullptr;  // position t = bt % T
      F* o = out + bt * C;
      for (int c = 0; c < C; ++c) o[c] = pe ? te[c] + pe[c] : te[c];
    }
  });
}

template <typename F>
void embedding_backward(nd<F>* dwte, nd<F>* dwpe, const F* dout, const int32_t* tokens, int B, int T,
                        int C) {
  // Repeated tokens add into the same row of dwte, which is why this accumulates. The tokens are
  // the ones embedding_forward has already checked. Rows cannot be split over threads (two
  // positions may share a token), so the channels are: each chunk of channels walks all positions
  // in order, which adds into every element in the same order as one thread would.
  const size_t N = size_t(B) * T;
  parallel_for(size_t(C), kChannelGrain, [&](size_t c0, size_t c1) {
    for (size_t bt = 0; bt < N; ++bt) {
      const F* d = dout + bt * C;
      if (dwte) {
        F* dte = dwte + size_t(tokens[bt]) * C;
        for (size_t c = c0; c < c1; ++c) dte[c] += d[c];
      }
      if (dwpe) {
        F* dpe = dwpe + (bt % T) * C;
        for (size_t c = c0; c < c1; ++c) dpe[c] += d[c];
      }
    }
  });
}

#define MEG_INSTANTIATE(F)                                                                      \
  template void embedding_forward<F>(F*, const int32_t*, const F*, const F*, int, int, int, int); \
  template void embedding_backward<F>(F*, F*, const F*, const int32_t*, int, int, int);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(double)
#undef MEG_INSTANTIATE

}  // namespace meg::cpu
