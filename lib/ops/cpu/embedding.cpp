// Token (+ learned position) embedding: a table lookup forward, a scatter-add backward.
#include <cstddef>

#include "core/error.hpp"
#include "ops/cpu/ops.hpp"

namespace meg::cpu {

template <typename F>
void embedding_forward(F* out, const int32_t* tokens, const F* wte, const nd<F>* wpe, int B, int T,
                       int C, int V) {
  for (size_t bt = 0; bt < size_t(B) * T; ++bt) {
    const int32_t token = tokens[bt];
    // A bad token id would read outside the table; it comes from data, so it is the user's to fix.
    if (token < 0 || token >= V)
      input_error("embedding: token {} at position {} is outside the vocabulary [0,{})", token, bt,
                  V);
    const F* te = wte + size_t(token) * C;
    const F* pe = wpe ? wpe + (bt % T) * C : nullptr;  // position t = bt % T
    F* o = out + bt * C;
    for (int c = 0; c < C; ++c) o[c] = pe ? te[c] + pe[c] : te[c];
  }
}

template <typename F>
void embedding_backward(nd<F>* dwte, nd<F>* dwpe, const F* dout, const int32_t* tokens, int B, int T,
                        int C) {
  // Repeated tokens add into the same row of dwte, which is why this accumulates. The tokens are
  // the ones embedding_forward has already checked.
  for (size_t bt = 0; bt < size_t(B) * T; ++bt) {
    const F* d = dout + bt * C;
    if (dwte) {
      F* dte = dwte + size_t(tokens[bt]) * C;
      for (int c = 0; c < C; ++c) dte[c] += d[c];
    }
    if (dwpe) {
      F* dpe = dwpe + (bt % T) * C;
      for (int c = 0; c < C; ++c) dpe[c] += d[c];
    }
  }
}

#define MEG_INSTANTIATE(F)                                                                      \
  template void embedding_forward<F>(F*, const int32_t*, const F*, const F*, int, int, int, int); \
  template void embedding_backward<F>(F*, F*, const F*, const int32_t*, int, int, int);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(double)
#undef MEG_INSTANTIATE

}  // namespace meg::cpu
