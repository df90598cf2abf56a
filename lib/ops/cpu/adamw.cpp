// AdamW with decoupled weight decay, and the two halves of global-norm gradient clipping.
// Each parameter's update reads only its own gradient and moments, so the elements are split over
// fixed chunks; the one reduction (the sum of squares) adds per-chunk partials in chunk order.
#include <cmath>
#include <cstddef>
#include <vector>

#include "core/parallel.hpp"
#include "ops/cpu/ops.hpp"

namespace meg::cpu {

namespace {
constexpr size_t kGrain = 16384;  // elements per chunk
}  // namespace

template <typename F>
void adamw_step(F* param, const F* grad, F* m, F* v, size_t n, nd<F> lr, nd<F> beta1, nd<F> beta2,
                nd<F> eps, nd<F> weight_decay, int64_t t) {
  // Bias corrections for moments that start at zero: after t steps their weights sum to
  // 1 - beta^t, not 1.
  const double c1 = 1.0 - std::pow(double(beta1), double(t));
  const double c2 = 1.0 - std::pow(double(beta2), double(t));
  parallel_for(n, kGrain, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const double g = grad[i];
      const double mi = beta1 * double(m[i]) + (1.0 - beta1) * g;
      const double vi = beta2 * double(v[i]) + (1.0 - beta2) * g * g;
      m[i] = F(mi);
      v[i] = F(vi);
      const double update = (mi / c1) / (std::sqrt(vi / c2) + eps);
      // Decay is applied to the parameter directly (decoupled), not added to the gradient, so it
      // does not pass through the adaptive scaling.
      param[i] = F(param[i] - lr * (update + weight_decay * double(param[i])));
    }
  });
}

template <typename F>
double grad_sum_squares(const F* grad, size_t n) {
  // One partial per fixed chunk, added in chunk order: the rounding is the same for any number of
  // threads (and, for n <= kGrain, the same as one plain loop).
  std::vector<double> partial((n + kGrain - 1) / kGrain, 0.0);
  parallel_for(n, kGrain, [&](size_t begin, size_t end) {
    double sum = 0;
    for (size_t i = begin; i < end; ++i) sum += double(grad[i]) * grad[i];
    partial[begin / kGrain] = sum;
  });
  double sum = 0;
  for (double p : partial) sum += p;
  return sum;
}

template <typename F>
void scale_inplace(F* grad, size_t n, nd<F> scale) {
  parallel_for(n, kGrain, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) grad[i] *= scale;
  });
}

#define MEG_INSTANTIATE(F)                                                                \
  template void adamw_step<F>(F*, const F*, F*, F*, size_t, F, F, F, F, F, int64_t);      \
  template double grad_sum_squares<F>(const F*, size_t);                                  \
  template void scale_inplace<F>(F*, size_t, F);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(double)
#undef MEG_INSTANTIATE

}  // namespace meg::cpu
