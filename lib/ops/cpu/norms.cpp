// LayerNorm (GPT-2) and RMSNorm (Llama) over the last dimension, with their backward.
//
// Both save one or two numbers per row (mean, rstd) so the backward need not recompute the
// statistics. Row statistics are summed in double.
//
// Rows are independent in the forward and in dinp, so those loops are split over chunks of rows.
// dweight and dbias are sums over all rows; there the channels are split instead, and each chunk
// of channels walks the rows in order, adding in exactly the order one thread would.
#include <cmath>
#include <cstddef>

#include "core/parallel.hpp"
#include "ops/cpu/ops.hpp"

namespace meg::cpu {

namespace {
constexpr size_t kGrain = 8192;        // elements per chunk of rows
constexpr size_t kChannelGrain = 64;  // channels per chunk for dweight and dbias
}  // namespace

template <typename F>
void layernorm_forward(F* out, nd<F>* mean, nd<F>* rstd, const F* inp, const F* weight,
                       const nd<F>* bias, int N, int C, nd<F> eps) {
  parallel_for(size_t(N), kGrain / C + 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const F* x = inp + i * C;
      F* y = out + i * C;
      double m = 0;
      for (int c = 0; c < C; ++c) m += x[c];
      m /= C;
      // Two passes (mean, then squared deviations) rather than E[x^2] - E[x]^2, which cancels
      // badly when the mean is large against the spread.
      double var = 0;
      for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
      var /= C;  // biased variance, as torch.nn.LayerNorm
      const double s = 1.0 / std::sqrt(var + double(eps));
      for (int c = 0; c < C; ++c) {
        const double norm = (x[c] - m) * s;
        y[c] = F(norm * weight[c] + (bias ? bias[c] : F(0)));
      }
      if (mean) mean[i] = F(m);
      if (rstd) rstd[i] = F(s);
    }
  });
}

template <typename F>
void layernorm_backward(nd<F>* dinp, nd<F>* dweight, nd<F>* dbias, const F* dout, const F* inp,
                        const F* weight, const F* mean, const F* rstd, int N, int C) {
  if (dinp) {
    parallel_for(size_t(N), kGrain / C + 1, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        const F* x = inp + i * C;
        const F* dy = dout + i * C;
        const double m = mean[i], s = rstd[i];
        // With norm = (x - mean) * rstd and dnorm = weight * dy, the gradient through the mean
        // and the variance reduces to  dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm *
        // norm)).
        double dnorm_mean = 0, dnorm_norm_mean = 0;
        for (int c = 0; c < C; ++c) {
          const double norm = (x[c] - m) * s;
          const double dnorm = double(weight[c]) * dy[c];
          dnorm_mean += dnorm;
          dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        for (int c = 0; c < C; ++c) {
          const double norm = (x[c] - m) * s;
          const double dnorm = double(weight[c]) * dy[c];
          dinp[i * C + c] += F(s * (dnorm - dnorm_mean - norm * dnorm_norm_mean));
        }
      }
    });
  }
  if (dweight || dbias) {
    parallel_for(size_t(C), kChannelGrain, [&](size_t c0, size_t c1) {
      for (size_t i = 0; i < size_t(N); ++i) {
        const F* x = inp + i * C;
        const F* dy = dout + i * C;
        const double m = mean[i], s = rstd[i];
        for (size_t c = c0; c < c1; ++c) {
          if (dweight) dweight[c] += F((x[c] - m) * s * dy[c]);
          if (dbias) dbias[c] += dy[c];
        }
      }
    });
  }
}

template <typename F>
void rmsnorm_forward(F* out, nd<F>* rstd, const F* inp, const F* weight, int N, int C, nd<F> eps) {
  parallel_for(size_t(N), kGrain / C + 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const F* x = inp + i * C;
      F* y = out + i * C;
      double ms = 0;
      for (int c = 0; c < C; ++c) ms += double(x[c]) * x[c];
      ms /= C;
      const double s = 1.0 / std::sqrt(ms + double(eps));
      for (int c = 0; c < C; ++c) y[c] = F(x[c] * s * weight[c]);
      if (rstd) rstd[i] = F(s);
    }
  });
}

template <typename F>
void rmsnorm_backward(nd<F>* dinp, nd<F>* dweight, const F* dout, const F* inp, const F* weight,
                      const F* rstd, int N, int C) {
  if (dinp) {
    parallel_for(size_t(N), kGrain / C + 1, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        const F* x = inp + i * C;
        const F* dy = dout + i * C;
        const double s = rstd[i];
        // As LayerNorm without the mean: dx = rstd * (dnorm - norm * mean(dnorm * norm)),
        // with norm = x * rstd and dnorm = weight * dy.
        double dnorm_norm_mean = 0;
        for (int c = 0; c < C; ++c) dnorm_norm_mean += double(weight[c]) * dy[c] * (x[c] * s);
        dnorm_norm_mean /= C;
        for (int c = 0; c < C; ++c) {
          const double norm = x[c] * s;
          const double dnorm = double(weight[c]) * dy[c];
          dinp[i * C + c] += F(s * (dnorm - norm * dnorm_norm_mean));
        }
      }
    });
  }
  if (dweight) {
    parallel_for(size_t(C), kChannelGrain, [&](size_t c0, size_t c1) {
      for (size_t i = 0; i < size_t(N); ++i) {
        const F* x = inp + i * C;
        const F* dy = dout + i * C;
        const double s = rstd[i];
        for (size_t c = c0; c < c1; ++c) dweight[c] += F(x[c] * s * dy[c]);
      }
    });
  }
}

#define MEG_INSTANTIATE(F)                                                                        \
  template void layernorm_forward<F>(F*, F*, F*, const F*, const F*, const F*, int, int, F);      \
  template void layernorm_backward<F>(F*, F*, F*, const F*, const F*, const F*, const F*, const F*, \
                                      int, int);                                                  \
  template void rmsnorm_forward<F>(F*, F*, const F*, const F*, int, int, F);                      \
  template void rmsnorm_backward<F>(F*, F*, const F*, const F*, const F*, const F*, int, int);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(double)
#undef MEG_INSTANTIATE

}  // namespace meg::cpu
