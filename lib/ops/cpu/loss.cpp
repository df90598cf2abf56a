// Softmax cross-entropy over a (possibly padded) vocabulary.
//
// Padded columns [V,Vp) exist only so the vocabulary matrix has a GEMM-friendly width (GPT-2's
// 50257 padded to 50304); they never enter the softmax, so they get no probability and no
// gradient. Targets of -1 mark positions that do not count (padding, prompt tokens).
// Rows (positions) are independent and are split over threads; the targets are checked and the
// mean is summed on the calling thread, in position order.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "ops/cpu/ops.hpp"

namespace meg::cpu {

namespace {

constexpr size_t kGrain = 65536;  // logits per chunk of rows

// Count of the targets that take part, checking every one of them.
int count_targets(const int32_t* targets, int N, int V) {
  int count = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] == -1) continue;
    if (targets[i] < 0 || targets[i] >= V)
      input_error("cross entropy: target {} at position {} is outside the vocabulary [0,{})",
                  targets[i], i, V);
    ++count;
  }
  return count;
}

// log(sum_j exp(row[j])) over j < V, computed as max + log(sum exp(row - max)) so that large
// logits do not overflow.
template <typename F>
double log_sum_exp(const F* row, int V) {
  double maxval = row[0];
  for (int j = 1; j < V; ++j) maxval = std::max(maxval, double(row[j]));
  double sum = 0;
  for (int j = 0; j < V; ++j) sum += std::exp(row[j] - maxval);
  return maxval + std::log(sum);
}

}  // namespace

template <typename F>
double cross_entropy_forward(nd<F>* losses, const F* logits, const int32_t* targets, int N, int V,
                             int Vp) {
  const int count = count_targets(targets, N, V);
  std::vector<double> loss(size_t(N), 0.0);
  parallel_for(size_t(N), kGrain / Vp + 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      if (targets[i] == -1) continue;
      const F* row = logits + i * Vp;
      // -log softmax(row)[target] = logsumexp(row) - row[target]
      loss[i] = log_sum_exp(row, V) - row[targets[i]];
    }
  });
  double total = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] != -1) total += loss[i];
    if (losses) losses[i] = F(loss[i]);
  }
  return count > 0 ? total / count : 0.0;
}

template <typename F>
void cross_entropy_backward(F* dlogits, const F* logits, const int32_t* targets, int N, int V, int Vp,
                            nd<F> dloss) {
  const int count = count_targets(targets, N, V);
  const double factor = count > 0 ? double(dloss) / count : 0.0;
  parallel_for(size_t(N), kGrain / Vp + 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const F* row = logits + i * Vp;
      F* drow = dlogits + i * Vp;
      std::fill(drow, drow + Vp, F(0));  // ignored rows and padded columns stay zero
      if (targets[i] == -1) continue;
      // d(-log softmax[target]) / d logit_j = softmax_j - [j == target]
      const double lse = log_sum_exp(row, V);
      for (int j = 0; j < V; ++j) {
        const double onehot = j == targets[i] ? 1.0 : 0.0;
        drow[j] = F(factor * (std::exp(row[j] - lse) - onehot));
      }
    }
  });
}

#define MEG_INSTANTIATE(F)                                                                  \
  template double cross_entropy_forward<F>(F*, const F*, const int32_t*, int, int, int);   \
  template void cross_entropy_backward<F>(F*, const F*, const int32_t*, int, int, int, F);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(double)
#undef MEG_INSTANTIATE

}  // namespace meg::cpu
