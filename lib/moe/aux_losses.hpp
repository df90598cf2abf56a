// The router's auxiliary losses (Megatron's router.py and moe_utils.py), their values and their
// gradients with respect to the router logits L [N, E]. Their gradients are added to the router's
// in the layer's backward (Megatron's MoEAuxLossAutoScaler), never to the language-model loss;
// each micro-batch's losses take the scale of its LM loss (the trainer averages the gradients over
// micro-batches and replicas, as Megatron scales them by 1 / num-micro-batches).
//
// The load-balancing losses score every expert with s = softmax(L) (softmax routing) or
// s = sigmoid(L) / (sum_E sigmoid(L) + 1e-20) (sigmoid routing), and count c_i, the tokens whose
// top-k of s holds expert i (no groups, no expert bias):
//   aux_loss      coeff * E / (k T^2) * sum_i (sum_x s_i(x)) c_i        over the T = N tokens (Switch)
//   seq_aux_loss  coeff / B * sum_b sum_i (E c_bi / (S k)) (1/S) sum_{x in b} s_i(x)   per sequence b of
//                 S tokens, c_bi its count (DeepSeek-V2's sequence-wise loss)
//   z_loss        zcoeff * (1/N) sum_x logsumexp(L(x))^2                (ST-MoE)
// The values logged are the losses without their coefficients, as Megatron logs them
// (load_balancing_loss, z_loss).
#pragma once

#include <cstdint>

#include "moe/moe_config.hpp"

namespace meg {

// The load-balancing loss of LOGITS [N, E] (N = B S tokens, sequence-major: token n is in sequence
// n / S), coefficient included, per the config's moe-router-load-balancing-type (0 for none); with
// DLOGITS non-null its gradient is added there.
double load_balancing_loss(const MoeConfig& moe, const double* logits, int64_t B, int64_t S, double* dlogits);

// The z-loss of LOGITS [N, E], coefficient included; with DLOGITS non-null its gradient is added.
double z_loss(const MoeConfig& moe, const double* logits, int64_t N, double* dlogits);

}  // namespace meg
