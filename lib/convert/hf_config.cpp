#include "convert/hf_config.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/json_file.hpp"

namespace meg {

namespace {

using json = nlohmann::json;

// Reads optional and required fields of one config.json, each error naming the file and key; a
// null field counts as absent, as transformers writes "n_inner": null for the default.
class Fields {
 public:
  Fields(const json& j, const std::string& where) : j_(j), where_(where) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t integer(const char* key) const {
    if (!has(key)) input_error("{}: key '{}' is missing", where_, key);
    return json_get<int64_t>(j_, key, where_);
  }
  int64_t integer(const char* key, int64_t fallback) const { return json_get<int64_t>(j_, key, where_, fallback); }
  double number(const char* key, double fallback) const { return json_get<double>(j_, key, where_, fallback); }
  bool boolean(const char* key, bool fallback) const { return json_get<bool>(j_, key, where_, fallback); }
  std::string string(const char* key, const std::string& fallback) const {
    return json_get<std::string>(j_, key, where_, fallback);
  }

  // InputError unless key KEY (absent: FALLBACK) is EXPECTED; WHY says what meg lacks.
  template <typename T>
  void require(const char* key, const T& value, const T& expected, const char* why) const {
    if (value != expected) input_error("{}: key '{}': {} is not supported ({})", where_, key, json(value).dump(), why);
  }

  [[noreturn]] void refuse(const char* key, const char* why) const {
    input_error("{}: key '{}': {} is not supported ({})", where_, key, j_.at(key).dump(), why);
  }

 private:
  const json& j_;
  const std::string& where_;
};

const HfArchitecture kArchitectures[] = {
    {HfModelType::gpt2, "GPT2LMHeadModel", "gpt2", ModelFamily::gpt2, true},
    {HfModelType::llama, "LlamaForCausalLM", "llama", ModelFamily::llama, false},
    {HfModelType::qwen2, "Qwen2ForCausalLM", "qwen2", ModelFamily::llama, false},
    {HfModelType::qwen3, "Qwen3ForCausalLM", "qwen3", ModelFamily::llama, false},
    {HfModelType::mistral, "MistralForCausalLM", "mistral", ModelFamily::llama, false},
};

const HfArchitecture& architecture_of_type(HfModelType type) {
  for (const auto& a : kArchitectures)
    if (a.type == type) return a;
  throw std::logic_error("hf_architecture: unknown Hugging Face architecture");
}

// The architecture a config.json describes: model_type, else the first architecture.
const HfArchitecture& hf_architecture_of(const json& j, const std::string& where) {
  const Fields f(j, where);
  if (f.has("model_type")) {
    const std::string type = f.string("model_type", "");
    for (const auto& a : kArchitectures)
      if (type == a.model_type) return a;
    input_error("{}: key 'model_type': unknown architecture \"{}\" (meg reads gpt2, llama, qwen2, qwen3 and "
                "mistral)",
                where, type);
  }
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    const std::string arch = j["architectures"][0].get<std::string>();
    for (const auto& a : kArchitectures)
      if (arch == a.name) return a;
    input_error("{}: key 'architectures': unknown architecture \"{}\" (meg reads GPT2LMHeadModel, "
                "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and MistralForCausalLM)",
                where, arch);
  }
  input_error("{}: key 'model_type' is missing (and no architectures say what the model is)", where);
}

ModelConfig gpt2_from_hf(const json& j, const std::string& where) {
  const Fields f(j, where);
  ModelConfig c = ModelConfig::defaults(ModelFamily::gpt2);
  c.num_layers = f.integer("n_layer");
  c.hidden_size = f.integer("n_embd");
  c.num_heads = f.integer("n_head");
  c.num_kv_heads = c.num_heads;
  c.ffn_hidden_size = f.integer("n_inner", 4 * c.hidden_size);
  c.seq_length = f.integer("n_positions");
  c.vocab_size = f.integer("vocab_size");
  c.norm_eps = f.number("layer_norm_epsilon", 1e-5);
  c.tie_embeddings = f.boolean("tie_word_embeddings", true);
  c.init_std = f.number("initializer_range", 0.02);
  c.hidden_dropout = f.number("resid_pdrop", 0.1);
  c.attention_dropout = f.number("attn_pdrop", 0.1);
  const std::string act = f.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    f.refuse("activation_function", "meg's GPT-2 uses the tanh GELU: gelu_new or gelu_pytorch_tanh");
  f.require("scale_attn_weights", f.boolean("scale_attn_weights", true), true,
            "meg scales attention scores by 1/sqrt(head size)");
  f.require("scale_attn_by_inverse_layer_idx", f.boolean("scale_attn_by_inverse_layer_idx", false), false,
            "meg does not scale attention by layer");
  f.require("add_cross_attention", f.boolean("add_cross_attention", false), false, "meg's GPT-2 is decoder-only");
  return c;
}

// rope_scaling (null: none), or transformers 5's rope_parameters, which holds rope_theta too and
// takes the place of both keys: the rope_type (or its old name "type") "default", "linear" and
// "llama3" with their keys (all required, as transformers' validation has them); others are
// refused, "dynamic" too (its frequencies change with each forward's length). rope_parameters
// of one set per layer type must hold the same set for every type.
void rope_scaling_from_hf(const json& j, const std::string& where, ModelConfig& c) {
  const Fields f(j, where);
  const char* key = f.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (!f.has(key)) return;
  const json* params = &j.at(key);
  if (!params->is_object()) f.refuse(key, "expected an object or null");
  if (!params->empty() && std::all_of(params->begin(), params->end(), [](const json& v) { return v.is_object(); })) {
    for (const json& per_type : *params)
      if (per_type != params->begin().value()) f.refuse(key, "meg's layers share one RoPE: the layer types' differ");
    params = &params->begin().value();
  }
  const json& rs = *params;
  const std::string at = fmt::format("{}: key '{}'", where, key);
  const Fields r(rs, at);
  if (r.has("rope_theta")) c.rope_theta = r.number("rope_theta", 0);
  const std::string type = r.has("rope_type") ? r.string("rope_type", "") : r.string("type", "default");
  const auto number = [&](const char* name) {
    if (!r.has(name)) input_error("{}: rope_type \"{}\" needs key '{}'", at, type, name);
    return r.number(name, 0);
  };
  r.require("partial_rotary_factor", r.number("partial_rotary_factor", 1.0), 1.0, "meg rotates whole heads");
  if (type == "default") return;
  if (type == "linear") {
    c.rotary_seq_len_interpolation_factor = number("factor");
  } else if (type == "llama3") {
    c.use_rope_scaling = true;
    c.rope_scaling_factor = number("factor");
    c.rope_scaling_low_freq_factor = number("low_freq_factor");
    c.rope_scaling_high_freq_factor = number("high_freq_factor");
    if (!r.has("original_max_position_embeddings"))
      input_error("{}: rope_type \"llama3\" needs key 'original_max_position_embeddings'", at);
    c.rope_scaling_original_max_position_embeddings = r.integer("original_max_position_embeddings");
  } else if (type == "dynamic") {
    f.refuse(key, "rope_type \"dynamic\" rescales the frequencies by each forward's sequence length, which meg "
                  "does not model");
  } else {
    f.refuse(key, "meg models rope_type default, linear and llama3");
  }
}

// transformers' sliding_window W: a query at i sees the keys j with i - W < j <= i
// (masking_utils' sliding_window_overlay, kv_idx > q_idx - W, under the causal mask), W keys
// with its own; Megatron's --window-size (L, 0) sees i - L <= j <= i, L + 1 keys. So L = W - 1,
// and export writes W = L + 1.
int64_t window_size_from_hf(int64_t sliding_window) { return sliding_window - 1; }
int64_t hf_sliding_window(const ModelConfig& c) { return c.window_size + 1; }

// The window of every layer from sliding_window (null: none). A window covering every position
// masks nothing: full attention (a Mistral of the positions' window reads as a Llama).
void set_window(const Fields& f, std::optional<int64_t> window, ModelConfig& c) {
  if (!window || *window >= c.seq_length) return;
  if (*window < 1) f.refuse("sliding_window", "a query sees at least its own key: it must be at least 1");
  c.window_size = window_size_from_hf(*window);
}

// A Qwen's use_sliding_window: the window applies to the layers that layer_types names
// "sliding_attention", by default those from max_window_layers on; meg's layers share one
// window, so all layers or none must have it.
void qwen_window_from_hf(const json& j, const Fields& f, ModelConfig& c) {
  if (!f.boolean("use_sliding_window", false)) return;
  const int64_t windowed_from = f.integer("max_window_layers", 28);
  int64_t windowed = std::max<int64_t>(0, c.num_layers - windowed_from);
  const char* key = "max_window_layers";
  if (f.has("layer_types")) {
    key = "layer_types";
    const json& types = j.at("layer_types");
    if (!types.is_array()) f.refuse(key, "expected a list of layer types");
    windowed = std::count(types.begin(), types.end(), json("sliding_attention"));
  }
  if (windowed == 0) return;
  if (windowed != c.num_layers)
    f.refuse(key, "meg's attention layers share one window: all of them or none must use the sliding window");
  set_window(f, f.has("sliding_window") ? std::optional<int64_t>(f.integer("sliding_window")) : std::nullopt, c);
}

// LlamaForCausalLM and the architectures of its layout (Qwen2, Qwen3, Mistral): their keys, with
// transformers' defaults of each configuration class.
ModelConfig llama_from_hf(const json& j, const std::string& where, HfModelType type) {
  const Fields f(j, where);
  ModelConfig c = ModelConfig::defaults(ModelFamily::llama);
  c.num_layers = f.integer("num_hidden_layers");
  c.hidden_size = f.integer("hidden_size");
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer("num_key_value_heads", c.num_heads);
  c.ffn_hidden_size = f.integer("intermediate_size");
  const int64_t default_positions =
      type == HfModelType::llama ? 2048 : type == HfModelType::mistral ? 4096 * 32 : 32768;
  c.seq_length = f.integer("max_position_embeddings", default_positions);
  c.vocab_size = f.integer("vocab_size");
  c.norm_eps = f.number("rms_norm_eps", 1e-6);
  c.rope_theta = f.number("rope_theta", 10000.0);
  c.tie_embeddings = f.boolean("tie_word_embeddings", false);
  c.init_std = f.number("initializer_range", 0.02);
  c.hidden_dropout = 0.0;
  c.attention_dropout = f.number("attention_dropout", 0.0);
  f.require("hidden_act", f.string("hidden_act", "silu"), std::string("silu"), "meg's Llama uses SwiGLU");
  f.require("partial_rotary_factor", f.number("partial_rotary_factor", 1.0), 1.0, "meg rotates whole heads");
  rope_scaling_from_hf(j, where, c);
  switch (type) {
    case HfModelType::llama: {
      const bool attention_bias = f.boolean("attention_bias", false);
      f.require("mlp_bias", f.boolean("mlp_bias", false), attention_bias,
                "meg's use-bias covers the attention and the MLP alike: attention_bias and mlp_bias must agree");
      c.use_bias = attention_bias;
      break;
    }
    case HfModelType::qwen2:
      c.use_bias = false;
      c.add_qkv_bias = true;  // q_proj, k_proj and v_proj always have biases
      break;
    case HfModelType::qwen3:
      f.require("attention_bias", f.boolean("attention_bias", false), false,
                "biases on q/k/v and o_proj but not the MLP are not in meg's model");
      c.use_bias = false;
      c.qk_layernorm = true;
      break;
    case HfModelType::mistral: c.use_bias = false; break;
    default: throw std::logic_error("llama_from_hf: not a Llama-like architecture");
  }
  // Qwen2's attention has no head_dim: its heads are hidden_size / num_attention_heads.
  if (f.has("head_dim") && c.num_heads > 0) {
    const int64_t head_dim = f.integer("head_dim");
    if (type == HfModelType::qwen2)
      f.require("head_dim", head_dim, c.hidden_size / c.num_heads,
                "Qwen2's head size is hidden_size / num_attention_heads");
    // kv-channels stays null where it is the default, so that the config round-trips.
    if (c.hidden_size % c.num_heads != 0 || head_dim != c.hidden_size / c.num_heads) c.kv_channels = head_dim;
  }
  if (type == HfModelType::mistral) {
    // MistralConfig's default window is 4096 when the key is absent.
    const std::optional<int64_t> window =
        !j.contains("sliding_window") ? std::optional<int64_t>(4096)
        : j.at("sliding_window").is_null() ? std::nullopt
                                           : std::optional<int64_t>(f.integer("sliding_window"));
    set_window(f, window, c);
  }
  if (type == HfModelType::qwen2 || type == HfModelType::qwen3) qwen_window_from_hf(j, f, c);
  return c;
}

// config.json's rope_scaling for CONFIG's scaling (null without).
json hf_rope_scaling(const ModelConfig& c) {
  const RopeScaling s = c.rope_scaling();
  switch (s.type) {
    case RopeScalingType::none: return nullptr;
    case RopeScalingType::linear: return {{"rope_type", "linear"}, {"factor", s.factor}};
    case RopeScalingType::llama3:
      return {{"rope_type", "llama3"},
              {"factor", s.factor},
              {"low_freq_factor", s.low_freq_factor},
              {"high_freq_factor", s.high_freq_factor},
              {"original_max_position_embeddings", s.original_max_position_embeddings}};
  }
  throw std::logic_error("hf_rope_scaling: unknown RoPE scaling");
}

}  // namespace

const HfArchitecture& hf_architecture(const ModelConfig& config) {
  switch (config.family) {
    case ModelFamily::gpt2: return architecture_of_type(HfModelType::gpt2);
    case ModelFamily::llama:
      if (config.qk_layernorm) return architecture_of_type(HfModelType::qwen3);
      if (config.add_qkv_bias && !config.use_bias) return architecture_of_type(HfModelType::qwen2);
      return architecture_of_type(config.windowed() ? HfModelType::mistral : HfModelType::llama);
  }
  input_error("model config: model family number {} has no Hugging Face architecture",
              static_cast<int>(config.family));
}

void check_hf_exportable(const ModelConfig& c) {
  const HfArchitecture& arch = hf_architecture(c);
  auto refuse = [&](const std::string& what) {
    input_error("model config: a {} model with {} has no Hugging Face equivalent ({})", to_string(c.family), what,
                arch.name);
  };
  switch (arch.type) {
    case HfModelType::gpt2:
      if (c.norm != NormKind::layernorm) refuse("norm " + to_string(c.norm));
      if (c.activation != Activation::gelu_tanh) refuse("activation " + to_string(c.activation));
      if (c.position_embedding != PositionEmbedding::learned_absolute)
        refuse("position-embedding-type " + to_string(c.position_embedding));
      if (!c.use_bias) refuse("use-bias false");
      if (c.add_qkv_bias) refuse("add-qkv-bias");
      if (c.qk_layernorm) refuse("qk-layernorm");
      if (c.windowed()) refuse("window-size");
      if (c.kv_channels > 0 && c.kv_channels * c.num_heads != c.hidden_size)
        refuse(fmt::format("kv-channels {}", c.kv_channels));
      return;
    case HfModelType::llama:
    case HfModelType::qwen2:
    case HfModelType::qwen3:
    case HfModelType::mistral:
      if (c.norm != NormKind::rmsnorm) refuse("norm " + to_string(c.norm));
      if (c.activation != Activation::swiglu) refuse("activation " + to_string(c.activation));
      if (c.position_embedding != PositionEmbedding::rope)
        refuse("position-embedding-type " + to_string(c.position_embedding));
      if (arch.type == HfModelType::qwen3 && (c.use_bias || c.add_qkv_bias))
        refuse("qk-layernorm and biases (Qwen3's attention_bias has no MLP biases; meg's q/k/v-only bias is Qwen2's)");
      if (arch.type == HfModelType::mistral && c.use_bias) refuse("window-size and use-bias (Mistral has no biases)");
      if (arch.type == HfModelType::qwen2 && c.head_size() * c.num_heads != c.hidden_size)
        refuse(fmt::format("add-qkv-bias and kv-channels {} (Qwen2's head size is hidden_size / num_attention_heads)",
                           c.kv_channels));
      return;
  }
  throw std::logic_error("check_hf_exportable: unknown Hugging Face architecture");
}

std::string torch_dtype_name(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kF32: return "float32";
    case SafetensorsDtype::kBF16: return "bfloat16";
    case SafetensorsDtype::kF16: return "float16";
    default: throw std::invalid_argument("torch_dtype_name: " + std::string(dtype_name(dtype)) + " is not F32, BF16 or F16");
  }
}

json hf_config_json(const ModelConfig& c, SafetensorsDtype dtype, const HfTokenIds& ids) {
  check_hf_exportable(c);
  const HfArchitecture& arch = hf_architecture(c);
  json j;
  j["architectures"] = {arch.name};
  j["model_type"] = arch.model_type;
  switch (arch.type) {
    case HfModelType::gpt2:
      j["activation_function"] = "gelu_new";
      j["n_layer"] = c.num_layers;
      j["n_embd"] = c.hidden_size;
      j["n_head"] = c.num_heads;
      j["n_inner"] = c.ffn_hidden_size == 4 * c.hidden_size ? json(nullptr) : json(c.ffn_hidden_size);
      j["n_positions"] = c.seq_length;
      j["n_ctx"] = c.seq_length;
      j["layer_norm_epsilon"] = c.norm_eps;
      j["resid_pdrop"] = c.hidden_dropout;
      j["embd_pdrop"] = c.hidden_dropout;
      j["attn_pdrop"] = c.attention_dropout;
      j["scale_attn_weights"] = true;
      j["scale_attn_by_inverse_layer_idx"] = false;
      j["reorder_and_upcast_attn"] = false;
      break;
    case HfModelType::llama:
    case HfModelType::qwen2:
    case HfModelType::qwen3:
    case HfModelType::mistral:
      j["hidden_act"] = "silu";
      j["num_hidden_layers"] = c.num_layers;
      j["hidden_size"] = c.hidden_size;
      j["num_attention_heads"] = c.num_heads;
      j["num_key_value_heads"] = c.num_kv_heads;
      if (arch.type != HfModelType::qwen2) j["head_dim"] = c.head_size();
      j["intermediate_size"] = c.ffn_hidden_size;
      j["max_position_embeddings"] = c.seq_length;
      j["rms_norm_eps"] = c.norm_eps;
      j["rope_theta"] = c.rope_theta;
      j["rope_scaling"] = hf_rope_scaling(c);
      j["attention_dropout"] = c.attention_dropout;
      if (arch.type == HfModelType::llama) {
        j["attention_bias"] = c.use_bias;
        j["mlp_bias"] = c.use_bias;
        j["pretraining_tp"] = 1;
      } else if (arch.type == HfModelType::mistral) {
        j["sliding_window"] = hf_sliding_window(c);
      } else {
        // The window on every layer: from layer max_window_layers = 0 on.
        if (arch.type == HfModelType::qwen3) j["attention_bias"] = false;
        j["use_sliding_window"] = c.windowed();
        j["sliding_window"] = c.windowed() ? json(hf_sliding_window(c)) : json(nullptr);
        j["max_window_layers"] = c.windowed() ? 0 : c.num_layers;
      }
      break;
    default: throw std::logic_error("hf_config_json: unknown Hugging Face architecture");
  }
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["initializer_range"] = c.init_std;
  j["use_cache"] = true;
  j["torch_dtype"] = torch_dtype_name(dtype);
  // Unknown ids are null, not left out: a class's defaults (GPT2Config's 50256) would name tokens
  // the vocabulary may not have.
  j["bos_token_id"] = ids.bos ? json(*ids.bos) : json(nullptr);
  j["eos_token_id"] = ids.eos ? json(*ids.eos) : json(nullptr);
  return j;
}

json hf_generation_config_json(const HfTokenIds& ids) {
  json j;
  j["_from_model_config"] = true;
  if (ids.bos) j["bos_token_id"] = *ids.bos;
  if (ids.eos) j["eos_token_id"] = *ids.eos;
  return j;
}

ModelConfig model_config_from_hf(const json& j, const std::string& where, int64_t make_vocab_size_divisible_by,
                                 int64_t tp) {
  if (!j.is_object()) input_error("{}: expected a JSON object, got {}", where, j.type_name());
  const HfArchitecture& arch = hf_architecture_of(j, where);
  ModelConfig c;
  switch (arch.type) {
    case HfModelType::gpt2: c = gpt2_from_hf(j, where); break;
    case HfModelType::llama:
    case HfModelType::qwen2:
    case HfModelType::qwen3:
    case HfModelType::mistral: c = llama_from_hf(j, where, arch.type); break;
    default: throw std::logic_error("model_config_from_hf: unknown Hugging Face architecture");
  }
  c.make_vocab_size_divisible_by = make_vocab_size_divisible_by;
  c.pad_vocab(tp);
  c.validate(where);
  return c;
}

std::string hf_json_text(const json& j) { return j.dump(2) + "\n"; }

}  // namespace meg
