// The token dispatch of an MoE layer: which (token, expert) pairs the experts compute, and the
// permutation of the tokens' rows into groups by expert and back (Megatron's
// apply_router_token_dropping, permute and unpermute). Expert parallelism's all-to-all will move
// the permuted groups between the two.
//
// Capacity (moe-expert-capacity-factor f; none: dropless, every routed pair kept): each expert
// takes at most cap = ceil(N k / E * f) of the N tokens (Megatron's get_capacity); when cap >= N
// nothing is dropped. Which routed tokens an expert keeps:
//   probs     those of the largest routing weights (ties to the earlier token)
//   position  the earliest tokens
// With moe-pad-expert-input-to-capacity every expert's input is filled up to min(cap, N) rows with
// tokens not routed to it (weight 0; the earliest such tokens), so that all experts have the same
// row count (Megatron's capacity mask, which takes every token when cap > N).
//
// The plan orders its rows by expert, and within an expert by token. permute gathers the rows of
// the tokens, unpermute adds rows back to their tokens: each is the other's backward.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/moe_config.hpp"

namespace meg {

struct DispatchPlan {
  std::vector<int64_t> expert_rows;  // [E]: rows of each expert, in order
  std::vector<int32_t> token;        // [M]: the token of each row
  std::vector<int32_t> slot;         // [M]: its routing slot n k + j, or -1 for a padding row
  std::vector<double> prob;          // [M]: its routing weight (0 for padding)
  int64_t rows() const { return int64_t(token.size()); }
};

// The capacity of each expert for N tokens (N when the config is dropless).
int64_t expert_capacity(const MoeConfig& moe, int64_t N);
// The most rows a plan of N tokens may have (what the layer's buffers are sized for).
int64_t max_dispatch_rows(const MoeConfig& moe, int64_t N);

// The plan of routing EXPERTS [N, k], PROBS [N, k] (route_forward's).
DispatchPlan plan_dispatch(const MoeConfig& moe, const int32_t* experts, const double* probs, int64_t N);

// OUT [M, C] = the rows of X [N, C] that PLAN names (also the backward of unpermute).
template <typename F>
void permute_rows(const DispatchPlan& plan, const F* x, int64_t C, F* out);
// OUT [N, C] += each row of Y [M, C] at its token (also the backward of permute_rows).
template <typename F>
void unpermute_rows(const DispatchPlan& plan, const F* y, int64_t C, F* out);

}  // namespace meg
