// Causal multi-head attention with grouped-query attention (GQA), forward and backward.
//
// For each batch b and query head h, with Q = q[b,:,h,:], K = k[b,:,g,:], V = v[b,:,g,:] and
// g = h / (NH/NKV) the head's key/value group:
//   S = Q K^T / sqrt(HS)      [T,T]
//   P = softmax(S) over each row, restricted to columns t2 <= t (causal), and with a sliding
//       window of WINDOW >= 0 (Megatron's --window-size (WINDOW, 0)) to t - WINDOW <= t2 as well:
//       WINDOW + 1 keys, the query's own included (transformers' sliding_window = WINDOW + 1)
//   O = P V                   [T,HS]
// The three products are GEMMs that read one head straight out of the [B,T,heads,HS] layout by
// using the row stride (heads*HS) as the leading dimension, so nothing is transposed or copied.
// The full [T,T] products include the masked upper triangle, twice the necessary flops but BLAS
// speed; the mask is applied by zeroing P there. A window skips the softmax work of the columns
// outside it (the products stay whole: BLAS on a band would need a product per block of rows).
//
// The GEMMs stay on the calling thread, where BLAS threads them itself (BLAS calls made from
// several of our threads at once contend inside OpenBLAS and run slower than one at a time). What
// is split over threads is the softmax and its backward, chunks of rows of one head's [T,T]
// matrix, each row computed by one chunk; the (batch, head) loop stays in order, so the sums of
// dk and dv over the heads of a group are added as before, whatever the number of threads.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "core/parallel.hpp"
#include "ops/cpu/blas.hpp"
#include "ops/cpu/lanes.hpp"
#include "ops/cpu/ops.hpp"

namespace meg::cpu {

using detail::gemm;

namespace {
// Rows of a [T,T] softmax per chunk: about 8k elements of work (a row averages T/2 of them).
size_t row_grain(int T) { return 16384 / size_t(T) + 1; }

void check_heads(int NH, int NKV) {
  if (NKV <= 0 || NH % NKV != 0)
    throw std::invalid_argument("attention: query heads must be a multiple of key/value heads");
}

// The first key a query at position POS sees: 0, or POS - WINDOW with a window (WINDOW >= 0).
int first_key(int pos, int window) { return window < 0 ? 0 : std::max(0, pos - window); }

// Causal softmax, in place, of the scores P[T,S] of T queries at positions FIRST .. FIRST+T-1
// against S keys: row t sees columns first_key(FIRST + t, WINDOW) .. FIRST + t, is max-subtracted
// for stability, and is zero outside them.
template <typename F>
void causal_softmax(F* P, int T, int S, int first, int window) {
  parallel_for(size_t(T), row_grain(S), [&](size_t begin, size_t end) {
    for (int t = int(begin); t < int(end); ++t) {
      F* row = P + size_t(t) * S;
      const int last = first + t, lo = first_key(last, window);
      F maxval = row[lo];
      for (int t2 = lo + 1; t2 <= last; ++t2) maxval = std::max(maxval, row[t2]);
      double sum = 0;
      for (int t2 = lo; t2 <= last; ++t2) {
        row[t2] = F(std::exp(double(row[t2] - maxval)));
        sum += row[t2];
      }
      const double inv = 1.0 / sum;
      for (int t2 = lo; t2 <= last; ++t2) row[t2] = F(row[t2] * inv);
      std::fill(row, row + lo, F(0));
      std::fill(row + last + 1, row + S, F(0));
    }
  });
}
}  // namespace

template <typename F>
void attention_forward(F* out, F* att, const F* q, const F* k, const F* v, int B, int T, int NH,
                       int NKV, int HS, double dropout_p, const DropoutKey& key, int window) {
  check_heads(NH, NKV);
  const bool drop = dropout_p > 0;
  const uint64_t stream = drop ? dropout_stream(key) : 0;
  const uint64_t threshold = drop ? dropout_threshold(dropout_p) : 0;
  const F keep_scale = drop ? F(1.0 / (1.0 - dropout_p)) : F(1);
  std::vector<F> Pd(drop ? size_t(T) * T : 0);  // the dropped-out P of one head
  const int group = NH / NKV;               // query heads per key/value head
  const int ldq = NH * HS, ldk = NKV * HS;  // row strides of q/out and of k/v
  const F scale = F(1.0 / std::sqrt(double(HS)));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const size_t qoff = size_t(b) * T * ldq + size_t(h) * HS;
      const size_t koff = size_t(b) * T * ldk + size_t(h / group) * HS;
      F* P = att + (size_t(b) * NH + h) * T * T;

      // P = scale * Q K^T (all T columns; the masked ones are overwritten below)
      gemm(false, true, T, T, HS, scale, q + qoff, ldq, k + koff, ldk, F(0), P, T);

      // Causal softmax of each row; zero above the diagonal and before the window.
      causal_softmax(P, T, T, 0, window);

      // With dropout, Pd = P o M / (1 - p) (P itself is kept for the backward).
      const F* PV = P;
      if (drop) {
        const uint64_t base = (size_t(b) * NH + h) * size_t(T) * T;
        parallel_for(size_t(T), row_grain(T), [&](size_t begin, size_t end) {
          for (size_t t = begin; t < end; ++t)
            for (size_t t2 = 0; t2 < size_t(T); ++t2) {
              const size_t e = t * T + t2;
              Pd[e] = dropout_bits(stream, base + e) >= threshold ? F(P[e] * keep_scale) : F(0);
            }
        });
        PV = Pd.data();
      }

      // O = P V (Pd V with dropout), written into out's head h
      gemm(false, false, T, HS, T, F(1), PV, T, v + koff, ldk, F(0), out + qoff, ldq);
    }
  }
}

template <typename F>
void attention_backward(nd<F>* dq, nd<F>* dk, nd<F>* dv, const F* dout, const F* q, const F* k,
                        const F* v, const F* att, int B, int T, int NH, int NKV, int HS,
                        double dropout_p, const DropoutKey& key, int window) {
  check_heads(NH, NKV);
  const bool drop = dropout_p > 0;
  const uint64_t stream = drop ? dropout_stream(key) : 0;
  const uint64_t threshold = drop ? dropout_threshold(dropout_p) : 0;
  const F keep_scale = drop ? F(1.0 / (1.0 - dropout_p)) : F(1);
  std::vector<F> Pd(drop ? size_t(T) * T : 0);  // the forward's dropped-out P of one head
  const int group = NH / NKV;
  const int ldq = NH * HS, ldk = NKV * HS;
  const F scale = F(1.0 / std::sqrt(double(HS)));
  std::vector<F> dS(size_t(T) * T);  // dP, then turned into dS in place; reused for every head
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const size_t qoff = size_t(b) * T * ldq + size_t(h) * HS;
      const size_t koff = size_t(b) * T * ldk + size_t(h / group) * HS;
      const F* P = att + (size_t(b) * NH + h) * T * T;
      const F* dO = dout + qoff;

      const uint64_t base = (size_t(b) * NH + h) * size_t(T) * T;
      auto kept = [&](size_t e) { return dropout_bits(stream, base + e) >= threshold; };

      // dV += P^T dO (Pd^T dO with dropout; summed over the heads of the group because every
      // head adds into it)
      if (dv) {
        const F* PV = P;
        if (drop) {
          parallel_for(size_t(T), row_grain(T), [&](size_t begin, size_t end) {
            for (size_t e = begin * T; e < end * T; ++e) Pd[e] = kept(e) ? F(P[e] * keep_scale) : F(0);
          });
          PV = Pd.data();
        }
        gemm(true, false, T, HS, T, F(1), PV, T, dO, ldq, F(1), dv + koff, ldk);
      }

      // dP = dO V^T
      gemm(false, true, T, T, HS, F(1), dO, ldq, v + koff, ldk, F(0), dS.data(), T);

      // Softmax backward per row: dS = P * (dP - sum_t2(P * dP)), with the score scale folded
      // in; zero above the diagonal and before the window, where P is zero.
      parallel_for(size_t(T), row_grain(T), [&](size_t begin, size_t end) {
        for (int t = int(begin); t < int(end); ++t) {
          const F* p = P + size_t(t) * T;
          F* d = dS.data() + size_t(t) * T;
          const int lo = first_key(t, window);
          if (drop)  // dP = (dO V^T) o M / (1 - p)
            for (int t2 = lo; t2 <= t; ++t2)
              d[t2] = kept(size_t(t) * T + size_t(t2)) ? F(d[t2] * keep_scale) : F(0);
          double dot = 0;
          for (int t2 = lo; t2 <= t; ++t2) dot += double(p[t2]) * d[t2];
          for (int t2 = lo; t2 <= t; ++t2) d[t2] = F(p[t2] * (d[t2] - dot) * scale);
          std::fill(d, d + lo, F(0));
          std::fill(d + t + 1, d + T, F(0));
        }
      });

      // dQ += dS K;  dK += dS^T Q
      if (dq) gemm(false, false, T, HS, T, F(1), dS.data(), T, k + koff, ldk, F(1), dq + qoff, ldq);
      if (dk) gemm(true, false, T, HS, T, F(1), dS.data(), T, q + qoff, ldq, F(1), dk + koff, ldk);
    }
  }
}

namespace {
// One fp32 query row against S cached keys (a decode step): each head's scores, softmax and sum of
// values in plain loops, each thread a run of heads, each head's scores in its own row of SCORES
// [NH, S]. The loops run over the keys outermost, so that a thread reads its heads' part of each
// cached row in one piece rather than a head's HS elements every row apart, and compiled for AVX2
// where the machine has it, as few_rows.cpp is (the same lane-by-lane arithmetic, lanes.hpp). Two
// one-row BLAS products a head (the path of more rows) cost their calls and packing more than
// the keys. The softmax is causal_softmax's (max subtracted, exponentials and sum in double).
__attribute__((always_inline)) inline void attend_heads(float* out, const float* q, const float* k, const float* v,
                                                        int S, int NH, int NKV, int HS, float* scores, size_t h0,
                                                        size_t h1) {
  const int group = NH / NKV, ldk = NKV * HS;
  const float scale = float(1.0 / std::sqrt(double(HS)));
  for (int t = 0; t < S; ++t) {
    const float* kt = k + size_t(t) * ldk;
    for (size_t h = h0; h < h1; ++h)
      scores[h * S + t] = scale * detail::dot_lanes(q + h * HS, kt + h / group * HS, HS);
  }
  for (size_t h = h0; h < h1; ++h) {
    float* p = scores + h * S;
    const float maxval = *std::max_element(p, p + S);
    double sum = 0;
    for (int t = 0; t < S; ++t) {
      p[t] = float(std::exp(double(p[t] - maxval)));
      sum += p[t];
    }
    const double inv = 1.0 / sum;
    for (int t = 0; t < S; ++t) p[t] = float(p[t] * inv);
    std::fill_n(out + h * HS, HS, 0.0f);
  }
  for (int t = 0; t < S; ++t) {
    const float* vt = v + size_t(t) * ldk;
    for (size_t h = h0; h < h1; ++h) {
      const float w = scores[h * S + t];
      const float* vh = vt + h / group * HS;
      float* o = out + h * HS;
      for (int d = 0; d < HS; ++d) o[d] += w * vh[d];
    }
  }
}

void attend_heads_portable(float* out, const float* q, const float* k, const float* v, int S, int NH, int NKV, int HS,
                           float* scores, size_t h0, size_t h1) {
  attend_heads(out, q, k, v, S, NH, NKV, HS, scores, h0, h1);
}

MEG_TARGET_AVX2 void attend_heads_avx2(float* out, const float* q, const float* k, const float* v, int S, int NH,
                                       int NKV, int HS, float* scores, size_t h0, size_t h1) {
  attend_heads(out, q, k, v, S, NH, NKV, HS, scores, h0, h1);
}

void attend_one_row(float* out, const float* q, const float* k, const float* v, int S, int NH, int NKV, int HS,
                    float* scores) {
  auto* const run = detail::has_avx2() ? attend_heads_avx2 : attend_heads_portable;
  const size_t heads_per_thread = (size_t(NH) + num_threads() - 1) / num_threads();
  parallel_for(size_t(NH), heads_per_thread, [&](size_t h0, size_t h1) {
    run(out, q, k, v, S, NH, NKV, HS, scores, h0, h1);
  });
}
}  // namespace

template <typename F>
void attention_cached_forward(F* out, const F* q, const F* k, const F* v, int T, int first, int NH, int NKV, int HS,
                              F* scores, int window) {
  check_heads(NH, NKV);
  const int S = first + T;  // keys: the cached ones and the new ones
  if constexpr (std::is_same_v<F, float>) {
    if (T == 1) {  // the keys of its window only
      const size_t lo = size_t(first_key(first, window)), ldk = size_t(NKV) * HS;
      return attend_one_row(out, q, k + lo * ldk, v + lo * ldk, S - int(lo), NH, NKV, HS, scores);
    }
  }
  const int group = NH / NKV;
  const int ldq = NH * HS, ldk = NKV * HS;
  const F scale = F(1.0 / std::sqrt(double(HS)));
  for (int h = 0; h < NH; ++h) {
    const size_t qoff = size_t(h) * HS, koff = size_t(h / group) * HS;
    gemm(false, true, T, S, HS, scale, q + qoff, ldq, k + koff, ldk, F(0), scores, S);
    causal_softmax(scores, T, S, first, window);
    gemm(false, false, T, HS, S, F(1), scores, S, v + koff, ldk, F(0), out + qoff, ldq);
  }
}

#define MEG_INSTANTIATE(F)                                                                        \
  template void attention_forward<F>(F*, F*, const F*, const F*, const F*, int, int, int, int,    \
                                     int, double, const DropoutKey&, int);                        \
  template void attention_backward<F>(F*, F*, F*, const F*, const F*, const F*, const F*,         \
                                      const F*, int, int, int, int, int, double, const DropoutKey&, \
                                      int);                                                        \
  template void attention_cached_forward<F>(F*, const F*, const F*, const F*, int, int, int, int, int, F*, int);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(double)
#undef MEG_INSTANTIATE

}  // namespace meg::cpu
