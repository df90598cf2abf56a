// The MoE router's top-k routing (Megatron's topk_routing_with_score_function), forward and
// backward, in double on the CPU: from the logits L [N, E] of N tokens (L = h @ W^T, W the router
// weight [E, C]), each token's k experts and their weights (probabilities) p.
//
//   softmax, post-top-k (the default):  S = top-k(L);  p_j = exp(L_j) / sum_{i in S} exp(L_i)
//   softmax, pre-softmax:               q = softmax(L) over all E;  S = top-k(q);  p_j = q_j
//                                       (no renormalisation over the k)
//   sigmoid:                            s = sigmoid(L);  S = top-k(s + b);  p_j = s_j / (sum_{i in S} s_i
//                                       + 1e-20) (for k = 1, p = s); b the expert bias, which
//                                       shifts the choice only, never the weights
// then p *= moe-router-topk-scaling-factor when given. The top-k is over the selection scores
// (L, q or s + b), largest first, ties to the lower expert. Group-limited routing
// (moe-router-num-groups G, moe-router-group-topk g) first splits the experts into G equal groups,
// scores each group by the sum of its top k/g selection scores, keeps the g best groups and takes
// the top-k among their experts only.
//
// The backward maps dp (the loss's gradient of the weights) to dL through the chosen experts'
// score function; the choice itself has no gradient.
#pragma once

#include <cstdint>

#include "moe/moe_config.hpp"

namespace meg {

// EXPERTS [N, k] and PROBS [N, k] (largest selection score first) from LOGITS [N, E]; BIAS [E]
// (the expert bias, sigmoid only) may be null.
void route_forward(const MoeConfig& moe, const double* logits, const double* bias, int64_t N, int32_t* experts,
                   double* probs);

// DLOGITS [N, E] += the gradient of LOGITS from DPROBS [N, k], for the routing EXPERTS that
// route_forward gave for LOGITS.
void route_backward(const MoeConfig& moe, const double* logits, const int32_t* experts, const double* dprobs,
                    int64_t N, double* dlogits);

}  // namespace meg
