// The kinds of layer a model is made of, and the tensors each part of the model contributes to the
// parameter table (model/param_table.hpp).
//
// A model is an embedding, a sequence of layers and a head. Megatron's --hybrid-layer-pattern
// spells the sequence, one symbol a layer:
//   *  attention: input norm, fused q/k/v projection, (RoPE,) causal attention, output projection,
//      residual add
//   -  dense MLP: pre-MLP norm, fc1 (gate and up fused for SwiGLU), activation, fc2, residual add
// A GPT block (Megatron's TransformerLayer) is "*-", the only pattern the models implement so far:
// the default is "*-" repeated num-layers times. Mixture-of-experts ("E") and Mamba ("M") layers
// are refused by name until they are implemented.
//
// The tensors keep Megatron core's local-spec names, numbered by block (the "*-" pair a layer
// belongs to), so that checkpoints name them as before:
//   embedding.word_embeddings.weight                      [Vp, C]
//   embedding.position_embeddings.weight                  [seq_length, C]   (learned_absolute only)
//   decoder.layers.i.input_layernorm.weight               [C]               attention layer
//   decoder.layers.i.input_layernorm.bias                 [C]               (layernorm only)
//   decoder.layers.i.self_attention.linear_qkv.weight     [C + 2*NKV*HS, C]
//   decoder.layers.i.self_attention.linear_qkv.bias       [C + 2*NKV*HS]    (use_bias only)
//   decoder.layers.i.self_attention.linear_proj.weight    [C, C]
//   decoder.layers.i.self_attention.linear_proj.bias      [C]               (use_bias only)
//   decoder.layers.i.pre_mlp_layernorm.weight             [C]               MLP layer
//   decoder.layers.i.pre_mlp_layernorm.bias               [C]               (layernorm only)
//   decoder.layers.i.mlp.linear_fc1.weight                [FC, C]  FC = F, or 2F for SwiGLU
//   decoder.layers.i.mlp.linear_fc1.bias                  [FC]              (use_bias only)
//   decoder.layers.i.mlp.linear_fc2.weight                [C, F]
//   decoder.layers.i.mlp.linear_fc2.bias                  [C]               (use_bias only)
//   decoder.final_layernorm.weight                        [C]
//   decoder.final_layernorm.bias                          [C]               (layernorm only)
//   output_layer.weight                                   [Vp, C]           (untied only)
// The "layernorm" names are kept for RMSNorm too, as Megatron does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/param_tensor.hpp"

namespace meg {

struct ModelConfig;

enum class LayerKind { attention, mlp };

// One layer of the sequence: its kind and the block (the "*-" pair) whose names it shares.
struct LayerSpec {
  LayerKind kind = LayerKind::attention;
  int64_t block = 0;
  bool operator==(const LayerSpec&) const = default;
};

// "*-" repeated BLOCKS times.
std::string default_layer_pattern(int64_t blocks);

// The layers PATTERN spells. InputError (prefixed with WHERE) naming the symbol and its place for
// anything but "*-" blocks: an unknown symbol, a kind not implemented yet, a layer out of its pair.
std::vector<LayerSpec> parse_layer_pattern(const std::string& pattern, const std::string& where);

// The tensors each part contributes, in storage order, with everything but their offsets and
// layer index (param_table.cpp numbers them): the embeddings, one layer of the sequence, the head.
std::vector<ParamTensor> embedding_tensors(const ModelConfig& config);
std::vector<ParamTensor> layer_tensors(const ModelConfig& config, const LayerSpec& layer);
std::vector<ParamTensor> head_tensors(const ModelConfig& config);

}  // namespace meg
