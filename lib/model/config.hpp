// The shape and features of a decoder-only language model, as Megatron's TransformerConfig has
// them: each feature (positions, norm, activation, biases, tied embeddings, the layer pattern) is a
// field of its own, and "gpt2" and "llama" are presets over those fields, not code paths.
//
// A configuration comes from a preset (ModelConfig::preset), a JSON file (load_model_config), or
// both, then single-field overrides from the command line (apply_overrides), then validate().
// to_json()/from_json() round-trip every field, so a checkpoint stores the exact configuration.
//
// JSON keys are the long option names without dashes (unknown keys are an error, to catch typos):
//
//   preset                        name of a preset to start from (files only; never written)
//   family                        "gpt2" | "llama": the family whose defaults (below) the config
//                                 starts from, and the Hugging Face architecture it converts to;
//                                 no feature is read from it
//   num-layers                    blocks L (a GPT block is an attention and an MLP layer)
//   hybrid-layer-pattern          the layer sequence, one symbol a layer (model/layer_spec.hpp):
//                                 "*" attention, "-" MLP (completing the attention before it);
//                                 "E" MoE (completing it too, with num-experts); default "*-"
//                                 repeated num-layers times, "*E" for moe-layer-freq's blocks
//                                 ("M" Mamba is refused until it is implemented)
//   hidden-size                   model width C
//   num-heads                     query heads NH
//   kv-channels                   head size HS (Megatron's name); null (default) = C / NH. The
//                                 q/k/v projections have NH*HS and NKV*HS rows, the output
//                                 projection NH*HS columns (Qwen3, Mistral-Nemo: HS != C / NH)
//   num-kv-heads                  key/value heads NKV (grouped-query attention); default NH
//   ffn-hidden-size               MLP width; default 4 * C (also after a new hidden-size, for
//                                 GELU configs whose ffn was 4 * C)
//   seq-length                    training sequence length T; with learned_absolute positions
//                                 also the number of learned positions (rows of wpe)
//   vocab-size                    the tokenizer's vocabulary V (0 = not yet known)
//   make-vocab-size-divisible-by  Megatron's padding unit, default 128
//   padded-vocab-size             rows of the embedding Vp (default: V padded for TP 1)
//   norm-eps                      LayerNorm / RMSNorm epsilon
//   position-embedding-type       "learned_absolute" | "rope" | "none" (Megatron's names)
//   rope-theta                    RoPE base (position-embedding-type rope)
//   use-rope-scaling              Llama 3.1's frequency scaling (Megatron's --use-rope-scaling,
//                                 transformers' rope_type "llama3"; ops/rope_frequencies.hpp), with
//   rope-scaling-factor           its factor (8, Megatron's --rope-scaling-factor),
//   rope-scaling-low-freq-factor, rope-scaling-high-freq-factor   (1 and 4) and
//   rope-scaling-original-max-position-embeddings                 (8192), as Megatron fixes them
//   rotary-seq-len-interpolation-factor   linear scaling: positions divided by it (1 = none;
//                                 transformers' rope_type "linear"); not with use-rope-scaling
//   tie-embeddings                output layer shares the token embedding
//   use-bias                      linear layers have biases
//   add-qkv-bias                  the q/k/v projection has a bias even without use-bias (Qwen2)
//   qk-layernorm                  per-head RMSNorm of q and k (weights [HS], eps norm-eps) after
//                                 the projection, before RoPE (Qwen3's q_norm and k_norm); needs
//                                 norm rmsnorm
//   activation                    "gelu_tanh" | "swiglu" (a gated MLP: fc1 is [gate; up])
//   norm                          "layernorm" | "rmsnorm"
//   init-std                      standard deviation of the normal weight initialisation
//   hidden-dropout, attention-dropout
//   window-size                   sliding-window attention, Megatron's --window-size (L, R): query
//                                 i attends to the keys j with i - L <= j <= i, L + 1 of them
//                                 (Megatron's mask, and flash-attn's and Transformer Engine's
//                                 window_size with a causal mask). R is 0 (the attention is
//                                 causal). null (default; also [-1, 0], Megatron's infinite
//                                 window) is full causal attention. Written as [L, 0] or null;
//                                 files without the key load as full attention. Every attention
//                                 layer has the window (Megatron's --window-attn-skip-freq, full
//                                 attention every Nth layer, is not implemented).
//
// Family defaults. gpt2: gelu_tanh, layernorm, biases, tied embeddings, learned_absolute
// positions; its validation keeps NKV = NH (GPT2LMHeadModel has no grouped-query attention).
// llama: swiglu, rmsnorm, no biases, untied output layer, rope (theta 500000 as in Llama 3),
// grouped-query attention allowed. Both: norm-eps 1e-5, init-std 0.02, no dropout. A file's
// "family" that differs from its preset's resets those features to the family's defaults before
// the file's own keys apply; files written before a feature had its key (no
// position-embedding-type, no hybrid-layer-pattern) so load to the same model as before.
//
// Presets (ModelConfig::preset_names()):
//   gpt2-124m, gpt2-355m, gpt2-774m, gpt2-1.5b   OpenAI GPT-2 shapes, seq 1024, vocab 50257
//   llama-1b    Llama 3.2 1B: 16 x 2048, 32 heads, 8 KV heads, ffn 8192, vocab 128256, theta
//               500000. Embeddings are TIED, as in the released model (1,235,814,400 parameters).
//               Seq length 2048 by default (the released model has 131072 positions; RoPE has no
//               learned positions, so this is only the training length; raise it with
//               --seq-length). Llama 3.2's "llama3" RoPE frequency scaling is on: factor 32,
//               low/high frequency factors 1 and 4, original positions 8192.
//   llama-8b    Llama 3 8B: 32 x 4096, 32 heads, 8 KV heads, ffn 14336, vocab 128256, theta
//               500000, untied. Seq length 2048 by default (the released model uses 8192).
//   tiny        demo and tests: GPT-2 family, 2 x 64, 4 heads, ffn 256, seq 64
//   tiny-llama  demo and tests: Llama family, 2 x 64, 4 heads, 2 KV heads, ffn 176, seq 64
//               (176 ~ Llama's 2/3 * 4C = 171 rounded up to a multiple of 16, so it splits
//               evenly under tensor parallelism up to 16)
//   tiny-moe    demo and tests: tiny-llama with both blocks MoE: 4 experts of ffn 64, top-2,
//               aux_loss 1e-2, z-loss 1e-3
//   mixtral-8x7b   Mixtral 8x7B: 32 x 4096, 32 heads, 8 KV heads, 8 experts of 14336, top-2,
//               vocab 32000, theta 1e6, RMSNorm eps 1e-5, untied; seq 4096 (the model has 32768)
//   qwen3-30b-a3b  Qwen3-30B-A3B: 48 x 2048, 32 heads of 128 (kv-channels), 4 KV heads,
//               qk-layernorm, 128 experts of 768, top-8, vocab 151936, theta 1e6, eps 1e-6,
//               untied; seq 4096 (the model has 40960); softmax after the top-k
//               renormalises, as its norm_topk_prob
// The tiny presets leave vocab-size 0: it comes from the tokenizer (set_vocab_from_tokenizer) or
// --vocab-size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/layer_spec.hpp"
#include "moe/moe_config.hpp"
#include "ops/rope_frequencies.hpp"

namespace meg {

enum class ModelFamily { gpt2, llama };
enum class Activation { gelu_tanh, swiglu };
enum class NormKind { layernorm, rmsnorm };
enum class PositionEmbedding { learned_absolute, rope, none };

std::string to_string(ModelFamily f);
std::string to_string(Activation a);
std::string to_string(NormKind n);
std::string to_string(PositionEmbedding p);
// Parse a name; WHERE prefixes the InputError, which lists the valid names.
ModelFamily parse_model_family(const std::string& name, const std::string& where);
Activation parse_activation(const std::string& name, const std::string& where);
NormKind parse_norm(const std::string& name, const std::string& where);
PositionEmbedding parse_position_embedding(const std::string& name, const std::string& where);

// window-size's L from Megatron's --window-size text TEXT ("L,R", "(L,R)" or "L"): -1 for
// Megatron's infinite window (L = -1); an InputError prefixed with WHERE for anything else than
// an L >= -1 and R = 0.
int64_t parse_window_size(const std::string& text, const std::string& where);

// Megatron's rule: VOCAB rounded up to a multiple of DIVISIBLE_BY * TP.
int64_t pad_vocab_size(int64_t vocab, int64_t divisible_by = 128, int64_t tp = 1);

struct ModelConfig {
  ModelFamily family = ModelFamily::gpt2;  // the preset family; no feature depends on it
  int64_t num_layers = 0;
  // The layer sequence when it is not the default "*-" x num_layers (which is stored as ""), so
  // that a new num-layers keeps the default pattern.
  std::string hybrid_layer_pattern;
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t kv_channels = 0;  // 0: hidden_size / num_heads
  int64_t ffn_hidden_size = 0;
  int64_t seq_length = 0;
  int64_t vocab_size = 0;
  int64_t make_vocab_size_divisible_by = 128;
  int64_t padded_vocab_size = 0;
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  bool use_rope_scaling = false;
  double rope_scaling_factor = 8.0;
  double rope_scaling_low_freq_factor = 1.0;
  double rope_scaling_high_freq_factor = 4.0;
  int64_t rope_scaling_original_max_position_embeddings = 8192;
  double rotary_seq_len_interpolation_factor = 1.0;
  bool tie_embeddings = true;
  bool use_bias = true;
  bool add_qkv_bias = false;
  bool qk_layernorm = false;
  Activation activation = Activation::gelu_tanh;
  NormKind norm = NormKind::layernorm;
  PositionEmbedding position_embedding = PositionEmbedding::learned_absolute;
  double init_std = 0.02;
  double hidden_dropout = 0.0;
  double attention_dropout = 0.0;
  int64_t window_size = -1;  // window-size's L; -1: none (full causal attention)
  MoeConfig moe;  // the MoE layers' settings (moe/moe_config.hpp); num_experts 0: dense

  // The family's defaults (its features) with all sizes zero.
  static ModelConfig defaults(ModelFamily family);
  // A named preset (see the table above); InputError listing the names for an unknown one.
  static ModelConfig preset(const std::string& name);
  static const std::vector<std::string>& preset_names();

  int64_t head_size() const {
    if (kv_channels > 0) return kv_channels;
    return num_heads > 0 ? hidden_size / num_heads : 0;
  }
  // Whether the q/k/v projection has a bias (use-bias or add-qkv-bias).
  bool qkv_has_bias() const { return use_bias || add_qkv_bias; }
  // RoPE's frequency scaling (use-rope-scaling, rotary-seq-len-interpolation-factor) and the
  // HS / 2 inverse frequencies of its heads (ops/rope_frequencies.hpp): the one source of the
  // rotation angles for the CPU and the GPU.
  RopeScaling rope_scaling() const;
  std::vector<double> rope_inv_freq() const;
  bool windowed() const { return window_size >= 0; }
  // The attention window as the attention ops take it: L, or -1 for full causal attention.
  int attention_window() const { return static_cast<int>(window_size); }
  bool learned_positions() const { return position_embedding == PositionEmbedding::learned_absolute; }
  bool uses_rope() const { return position_embedding == PositionEmbedding::rope; }
  // The layer sequence: hybrid_layer_pattern, or "*-" x num_layers with "*E" for the blocks
  // moe-layer-freq makes MoE (when num-experts > 0); and its layers
  // (parse_layer_pattern: InputError for a pattern the models do not implement).
  std::string layer_pattern() const;
  std::vector<LayerSpec> layers() const;

  // Sets padded_vocab_size from vocab_size for tensor-parallel size TP (Megatron's rule).
  void pad_vocab(int64_t tp = 1);
  // Takes the tokenizer's vocabulary: fills vocab_size when unset (0); an InputError when the
  // configured vocabulary is smaller than the tokenizer's (its ids would fall outside the
  // embedding). A larger configured vocabulary is kept. Re-pads for TP 1 when vocab_size changes.
  void set_vocab_from_tokenizer(int64_t tokenizer_vocab);

  // InputError (prefixed with WHERE, e.g. a file name or "model config") naming the first problem.
  void validate(const std::string& where = "model config") const;

  // Exact parameter count of the model as built (padded vocabulary; a tied embedding once): the
  // size of its parameter table (model/param_table.hpp).
  int64_t num_parameters() const;
  // The parameters one token uses: all but the experts it is not routed to (an MoE layer's k of
  // its E experts); num_parameters() for a dense model.
  int64_t active_parameters() const;
  // Training FLOPs per token at sequence length T: 6 N + 12 A C T (N from active_parameters(), A the
  // attention layers).
  int64_t flops_per_token(int64_t seq_length) const;

  nlohmann::ordered_json to_json() const;
  // Reads the keys documented above; WHERE prefixes errors. Missing keys keep the values of the
  // preset named by "preset", else of the family's defaults. Does not validate.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& where = "model config");

  bool operator==(const ModelConfig&) const = default;
};

// Reads a JSON model configuration file (from_json; the file name prefixes errors).
ModelConfig load_model_config(const std::string& path);

// Single-field overrides from the command line (--num-layers, --hidden-size, --num-heads,
// --num-kv-heads, --ffn-hidden-size, --seq-length, --vocab-size, --init-std, --window-size);
// unset fields leave the config. --max-position-embeddings (Megatron-LM's) sets no field: it is
// checked against the result (see apply_overrides).
struct ModelOverrides {
  std::optional<int64_t> num_layers;
  std::optional<int64_t> hidden_size;
  std::optional<int64_t> num_heads;
  std::optional<int64_t> num_kv_heads;
  std::optional<int64_t> ffn_hidden_size;
  std::optional<int64_t> seq_length;
  std::optional<int64_t> vocab_size;
  std::optional<double> init_std;
  // Megatron's --window-size text: "L,R" (or "(L,R)", or "L" for "L,0"); parse_window_size.
  std::optional<std::string> window_size;
  std::optional<int64_t> max_position_embeddings;
  // The MoE options given (moe/moe_options.hpp), by their JSON keys: {"num-experts": 8, ...}.
  nlohmann::ordered_json moe = nlohmann::ordered_json::object();

  // The overrides by their option names, null where unset: {"num-layers": 4, "hidden-size": null, ...},
  // and the MoE options given.
  nlohmann::ordered_json to_json() const;
};

// Applies the overrides. Derived sizes follow their base when the user did not set them too:
// with --num-heads and no --num-kv-heads, a config without grouped-query attention (NKV == NH)
// keeps NKV == NH; with --hidden-size and no --ffn-hidden-size, a GELU config (GPT-2) whose ffn is
// 4 * C keeps ffn = 4 * C (a SwiGLU width is never derived: give --ffn-hidden-size). --vocab-size
// re-pads the vocabulary (TP 1). Does not validate, but for --max-position-embeddings: an
// InputError when it is below the sequence length (as Megatron asserts), or, with learned
// positions, differs from it (their rows are the training length here, where Megatron may have
// more rows than it trains on).
void apply_overrides(ModelConfig& config, const ModelOverrides& overrides);

// The whole resolution meg-pretrain does: PRESET (may be empty) and then CONFIG_FILE (may be
// empty; its keys win over the preset's), then the overrides, then validate(). At least one of
// PRESET and CONFIG_FILE must be given.
ModelConfig resolve_model_config(const std::string& preset, const std::string& config_file,
                                 const ModelOverrides& overrides);
// The same from BASE, a whole model config object (a checkpoint record's "model"), named WHERE in
// messages.
ModelConfig resolve_model_config_json(const nlohmann::json& base, const std::string& where,
                                      const ModelOverrides& overrides);

}  // namespace meg
