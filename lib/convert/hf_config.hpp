// config.json and generation_config.json of Hugging Face checkpoints, to and from meg's ModelConfig.
//
// Export writes what transformers' save_pretrained writes for GPT2LMHeadModel, LlamaForCausalLM,
// Qwen2ForCausalLM and Qwen3ForCausalLM (keys sorted, two-space indent), with the real vocabulary
// (not meg's padded one). Import reads the same keys and MistralForCausalLM's, with transformers'
// defaults for the optional ones, and refuses what meg's model cannot compute exactly: another
// model_type, another activation, RoPE scaling other than linear and llama3, GPT-2's
// attention-scaling variants, biases on only some Llama linears, a Qwen's sliding window on
// some of its layers only.
//
//   meg                 GPT-2 (model_type gpt2)         Llama (llama; qwen2, qwen3, mistral alike)
//   num-layers          n_layer                         num_hidden_layers
//   hidden-size         n_embd                          hidden_size
//   num-heads           n_head                          num_attention_heads
//   num-kv-heads        (= n_head)                      num_key_value_heads (default: heads)
//   kv-channels         (n_embd / n_head)               head_dim (default hidden / heads; Qwen2 none)
//   ffn-hidden-size     n_inner (null: 4 * n_embd)      intermediate_size
//   seq-length          n_positions (and n_ctx)         max_position_embeddings (default 2048;
//                                                       Qwen 32768, Mistral 131072)
//   vocab-size          vocab_size                      vocab_size
//   norm-eps            layer_norm_epsilon (1e-5)       rms_norm_eps (1e-6)
//   position-embedding  (learned_absolute)              (rope)
//   rope-theta          -                               rope_theta (10000)
//   use-rope-scaling,   -                               rope_scaling {"rope_type": "llama3",
//     rope-scaling-*                                      "factor", "low_freq_factor",
//                                                         "high_freq_factor",
//                                                         "original_max_position_embeddings"}
//   rotary-seq-len-     -                               rope_scaling {"rope_type": "linear",
//     interpolation-factor                                "factor"}
//   tie-embeddings      tie_word_embeddings (true)      tie_word_embeddings (false)
//   use-bias            (always)                        Llama: attention_bias and mlp_bias (false);
//                                                       Qwen3: attention_bias (must be false)
//   add-qkv-bias        -                               (Qwen2: always; others none)
//   qk-layernorm        -                               (Qwen3: always; others none)
//   activation          activation_function gelu_new    hidden_act silu
//   init-std            initializer_range (0.02)        initializer_range (0.02)
//   hidden-dropout      resid_pdrop, embd_pdrop (0.1)   -
//   attention-dropout   attn_pdrop (0.1)                attention_dropout (0)
//   window-size (L, 0)  -                               sliding_window W = L + 1 (Mistral; Qwen
//                                                       with use_sliding_window on all layers:
//                                                       max_window_layers 0); null, or W at
//                                                       least max_position_embeddings: none
// make-vocab-size-divisible-by and padded-vocab-size are meg's own (HfImportOptions).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.hpp"
#include "model/config.hpp"

namespace meg {

// The Hugging Face architectures meg converts, each transformers' class of one model_type.
enum class HfModelType { gpt2, llama, qwen2, qwen3, mistral };
struct HfArchitecture {
  HfModelType type;
  const char* name;        // transformers' class, config.json's architectures[0]
  const char* model_type;  // config.json's model_type
  ModelFamily family;      // the meg family whose defaults its configs start from
  bool bos_is_eos;         // texts begin with the end-of-text token (OpenAI's GPT-2 config)
};

// The architecture CONFIG converts to, by its features: the gpt2 family's is GPT2LMHeadModel; a
// llama-family model with qk-layernorm is Qwen3ForCausalLM, one with add-qkv-bias (and no
// use-bias) Qwen2ForCausalLM (both with use_sliding_window for a window-size), one with a
// window-size MistralForCausalLM (Llama's layout with a sliding window), any other
// LlamaForCausalLM (a Mistral without a window is a Llama). InputError naming a family that has
// none.
const HfArchitecture& hf_architecture(const ModelConfig& config);

// Special token ids, written to both files when known (from the tokenizer).
struct HfTokenIds {
  std::optional<int64_t> bos, eos;
};

// InputError naming the first property of CONFIG that its architecture's class lacks (a GPT-2
// without biases or with RMSNorm or RoPE, a Llama with GELU or learned positions, ...).
void check_hf_exportable(const ModelConfig& config);

// "float32", "bfloat16" or "float16": torch's name of DTYPE (F32, BF16, F16).
std::string torch_dtype_name(SafetensorsDtype dtype);

// config.json for CONFIG (checked by check_hf_exportable) stored in DTYPE.
nlohmann::json hf_config_json(const ModelConfig& config, SafetensorsDtype dtype, const HfTokenIds& ids);

// generation_config.json, as transformers derives it from the model config.
nlohmann::json hf_generation_config_json(const HfTokenIds& ids);

// The ModelConfig of config.json J (WHERE, the file's name, prefixes errors: one line naming the
// field), its vocabulary padded to a multiple of DIVISIBLE_BY * TP. Validated.
ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& where,
                                 int64_t make_vocab_size_divisible_by = 128, int64_t tp = 1);

// The text of a JSON file as transformers writes it: sorted keys, indent 2, a final newline.
std::string hf_json_text(const nlohmann::json& j);

}  // namespace meg
