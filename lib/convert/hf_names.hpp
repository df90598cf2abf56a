// The tensors of a Hugging Face checkpoint and where each one lives in meg's parameters: one table
// per architecture (hf_config.hpp's lookup) saying, for each meg tensor role, the Hugging Face name
// and how it is cut or transposed.
//
// transformers' GPT2LMHeadModel (model_type "gpt2") and LlamaForCausalLM ("llama"; Qwen2, Qwen3 and
// Mistral have its names) against meg's table (model/param_table.hpp), for block i:
//
//   GPT-2                                      meg
//   transformer.wte.weight        [V, C]       embedding.word_embeddings.weight   rows [0, V)
//   transformer.wpe.weight        [T, C]       embedding.position_embeddings.weight
//   transformer.h.i.ln_1.{weight,bias}         decoder.layers.i.input_layernorm.*
//   transformer.h.i.attn.c_attn.weight [C, 3C] ...self_attention.linear_qkv.weight    transposed
//   transformer.h.i.attn.c_attn.bias           ...self_attention.linear_qkv.bias
//   transformer.h.i.attn.c_proj.weight [C, C]  ...self_attention.linear_proj.weight   transposed
//   transformer.h.i.ln_2.{weight,bias}         ...pre_mlp_layernorm.*
//   transformer.h.i.mlp.c_fc.weight   [C, F]   ...mlp.linear_fc1.weight              transposed
//   transformer.h.i.mlp.c_proj.weight [F, C]   ...mlp.linear_fc2.weight              transposed
//   (and the biases of c_proj, c_fc, mlp.c_proj as they are)
//   transformer.ln_f.{weight,bias}             decoder.final_layernorm.*
//   lm_head.weight                [V, C]       output_layer.weight rows [0, V)  (untied only)
//
//   Llama
//   model.embed_tokens.weight     [V, C]       embedding.word_embeddings.weight   rows [0, V)
//   model.layers.i.input_layernorm.weight      decoder.layers.i.input_layernorm.weight
//   model.layers.i.self_attn.q_proj.weight     ...linear_qkv.weight rows [0, NH*HS)
//   model.layers.i.self_attn.k_proj.weight     ...linear_qkv.weight rows [NH*HS, NH*HS + NKV*HS)
//   model.layers.i.self_attn.v_proj.weight     ...linear_qkv.weight the last NKV*HS rows
//   model.layers.i.self_attn.o_proj.weight     ...linear_proj.weight
//   model.layers.i.post_attention_layernorm.weight  ...pre_mlp_layernorm.weight
//   model.layers.i.mlp.gate_proj.weight        ...linear_fc1.weight rows [0, F)
//   model.layers.i.mlp.up_proj.weight          ...linear_fc1.weight rows [F, 2F)
//   model.layers.i.mlp.down_proj.weight        ...linear_fc2.weight
//   (with use-bias, the q/k/v/o and gate/up/down biases alike: attention_bias and mlp_bias;
//   with add-qkv-bias, Qwen2's, the q/k/v biases: ...linear_qkv.bias cut as the weight)
//   model.layers.i.self_attn.q_norm.weight     ...self_attention.q_layernorm.weight (Qwen3)
//   model.layers.i.self_attn.k_norm.weight     ...self_attention.k_layernorm.weight (Qwen3)
//   model.norm.weight                          decoder.final_layernorm.weight
//   lm_head.weight                [V, C]       output_layer.weight rows [0, V)  (untied only)
//
// GPT-2's linear layers are Conv1D modules, whose weights are stored [in, out]: the transpose of
// meg's (and torch.nn.Linear's) [out, in]. The vocabulary rows beyond the real vocabulary V
// (meg's padding to Vp) are not stored; they are zero when read back. A tied output layer is not
// stored (transformers drops lm_head.weight, which shares the embedding's storage).
//
// Rotary embeddings need no permutation: meg's RoPE pairs element i of a head with i + HS/2 (the
// "rotate_half" layout, ops/cpu/rope.cpp), as transformers' Llama does, so q_proj and k_proj rows
// are meg's rows in order. (Meta's original checkpoints interleave the pairs; transformers'
// conversion script permutes those, and we read transformers' files, not Meta's.)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/config.hpp"

namespace meg {

// One tensor of a Hugging Face checkpoint and the part of a meg tensor it holds: the meg tensor's
// rows [row_begin, row_begin + rows), transposed or not. A vector (bias, norm) has rows of one
// element.
struct HfTensorMap {
  std::string hf_name;
  std::vector<uint64_t> hf_shape;
  std::string meg_name;
  std::vector<int64_t> meg_shape;  // the whole meg tensor's (padded vocabulary)
  int64_t row_begin = 0, rows = 0;
  bool transpose = false;

  int64_t meg_cols() const { return meg_shape.size() > 1 ? meg_shape[1] : 1; }
  uint64_t numel() const { return static_cast<uint64_t>(rows * meg_cols()); }
};

// The tensors transformers' model for CONFIG (valid, and accepted by check_hf_exportable) holds,
// in the order of its state_dict, which is the order save_pretrained fills shards in. The GPT-2
// names carry the "transformer." prefix that save_pretrained writes.
std::vector<HfTensorMap> hf_tensor_map(const ModelConfig& config);

// Tensors a Hugging Face checkpoint of CONFIG may hold that meg does not read: buffers old versions
// of transformers saved with the weights (GPT-2's causal masks, Llama's rotary frequencies) and a
// tied output layer's copy.
std::vector<std::string> hf_ignored_tensors(const ModelConfig& config);

// A prefix of the tensor names that some uploads of CONFIG's architecture omit (GPT-2's
// "transformer.", which OpenAI's files lack), or "".
std::string hf_optional_prefix(const ModelConfig& config);

// The Hugging Face tensor MAP describes, cut from MEG, the whole meg tensor (row-major), into OUT
// (resized; reused by the caller from tensor to tensor).
void hf_from_meg(const HfTensorMap& map, std::span<const float> meg, std::vector<float>& out);

// Writes the Hugging Face tensor HF (MAP's, row-major in its stored shape) into its rows of MEG,
// the whole meg tensor.
void meg_from_hf(const HfTensorMap& map, std::span<const float> hf, std::span<float> meg);

}  // namespace meg
