#include "convert/hf_config.hpp"

#include <stdexcept>

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
};

// The architecture a config.json describes: model_type, else the first architecture.
const HfArchitecture& hf_architecture_of(const json& j, const std::string& where) {
  const Fields f(j, where);
  if (f.has("model_type")) {
    const std::string type = f.string("model_type", "");
    for (const auto& a : kArchitectures)
      if (type == a.model_type) return a;
    input_error("{}: key 'model_type': unknown architecture \"{}\" (meg reads gpt2 and llama)", where, type);
  }
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    const std::string arch = j["architectures"][0].get<std::string>();
    for (const auto& a : kArchitectures)
      if (arch == a.name) return a;
    input_error("{}: key 'architectures': unknown architecture \"{}\" (meg reads GPT2LMHeadModel and "
                "LlamaForCausalLM)",
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

ModelConfig llama_from_hf(const json& j, const std::string& where) {
  const Fields f(j, where);
  ModelConfig c = ModelConfig::defaults(ModelFamily::llama);
  c.num_layers = f.integer("num_hidden_layers");
  c.hidden_size = f.integer("hidden_size");
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer("num_key_value_heads", c.num_heads);
  c.ffn_hidden_size = f.integer("intermediate_size");
  c.seq_length = f.integer("max_position_embeddings", 2048);
  c.vocab_size = f.integer("vocab_size");
  c.norm_eps = f.number("rms_norm_eps", 1e-6);
  c.rope_theta = f.number("rope_theta", 10000.0);
  c.tie_embeddings = f.boolean("tie_word_embeddings", false);
  c.init_std = f.number("initializer_range", 0.02);
  c.hidden_dropout = 0.0;
  c.attention_dropout = f.number("attention_dropout", 0.0);
  const bool attention_bias = f.boolean("attention_bias", false);
  f.require("mlp_bias", f.boolean("mlp_bias", false), attention_bias,
            "meg's use-bias covers the attention and the MLP alike: attention_bias and mlp_bias must agree");
  c.use_bias = attention_bias;
  f.require("hidden_act", f.string("hidden_act", "silu"), std::string("silu"), "meg's Llama uses SwiGLU");
  if (f.has("rope_scaling")) f.refuse("rope_scaling", "meg's RoPE has no frequency scaling");
  if (f.has("head_dim") && c.num_heads > 0)
    f.require("head_dim", f.integer("head_dim"), c.hidden_size / c.num_heads,
              "meg's head size is hidden_size / num_attention_heads");
  return c;
}

}  // namespace

const HfArchitecture& hf_architecture(const ModelConfig& config) {
  for (const auto& a : kArchitectures)
    if (a.family == config.family) return a;
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
      return;
    case HfModelType::llama:
      if (c.norm != NormKind::rmsnorm) refuse("norm " + to_string(c.norm));
      if (c.activation != Activation::swiglu) refuse("activation " + to_string(c.activation));
      if (c.position_embedding != PositionEmbedding::rope)
        refuse("position-embedding-type " + to_string(c.position_embedding));
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
      j["hidden_act"] = "silu";
      j["num_hidden_layers"] = c.num_layers;
      j["hidden_size"] = c.hidden_size;
      j["num_attention_heads"] = c.num_heads;
      j["num_key_value_heads"] = c.num_kv_heads;
      j["head_dim"] = c.head_size();
      j["intermediate_size"] = c.ffn_hidden_size;
      j["max_position_embeddings"] = c.seq_length;
      j["rms_norm_eps"] = c.norm_eps;
      j["rope_theta"] = c.rope_theta;
      j["rope_scaling"] = nullptr;
      j["attention_bias"] = c.use_bias;
      j["mlp_bias"] = c.use_bias;
      j["attention_dropout"] = c.attention_dropout;
      j["pretraining_tp"] = 1;
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
    case HfModelType::llama: c = llama_from_hf(j, where); break;
    default: throw std::logic_error("model_config_from_hf: unknown Hugging Face architecture");
  }
  c.make_vocab_size_divisible_by = make_vocab_size_divisible_by;
  c.pad_vocab(tp);
  c.validate(where);
  return c;
}

std::string hf_json_text(const json& j) { return j.dump(2) + "\n"; }

}  // namespace meg
