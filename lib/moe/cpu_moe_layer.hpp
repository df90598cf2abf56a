// The MoE layer (kind 'E') on the CPU: it completes an attention layer as the MLP does,
//   h   = norm(x)                                     the pre-MLP norm
//   L   = h @ Wr^T                                    router logits [N, E], in double
//   experts, p = route(L)                             moe/router.hpp
//   plan = dispatch(experts, p)                       capacity and permutation, moe/dispatch.hpp
//   y   = unpermute(expert_e(permute(h), p))          each expert's MLP on its rows, p before fc2
//         + gate(h) * shared(h)                       shared experts (gate = sigmoid(h . g) or 1)
//   out = x + dropout(y)                              the MLP's dropout site
// Its backward adds the router's gradient from the routing weights and, in training, the gradients
// of the load-balancing loss and the z-loss (moe/aux_losses.hpp), whose values it keeps for
// logging (CpuLayer::add_auxiliary_losses).
//
// The router (route, dispatch plan, logits) of the last forward is the layer's own state, not the
// model's activation buffer: it is integer and double data, and a layer object serves one model,
// which runs one forward of it at a time. One tensor-parallel rank only (expert and tensor
// parallelism come later).
#pragma once

#include <memory>

#include "model/cpu_layers.hpp"

namespace meg {

template <typename F>
std::unique_ptr<CpuLayer<F>> make_cpu_moe_layer(const ModelConfig& config, int tp_size);

}  // namespace meg
