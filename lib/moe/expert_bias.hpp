// Aux-loss-free load balancing (moe-router-enable-expert-bias; DeepSeek-V3, Megatron's
// get_updated_expert_bias): once per global batch each MoE layer's expert bias b [E] (fp32, a
// tensor of the parameter table that no optimizer moves: its gradient is always 0) moves towards
// balance by
//   b_i += rate * sign(mean(c) - c_i)
// where c_i counts the tokens routed to expert i over the global batch (all micro-batches, summed
// over the data-parallel replicas), so an overloaded expert is chosen less often. The bias shifts
// the router's choice only, never the routing weights (moe/router.hpp).
#pragma once

#include <cstdint>

namespace meg {

// BIAS [E] += RATE * sign(mean(COUNTS) - COUNTS), COUNTS [E].
void update_expert_bias(float* bias, const double* counts, int64_t E, double rate);

}  // namespace meg
