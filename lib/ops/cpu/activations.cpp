// Pointwise activations: GELU (GPT-2's MLP) and SwiGLU (Llama's MLP). Computed in double per
// element, rounded once to F. Every output element depends on its own inputs only, so the work is
// split over fixed chunks of elements (GELU) or rows (SwiGLU) with no effect on the results.
#include <cmath>
#include <cstddef>

#include "core/parallel.hpp"
#include "ops/cpu/ops.hpp"

namespace meg::cpu {

namespace {
const double kGeluK = std::sqrt(2.0 / M_PI);  // sqrt(2/pi)
constexpr double kGeluA = 0.044715;

constexpr size_t kGrain = 8192;  // elements per chunk: enough work to pay for a hand-off

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

// gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
template <typename F>
void gelu_forward(F* out, const F* inp, size_t n) {
  parallel_for(n, kGrain, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const double x = inp[i];
      const double u = kGeluK * (x + kGeluA * x * x * x);
      out[i] = F(0.5 * x * (1.0 + std::tanh(u)));
    }
  });
}

// d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx,  du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
template <typename F>
void gelu_backward(F* dinp, const F* dout, const F* inp, size_t n) {
  parallel_for(n, kGrain, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const double x = inp[i];
      const double u = kGeluK * (x + kGeluA * x * x * x);
      const double th = std::tanh(u);
      const double du = kGeluK * (1.0 + 3.0 * kGeluA * x * x);
      const double local = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du;
      dinp[i] += F(local * dout[i]);
    }
  });
}

// out = silu(gate) * up,  silu(g) = g * sigmoid(g); gate is inp[:, :H], up is inp[:, H:].
template <typename F>
void swiglu_forward(F* out, const F* inp, int N, int H) {
  parallel_for(size_t(N), kGrain / H + 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const F* gate = inp + i * 2 * H;
      const F* up = gate + H;
      for (int j = 0; j < H; ++j) {
        const double g = gate[j];
        out[i * H + j] = F(g * sigmoid(g) * up[j]);
      }
    }
  });
}

// d gate = dout * up * silu'(g),  silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g)));
// d up = dout * silu(g).
template <typename F>
void swiglu_backward(F* dinp, const F* dout, const F* inp, int N, int H) {
  parallel_for(size_t(N), kGrain / H + 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const F* gate = inp + i * 2 * H;
      const F* up = gate + H;
      F* dgate = dinp + i * 2 * H;
      F* dup = dgate + H;
      for (int j = 0; j < H; ++j) {
        const double g = gate[j], sg = sigmoid(g), dy = dout[i * H + j];
        dgate[j] += F(dy * up[j] * sg * (1.0 + g * (1.0 - sg)));
        dup[j] += F(dy * g * sg);
      }
    }
  });
}

#define MEG_INSTANTIATE(F)                                              \
  template void gelu_forward<F>(F*, const F*, size_t);                  \
  template void gelu_backward<F>(F*, const F*, const F*, size_t);       \
  template void swiglu_forward<F>(F*, const F*, int, int);              \
  template void swiglu_backward<F>(F*, const F*, const F*, int, int);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(double)
#undef MEG_INSTANTIATE

}  // namespace meg::cpu
