// What every device's implementation of the layer kinds (model/cpu_layers.hpp,
// model/cuda_layers.hpp) shares: a rank's sizes of a layer, where a layer is, and the dropout
// sites of its block.
#pragma once

#include <cstdint>

#include "model/config.hpp"
#include "model/param_table.hpp"

namespace meg {

// One rank's sizes of a layer over N rows: NH, NKV its query and key/value heads of HS, CQ = NH*HS,
// KV = NKV*HS, QKV their sum with the keys', Fh the MLP's hidden width and FC its first product's.
struct LayerDims {
  int N, C, NH, NKV, HS, KV, CQ, QKV, Fh, FC;
  Activation activation;
};
LayerDims layer_dims(const ModelConfig& config, int tp_size, int N);

// Where a layer is: its tensors, its index in the layer sequence and its block.
struct LayerPlace {
  const LayerTensors& tensors;
  int64_t layer, block;
};

// The dropout sites of block BLOCK (model/gpt.hpp) are this + 1 for the attention probabilities,
// + 2 for the attention layer's output, + 3 for the MLP layer's; a kind with a block of its own
// may use all three.
inline uint64_t block_dropout_sites(int64_t block) { return 3 * static_cast<uint64_t>(block); }

}  // namespace meg
