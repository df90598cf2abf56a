// One expert's MLP (see expert_mlp.hpp).
#include "moe/expert_mlp.hpp"

#include <algorithm>

#include "ops/cpu/ops.hpp"

namespace meg {

namespace {

int fc1_width(Activation act, int Fh) { return act == Activation::swiglu ? 2 * Fh : Fh; }

}  // namespace

template <typename F>
void expert_mlp_forward(Activation act, const ExpertWeights<F>& w, const F* x, const double* p, int R, int C, int Fh,
                        const ExpertActs<F>& keep, F* y) {
  if (R == 0) return;
  const int FC = fc1_width(act, Fh);
  cpu::linear_forward(keep.h, x, w.w1, w.b1, R, C, FC);
  if (act == Activation::swiglu)
    cpu::swiglu_forward(keep.a, keep.h, R, Fh);
  else
    cpu::gelu_forward(keep.a, keep.h, size_t(R) * size_t(Fh));
  if (p)
    for (int r = 0; r < R; ++r)
      for (int f = 0; f < Fh; ++f) keep.a[size_t(r) * Fh + f] *= F(p[r]);
  cpu::linear_forward(y, keep.a, w.w2, w.b2, R, Fh, C);
}

template <typename F>
void expert_mlp_backward(Activation act, const ExpertWeights<F>& w, const ExpertGrads<F>& g, const F* x,
                         const double* p, const ExpertActs<F>& keep, const F* dy, int R, int C, int Fh, F* scratch,
                         F* dx, double* dp) {
  if (R == 0) return;
  const int FC = fc1_width(act, Fh);
  const size_t RF = size_t(R) * size_t(Fh);
  F* da = scratch;       // [R, F]
  F* dh = scratch + RF;  // [R, FC]
  std::fill(da, da + RF, F(0));
  cpu::linear_backward(da, g.w2, g.b2, dy, keep.a, w.w2, R, Fh, C);
  if (p) {
    // a = act(h) p: dp = <da, act(h)> (act(h) recomputed, as p may be 0), and act(h)'s gradient is da p.
    F* act_h = dh + size_t(R) * (FC - Fh);  // act(h), in the tail of dh's room
    if (act == Activation::swiglu)
      cpu::swiglu_forward(act_h, keep.h, R, Fh);
    else
      cpu::gelu_forward(act_h, keep.h, RF);
    for (int r = 0; r < R; ++r) {
      double dot = 0;
      for (int f = 0; f < Fh; ++f) {
        const size_t i = size_t(r) * Fh + f;
        dot += double(da[i]) * double(act_h[i]);
        da[i] *= F(p[r]);
      }
      if (dp) dp[r] = dot;
    }
  }
  std::fill(dh, dh + size_t(R) * FC, F(0));
  if (act == Activation::swiglu)
    cpu::swiglu_backward(dh, da, keep.h, R, Fh);
  else
    cpu::gelu_backward(dh, da, keep.h, RF);
  cpu::linear_backward(dx, g.w1, g.b1, dh, x, w.w1, R, C, FC);
}

#define MEG_EXPERT_MLP(F)                                                                                        \
  template void expert_mlp_forward<F>(Activation, const ExpertWeights<F>&, const F*, const double*, int, int, int, \
                                      const ExpertActs<F>&, F*);                                                 \
  template void expert_mlp_backward<F>(Activation, const ExpertWeights<F>&, const ExpertGrads<F>&, const F*,      \
                                       const double*, const ExpertActs<F>&, const F*, int, int, int, F*, F*, double*);
MEG_EXPERT_MLP(float)
MEG_EXPERT_MLP(double)
#undef MEG_EXPERT_MLP

}  // namespace meg
