// One expert's MLP over R rows (the routed experts and the shared experts), the model's dense MLP
// with the routing weights applied before fc2, as Megatron's experts apply them by default
// (moe_apply_probs_on_input off):
//   h = x @ W1^T + b1        [R, FC]  (FC = F, or 2F for SwiGLU: [gate; up])
//   a = act(h) * p           [R, F]   p the row's routing weight (null: 1, the shared experts)
//   y = a @ W2^T + b2        [R, C]
// so fc2's bias is added unweighted, as Megatron's does. The backward also gives each row's dp.
#pragma once

#include <cstdint>

#include "model/config.hpp"

namespace meg {

// An expert's weights (or their gradients); biases null without use-bias.
template <typename F>
struct ExpertWeights {
  const F *w1, *b1, *w2, *b2;
};
template <typename F>
struct ExpertGrads {
  F *w1, *b1, *w2, *b2;
};

// What the forward keeps: h [R, FC] and a [R, F] (weighted).
template <typename F>
struct ExpertActs {
  F *h, *a;
};

// Y [R, C] from X [R, C]; P [R] the rows' weights or null.
template <typename F>
void expert_mlp_forward(Activation act, const ExpertWeights<F>& w, const F* x, const double* p, int R, int C, int Fh,
                        const ExpertActs<F>& keep, F* y);

// From DY [R, C]: DX [R, C] += the input's gradient, G the weights' (accumulated), DP [R] = the
// weights' gradients (when P and DP are non-null). SCRATCH: 2 R FC values.
template <typename F>
void expert_mlp_backward(Activation act, const ExpertWeights<F>& w, const ExpertGrads<F>& g, const F* x,
                         const double* p, const ExpertActs<F>& keep, const F* dy, int R, int C, int Fh, F* scratch,
                         F* dx, double* dp);

}  // namespace meg
