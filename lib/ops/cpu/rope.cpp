// Rotary position embedding (RoPE), "rotate_half" layout.
//
// In each head of size HS, element i is paired with element i + HS/2 (not with i + 1 as in the
// original paper's interleaved form), which is how Hugging Face Llama and Megatron lay out the
// weights. The pair at position t is rotated by the angle t * inv_freq[i], the frequencies of
// ops/rope_frequencies.hpp (theta^(-2i/HS) without scaling):
//   out[i]        = x[i] cos - x[i+HS/2] sin
//   out[i+HS/2]   = x[i+HS/2] cos + x[i] sin
// A rotation is orthogonal, so the backward is the same rotation by the opposite angle.
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <vector>

#include "core/parallel.hpp"
#include "ops/cpu/ops.hpp"
#include "ops/rope_frequencies.hpp"

namespace meg::cpu {

namespace {

// cos and sin of every (position, pair) angle for the T positions from FIRST: two [T, HS/2]
// tables, computed in double once per call rather than once per head.
struct RopeTables {
  std::vector<double> cos, sin;
  RopeTables(int T, int HS, std::span<const double> inv_freq, int first = 0) {
    if (HS % 2 != 0) throw std::invalid_argument("rope: head size must be even");
    const int half = HS / 2;
    if (inv_freq.size() != size_t(half)) throw std::invalid_argument("rope: need head size / 2 frequencies");
    cos.resize(size_t(T) * half);
    sin.resize(size_t(T) * half);
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < half; ++i) {
        const double angle = (first + t) * inv_freq[size_t(i)];
        cos[size_t(t) * half + i] = std::cos(angle);
        sin[size_t(t) * half + i] = std::sin(angle);
      }
    }
  }
};

// Rotates every head of x[B,T,NH,HS] by the tables' angles times `sign` (+1 forward, -1 backward)
// and adds (accumulate) or writes the result to out. Both elements of a pair are read before
// either is written, so out may equal x when writing. Each (b, t) row of NH heads is rotated on
// its own, so the rows are split over threads.
template <typename F>
void rotate(F* out, const F* x, int B, int T, int NH, int HS, const RopeTables& tab, double sign,
            bool accumulate) {
  const int half = HS / 2;
  const size_t grain = 8192 / (size_t(NH) * HS) + 1;  // rows per chunk
  parallel_for(size_t(B) * T, grain, [&](size_t begin, size_t end) {
    for (size_t bt = begin; bt < end; ++bt) {
      const size_t t = bt % T;
      const double* c = tab.cos.data() + t * half;
      const double* s = tab.sin.data() + t * half;
      for (int h = 0; h < NH; ++h) {
        const size_t off = (bt * NH + h) * HS;
        for (int i = 0; i < half; ++i) {
          const double x1 = x[off + i], x2 = x[off + i + half];
          const double sn = sign * s[i];
          const double y1 = x1 * c[i] - x2 * sn;
          const double y2 = x2 * c[i] + x1 * sn;
          if (accumulate) {
            out[off + i] += F(y1);
            out[off + i + half] += F(y2);
          } else {
            out[off + i] = F(y1);
            out[off + i + half] = F(y2);
          }
        }
      }
    }
  });
}

}  // namespace

template <typename F>
void rope_forward(F* out, const F* inp, int B, int T, int NH, int HS, std::span<const double> inv_freq) {
  rotate(out, inp, B, T, NH, HS, RopeTables(T, HS, inv_freq), +1.0, false);
}

template <typename F>
void rope_backward(F* dinp, const F* dout, int B, int T, int NH, int HS, std::span<const double> inv_freq) {
  rotate(dinp, dout, B, T, NH, HS, RopeTables(T, HS, inv_freq), -1.0, true);
}

template <typename F>
void rope_forward_from(F* out, const F* inp, int T, int NH, int HS, int first, std::span<const double> inv_freq) {
  rotate(out, inp, 1, T, NH, HS, RopeTables(T, HS, inv_freq, first), +1.0, false);
}

template <typename F>
void rope_forward(F* out, const F* inp, int B, int T, int NH, int HS, nd<F> theta) {
  rope_forward(out, inp, B, T, NH, HS, rope_inv_freq(HS, theta));
}

template <typename F>
void rope_backward(F* dinp, const F* dout, int B, int T, int NH, int HS, nd<F> theta) {
  rope_backward(dinp, dout, B, T, NH, HS, rope_inv_freq(HS, theta));
}

template <typename F>
void rope_forward_from(F* out, const F* inp, int T, int NH, int HS, int first, nd<F> theta) {
  rope_forward_from(out, inp, T, NH, HS, first, rope_inv_freq(HS, theta));
}

#define MEG_INSTANTIATE(F)                                                  \
  template void rope_forward<F>(F*, const F*, int, int, int, int, F);       \
  template void rope_backward<F>(F*, const F*, int, int, int, int, F);      \
  template void rope_forward_from<F>(F*, const F*, int, int, int, int, F);       \
  template void rope_forward<F>(F*, const F*, int, int, int, int, std::span<const double>);  \
  template void rope_backward<F>(F*, const F*, int, int, int, int, std::span<const double>); \
  template void rope_forward_from<F>(F*, const F*, int, int, int, int, std::span<const double>);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(double)
#undef MEG_INSTANTIATE

}  // namespace meg::cpu
