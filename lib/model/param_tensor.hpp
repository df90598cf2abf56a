// One tensor of a model's flat parameter array: the entries of the parameter table
// (model/param_table.hpp) that the models, the optimizer, checkpoints, the parallel splits and the
// converters share. Each entry says what the tensor is (its layer and role), how it starts, how it
// splits over tensor-parallel ranks, where the pipeline keeps it and whether sequence parallelism
// leaves its gradient partial, so that nothing needs to read that from the tensor's name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace meg {

// The offset of a tensor a table lacks (biases without use-bias, a tensor another stage holds).
inline constexpr size_t kAbsentTensor = static_cast<size_t>(-1);
// The layer of a tensor outside the layer sequence: the embeddings and the head.
inline constexpr int64_t kNoLayer = -1;

// What a tensor is within its layer (or, outside the layers, within the model). Norms, the
// attention's projections and the MLP's are roles of the layer kind that owns them
// (model/layer_spec.hpp): an attention layer's norm is its input norm, an MLP layer's its pre-MLP
// norm.
enum class TensorRole {
  word_embeddings,      // [Vp, C]
  position_embeddings,  // [seq_length, C], learned absolute positions only
  norm_weight,          // [C], the layer's input norm
  norm_bias,            // [C], LayerNorm only
  qkv_weight,           // [NH*HS + 2*NKV*HS, C]: q, k, v stacked
  qkv_bias,
  proj_weight,          // [C, NH*HS]: the attention's output projection
  proj_bias,
  q_norm_weight,        // [HS], qk-layernorm only: the RMSNorm of every query head
  k_norm_weight,        // [HS], qk-layernorm only: of every key head
  fc1_weight,           // [F, C], or [2F, C] for a gated MLP: gate, up stacked
  fc1_bias,
  fc2_weight,           // [C, F]
  fc2_bias,
  router_weight,        // [E, C]: an MoE layer's router (moe/router.hpp)
  router_expert_bias,   // [E], moe-router-enable-expert-bias only: no gradient (moe/expert_bias.hpp)
  expert_fc1_weight,    // [FC, C] of each expert (FC from moe-ffn-hidden-size), gate, up stacked
  expert_fc1_bias,
  expert_fc2_weight,    // [C, F] of each expert
  expert_fc2_bias,
  shared_fc1_weight,    // [FC, C]: the shared experts (moe-shared-expert-intermediate-size)
  shared_fc1_bias,
  shared_fc2_weight,    // [C, F]
  shared_fc2_bias,
  shared_gate_weight,   // [1, C], moe-shared-expert-gate only
  final_norm_weight,    // [C]
  final_norm_bias,
  output_layer_weight,  // [Vp, C], untied only
};
inline constexpr size_t kTensorRoles = size_t(TensorRole::output_layer_weight) + 1;

// How init() fills a tensor.
enum class ParamInit { normal, normal_scaled, zeros, ones };

// How a tensor splits over the tensor-parallel group, Megatron's layers' split: a column-parallel
// linear layer splits its output (the weight's rows, and its bias), a row-parallel one its input
// (the weight's columns; its bias, added once after the sum, is replicated), the vocabulary-
// parallel embedding and output layer the padded vocabulary (rows).
enum class TpSplit { replicated, column_parallel, row_parallel, vocab_parallel };

struct TpSplitOf {
  TpSplit split = TpSplit::replicated;
  // Sizes along the split axis of the stacked sub-tensors (q, k, v; gate, up), each cut into
  // tensor-parallel-size equal pieces; one part for an unstacked tensor, none when replicated.
  std::vector<int64_t> parts;
};

// Which pipeline stages hold a tensor (model/pipeline.hpp).
enum class PipelinePlace {
  layer,        // the stage that runs its layer
  first_stage,  // the embeddings
  last_stage,   // the final norm and the output layer
  first_and_last_stage,  // a tied word embedding: the input lookup and the output layer
};

// One tensor of the flat array.
struct ParamTensor {
  std::string name;  // its checkpoint name (Megatron core's, model/param_table.hpp)
  int64_t layer = kNoLayer;  // its index in the layer sequence, or kNoLayer
  TensorRole role = TensorRole::word_embeddings;
  std::vector<int64_t> shape;
  size_t offset = 0;         // in elements, into the flat array
  size_t numel = 0;          // product of shape
  bool weight_decay = true;  // false for norm weights and biases
  ParamInit init = ParamInit::normal;
  TpSplitOf tp;
  PipelinePlace pipeline = PipelinePlace::layer;
  // With sequence parallelism its gradient covers only this rank's rows of the residual stream
  // (norms, the position embedding), so the backends sum it over the tensor-parallel group.
  bool sequence_parallel = false;
  // An expert's tensor (MoE layers): the expert's number in its layer, else -1. A layer's experts'
  // tensors of one role lie back to back, so the layer finds expert j's at the offset of expert
  // 0's plus j times its size (TensorIndex holds expert 0's).
  int64_t expert = -1;
};

// The length of the flat array laid out by TABLE (offsets contiguous from 0).
inline size_t table_size(const std::vector<ParamTensor>& table) {
  return table.empty() ? 0 : table.back().offset + table.back().numel;
}

}  // namespace meg
