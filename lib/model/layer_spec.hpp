// The kinds of layer a model is made of, and the tensors each part of the model contributes to the
// parameter table (model/param_table.hpp).
//
// A model is an embedding, a sequence of layers and a head. Megatron's --hybrid-layer-pattern
// spells the sequence, one symbol a layer; each symbol is a layer kind of the registry below.
// The kinds lib/ registers:
//   *  attention: input norm, fused q/k/v projection, (RoPE,) causal attention, output projection,
//      residual add
//   -  dense MLP: pre-MLP norm, fc1 (gate and up fused for SwiGLU), activation, fc2, residual add
//   E  mixture of experts (moe/cpu_moe_layer.hpp): pre-MLP norm, router, experts, shared experts,
//      residual add; it completes an attention layer as the MLP does (num-experts > 0)
// Mamba ("M") layers are refused by name until they are implemented.
//
// Layers are numbered by block, as Megatron core's TransformerLayer names them: a GPT block is
// "*-", an attention layer and the MLP layer that completes it, both under decoder.layers.<block>.
// A kind that completes another (the MLP or the MoE layer completes the attention) must follow it,
// and the kind it completes must be followed by one such; every other layer is a block of its own. The default pattern
// is "*-" repeated num-layers times; num-layers counts the blocks. Blocks are also what pipeline
// stages share out (model/pipeline.hpp), what the dropout sites are numbered by (3 per block,
// model/cpu_layers.hpp) and what the scaled initialisation's depth counts (model/init.hpp).
//
// Adding a layer kind means registering it here (its symbol, name and tensors), giving it an
// implementation for each device that runs it (model/cpu_layers.hpp, ...), and Hugging Face names
// for the architectures that have it (convert/hf_names.cpp); nothing else reads the kind.
//
// The tensors keep Megatron core's local-spec names, numbered by block, so that checkpoints name
// them as before:
//   embedding.word_embeddings.weight                      [Vp, C]
//   embedding.position_embeddings.weight                  [seq_length, C]   (learned_absolute only)
//   decoder.layers.i.input_layernorm.weight               [C]               attention layer
//   decoder.layers.i.input_layernorm.bias                 [C]               (layernorm only)
//   decoder.layers.i.self_attention.linear_qkv.weight     [NH*HS + 2*NKV*HS, C]  (HS: kv-channels)
//   decoder.layers.i.self_attention.linear_qkv.bias       [NH*HS + 2*NKV*HS] (use_bias or add_qkv_bias)
//   decoder.layers.i.self_attention.q_layernorm.weight    [HS]              (qk_layernorm only)
//   decoder.layers.i.self_attention.k_layernorm.weight    [HS]              (qk_layernorm only)
//   decoder.layers.i.self_attention.linear_proj.weight    [C, NH*HS]
//   decoder.layers.i.self_attention.linear_proj.bias      [C]               (use_bias only)
//   decoder.layers.i.pre_mlp_layernorm.weight             [C]               MLP layer
//   decoder.layers.i.pre_mlp_layernorm.bias               [C]               (layernorm only)
//   decoder.layers.i.mlp.linear_fc1.weight                [FC, C]  FC = F, or 2F for SwiGLU
//   decoder.layers.i.mlp.linear_fc1.bias                  [FC]              (use_bias only)
//   decoder.layers.i.mlp.linear_fc2.weight                [C, F]
//   decoder.layers.i.mlp.linear_fc2.bias                  [C]               (use_bias only)
//   decoder.layers.i.pre_mlp_layernorm.weight (and .bias)  [C]               MoE layer
//   decoder.layers.i.mlp.router.weight                    [E, C]
//   decoder.layers.i.mlp.router.expert_bias               [E]               (moe-router-enable-expert-bias)
//   decoder.layers.i.mlp.experts.local_experts.j.linear_fc1.weight  [FC, C] FC = Fe or 2Fe (Fe: moe-ffn-hidden-size)
//   decoder.layers.i.mlp.experts.local_experts.j.linear_fc1.bias    [FC]    (use_bias only)
//   decoder.layers.i.mlp.experts.local_experts.j.linear_fc2.weight  [C, Fe]
//   decoder.layers.i.mlp.experts.local_experts.j.linear_fc2.bias    [C]     (use_bias only)
//   decoder.layers.i.mlp.shared_experts.linear_fc1.weight [FS, C] FS = S or 2S (moe-shared-expert-intermediate-size)
//   decoder.layers.i.mlp.shared_experts.linear_fc1.bias, .linear_fc2.weight [C, S], .linear_fc2.bias
//   decoder.layers.i.mlp.shared_experts.gate_weight       [1, C]            (moe-shared-expert-gate)
// (Megatron core's SequentialMLP names the experts so; all experts' fc1 weights lie back to back,
// then their biases, then the fc2 weights and biases.)
//   decoder.final_layernorm.weight                        [C]
//   decoder.final_layernorm.bias                          [C]               (layernorm only)
//   output_layer.weight                                   [Vp, C]           (untied only)
// The "layernorm" names are kept for RMSNorm too, as Megatron does.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/param_tensor.hpp"

namespace meg {

struct ModelConfig;

// A kind of layer: an entry of the registry.
struct LayerKind {
  // The symbols of the kinds lib/ registers.
  static constexpr char attention = '*';
  static constexpr char mlp = '-';
  static constexpr char moe = 'E';

  char symbol = 0;   // its symbol in the layer pattern
  std::string name;  // for messages: "attention", "MLP"
  // The symbol of the kind whose block this one completes ('-' and 'E' complete '*'), or 0 for a
  // kind that opens a block.
  char completes = 0;
  // The tensors of one such layer whose names start with PREFIX ("decoder.layers.<block>."), in
  // storage order, with everything but their offsets and layer index (param_table.cpp numbers
  // them). Roles are the layer's own: no role twice.
  std::function<std::vector<ParamTensor>(const ModelConfig& config, const std::string& prefix)> tensors;
};

// Adds KIND to the registry (a test's toy kind, say); std::logic_error when its symbol is taken or
// it completes an unregistered kind.
void register_layer_kind(LayerKind kind);
// The registered kind of SYMBOL; std::logic_error when there is none (parse_layer_pattern says
// which are valid).
const LayerKind& layer_kind(char symbol);

// One layer of the sequence: its kind's symbol and the block whose names it has.
struct LayerSpec {
  char kind = LayerKind::attention;
  int64_t block = 0;
  bool operator==(const LayerSpec&) const = default;
};

// "*-" repeated BLOCKS times.
std::string default_layer_pattern(int64_t blocks);

// The layers PATTERN spells. InputError (prefixed with WHERE) naming the symbol and its place for
// an unknown symbol, a kind not implemented yet, or a layer out of its block.
std::vector<LayerSpec> parse_layer_pattern(const std::string& pattern, const std::string& where);

// The number of blocks of LAYERS (the last one's number plus one).
int64_t count_blocks(const std::vector<LayerSpec>& layers);

// The tensors each part contributes, in storage order, with everything but their offsets and
// layer index: the embeddings, one layer of the sequence, the head.
std::vector<ParamTensor> embedding_tensors(const ModelConfig& config);
std::vector<ParamTensor> layer_tensors(const ModelConfig& config, const LayerSpec& layer);
std::vector<ParamTensor> head_tensors(const ModelConfig& config);

// Building blocks of the kinds' tensor lists (the registered kinds' and a test's):
// a tensor with its shape, role and init (weight decay for normal weights only);
ParamTensor make_param_tensor(std::string name, TensorRole role, std::vector<int64_t> shape, ParamInit init,
                              TpSplitOf tp = {});
// a norm's weight and (LayerNorm only) bias, replicated and sequence-parallel;
void add_norm_tensors(std::vector<ParamTensor>& out, const ModelConfig& config, const std::string& prefix,
                      TensorRole weight, TensorRole bias);
// a linear layer's weight [ROWS, COLS] and (WITH_BIAS: use-bias unless given) bias [ROWS]: a
// column-parallel layer's bias splits with its rows, a row-parallel layer's is replicated.
void add_linear_tensors(std::vector<ParamTensor>& out, const ModelConfig& config, const std::string& prefix,
                        TensorRole weight, TensorRole bias, int64_t rows, int64_t cols, ParamInit init,
                        const TpSplitOf& tp, std::optional<bool> with_bias = {});

}  // namespace meg
