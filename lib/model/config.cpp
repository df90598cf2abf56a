#include "model/config.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "model/param_table.hpp"

namespace meg {

namespace {

const std::vector<std::string> kFamilies = {"gpt2", "llama"};
const std::vector<std::string> kActivations = {"gelu_tanh", "swiglu"};
const std::vector<std::string> kNorms = {"layernorm", "rmsnorm"};
const std::vector<std::string> kPositionEmbeddings = {"learned_absolute", "rope", "none"};

template <typename E>
E parse_enum(const std::vector<std::string>& names, const std::string& name, const char* what,
             const std::string& where) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<E>(i);
  input_error("{}: unknown {} '{}' (valid: {})", where, what, name, fmt::join(names, ", "));
}

ModelConfig gpt2_preset(int64_t layers, int64_t hidden, int64_t heads) {
  ModelConfig c = ModelConfig::defaults(ModelFamily::gpt2);
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_heads = heads;
  c.num_kv_heads = heads;
  c.ffn_hidden_size = 4 * hidden;
  c.seq_length = 1024;
  c.vocab_size = 50257;
  c.pad_vocab();
  return c;
}

ModelConfig llama_preset(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads,
                         int64_t ffn, int64_t vocab, bool tied) {
  ModelConfig c = ModelConfig::defaults(ModelFamily::llama);
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.ffn_hidden_size = ffn;
  c.seq_length = 2048;
  c.vocab_size = vocab;
  c.rope_theta = 500000.0;
  c.norm_eps = 1e-5;
  c.tie_embeddings = tied;
  c.pad_vocab();
  return c;
}

// The JSON keys, in the order to_json() writes them.
const std::vector<std::string> kKeys = {
    "family",          "num-layers",      "hybrid-layer-pattern",
    "hidden-size",     "num-heads",       "num-kv-heads",    "kv-channels",
    "ffn-hidden-size", "seq-length",      "vocab-size",
    "make-vocab-size-divisible-by",       "padded-vocab-size",
    "norm-eps",        "position-embedding-type",            "rope-theta",
    "use-rope-scaling", "rope-scaling-factor", "rope-scaling-low-freq-factor",
    "rope-scaling-high-freq-factor", "rope-scaling-original-max-position-embeddings",
    "rotary-seq-len-interpolation-factor",
    "tie-embeddings",  "use-bias",        "add-qkv-bias",    "qk-layernorm",    "activation",
    "norm",            "init-std",        "hidden-dropout",
    "attention-dropout", "window-size"};

// window-size's (L, R) checked: R 0, L at least -1 (Megatron's infinite window, kept as -1).
int64_t checked_window(int64_t left, int64_t right, const std::string& where) {
  if (right != 0)
    input_error("{}: window-size ({}, {}): the right extent must be 0 (meg's attention is causal)", where, left,
                right);
  if (left < -1 || left > std::numeric_limits<int32_t>::max())
    input_error("{}: window-size ({}, 0): the left extent must be at least 0 (or -1, no window)", where, left);
  return left;
}

}  // namespace

std::string to_string(ModelFamily f) { return kFamilies.at(static_cast<size_t>(f)); }
std::string to_string(Activation a) { return kActivations.at(static_cast<size_t>(a)); }
std::string to_string(NormKind n) { return kNorms.at(static_cast<size_t>(n)); }
std::string to_string(PositionEmbedding p) { return kPositionEmbeddings.at(static_cast<size_t>(p)); }

ModelFamily parse_model_family(const std::string& name, const std::string& where) {
  return parse_enum<ModelFamily>(kFamilies, name, "model family", where);
}
Activation parse_activation(const std::string& name, const std::string& where) {
  return parse_enum<Activation>(kActivations, name, "activation", where);
}
NormKind parse_norm(const std::string& name, const std::string& where) {
  return parse_enum<NormKind>(kNorms, name, "norm", where);
}
PositionEmbedding parse_position_embedding(const std::string& name, const std::string& where) {
  return parse_enum<PositionEmbedding>(kPositionEmbeddings, name, "position-embedding-type", where);
}

int64_t parse_window_size(const std::string& text, const std::string& where) {
  std::string inner = text;
  if (inner.size() >= 2 && inner.front() == '(' && inner.back() == ')') inner = inner.substr(1, inner.size() - 2);
  const size_t comma = inner.find(',');
  auto number = [&](const std::string& part) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || part.find_first_not_of(' ', used) != std::string::npos)
      input_error("{} '{}': expected L,R (Megatron's window: query i sees keys i - L .. i + R; R = 0), or L", where,
                  text);
    return v;
  };
  const int64_t left = number(inner.substr(0, comma));
  const int64_t right = comma == std::string::npos ? 0 : number(inner.substr(comma + 1));
  return checked_window(left, right, where);
}

int64_t pad_vocab_size(int64_t vocab, int64_t divisible_by, int64_t tp) {
  if (divisible_by <= 0 || tp <= 0)
    input_error("vocabulary padding: make-vocab-size-divisible-by ({}) and the tensor-parallel "
                "size ({}) must be positive",
                divisible_by, tp);
  const int64_t multiple = divisible_by * tp;
  if (vocab <= 0) return 0;
  return (vocab + multiple - 1) / multiple * multiple;
}

ModelConfig ModelConfig::defaults(ModelFamily family) {
  ModelConfig c;
  c.family = family;
  switch (family) {
    case ModelFamily::gpt2:
      c.tie_embeddings = true;
      c.use_bias = true;
      c.activation = Activation::gelu_tanh;
      c.norm = NormKind::layernorm;
      c.position_embedding = PositionEmbedding::learned_absolute;
      break;
    case ModelFamily::llama:
      c.tie_embeddings = false;
      c.use_bias = false;
      c.activation = Activation::swiglu;
      c.norm = NormKind::rmsnorm;
      c.position_embedding = PositionEmbedding::rope;
      break;
    default: throw std::logic_error("ModelConfig::defaults: unknown model family");
  }
  c.rope_theta = 500000.0;
  c.norm_eps = 1e-5;
  c.init_std = 0.02;
  return c;
}

const std::vector<std::string>& ModelConfig::preset_names() {
  static const std::vector<std::string> names = {"gpt2-124m",  "gpt2-355m",    "gpt2-774m",    "gpt2-1.5b",
                                                 "llama-1b",   "llama-8b",     "mixtral-8x7b", "qwen3-30b-a3b",
                                                 "tiny",       "tiny-llama",   "tiny-moe"};
  return names;
}

ModelConfig ModelConfig::preset(const std::string& name) {
  if (name == "gpt2-124m") return gpt2_preset(12, 768, 12);
  if (name == "gpt2-355m") return gpt2_preset(24, 1024, 16);
  if (name == "gpt2-774m") return gpt2_preset(36, 1280, 20);
  if (name == "gpt2-1.5b") return gpt2_preset(48, 1600, 25);
  // Llama 3.2 1B ties its output layer to the token embedding; Llama 3 8B does not.
  if (name == "llama-1b") {
    ModelConfig c = llama_preset(16, 2048, 32, 8, 8192, 128256, true);
    c.use_rope_scaling = true;
    c.rope_scaling_factor = 32.0;
    return c;
  }
  if (name == "llama-8b") return llama_preset(32, 4096, 32, 8, 14336, 128256, false);
  if (name == "tiny") {
    ModelConfig c = gpt2_preset(2, 64, 4);
    c.seq_length = 64;
    c.vocab_size = 0;  // from the tokenizer
    c.padded_vocab_size = 0;
    return c;
  }
  if (name == "tiny-llama" || name == "tiny-moe") {
    ModelConfig c = llama_preset(2, 64, 4, 2, 176, 0, false);
    c.seq_length = 64;
    if (name == "tiny-moe") {
      c.moe.num_experts = 4;
      c.moe.ffn_hidden_size = 64;
      c.moe.router_topk = 2;
      c.moe.aux_loss_coeff = 1e-2;
      c.moe.z_loss_coeff = 1e-3;
    }
    return c;
  }
  if (name == "mixtral-8x7b") {
    ModelConfig c = llama_preset(32, 4096, 32, 8, 14336, 32000, false);
    c.seq_length = 4096;
    c.rope_theta = 1e6;
    c.moe.num_experts = 8;
    c.moe.router_topk = 2;
    return c;
  }
  if (name == "qwen3-30b-a3b") {
    ModelConfig c = llama_preset(48, 2048, 32, 4, 6144, 151936, false);
    c.kv_channels = 128;
    c.qk_layernorm = true;
    c.seq_length = 4096;
    c.rope_theta = 1e6;
    c.norm_eps = 1e-6;
    c.moe.num_experts = 128;
    c.moe.ffn_hidden_size = 768;
    c.moe.router_topk = 8;
    return c;
  }
  input_error("unknown model preset '{}' (valid: {})", name, fmt::join(preset_names(), ", "));
}

void ModelConfig::pad_vocab(int64_t tp) {
  padded_vocab_size = pad_vocab_size(vocab_size, make_vocab_size_divisible_by, tp);
}

void ModelConfig::set_vocab_from_tokenizer(int64_t tokenizer_vocab) {
  if (tokenizer_vocab <= 0)
    input_error("model config: the tokenizer's vocabulary size {} is not positive", tokenizer_vocab);
  if (vocab_size == 0) {
    vocab_size = tokenizer_vocab;
    pad_vocab();
  } else if (vocab_size < tokenizer_vocab) {
    input_error("model config: vocab-size {} is smaller than the tokenizer's vocabulary of {} tokens",
                vocab_size, tokenizer_vocab);
  }
}

void ModelConfig::validate(const std::string& where) const {
  constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();
  const std::pair<const char*, int64_t> sizes[] = {
      {"num-layers", num_layers},       {"hidden-size", hidden_size},
      {"num-heads", num_heads},         {"num-kv-heads", num_kv_heads},
      {"ffn-hidden-size", ffn_hidden_size}, {"seq-length", seq_length},
      {"make-vocab-size-divisible-by", make_vocab_size_divisible_by}};
  for (const auto& [name, value] : sizes) {
    if (value <= 0) input_error("{}: {} must be positive, got {}", where, name, value);
    if (value > kMaxSize) input_error("{}: {} {} is too large (at most {})", where, name, value, kMaxSize);
  }
  // The layers' table is built below, before any weights are read: a bound far past the deepest
  // models (a few hundred layers) keeps a corrupt count from taking gigabytes first.
  constexpr int64_t kMaxLayers = 1 << 16;
  if (num_layers > kMaxLayers)
    input_error("{}: num-layers {} is too large (at most {})", where, num_layers, kMaxLayers);
  moe.validate(where);
  const std::vector<LayerSpec> layer_specs = parse_layer_pattern(layer_pattern(), where);
  const int64_t blocks = count_blocks(layer_specs);
  for (const LayerSpec& l : layer_specs)
    if (l.kind == LayerKind::moe && !moe.enabled())
      input_error("{}: hybrid-layer-pattern \"{}\" has MoE layers 'E', but num-experts is 0", where,
                  hybrid_layer_pattern);
  if (blocks != num_layers)
    input_error("{}: hybrid-layer-pattern \"{}\" has {} blocks, but num-layers is {}", where, hybrid_layer_pattern,
                blocks, num_layers);
  if (vocab_size == 0)
    input_error("{}: vocab-size is not set (give --vocab-size, or a tokenizer)", where);
  if (vocab_size < 0) input_error("{}: vocab-size must be positive, got {}", where, vocab_size);
  if (padded_vocab_size > kMaxSize)
    input_error("{}: padded-vocab-size {} is too large (at most {})", where, padded_vocab_size, kMaxSize);
  if (padded_vocab_size < vocab_size || padded_vocab_size % make_vocab_size_divisible_by != 0)
    input_error("{}: padded-vocab-size {} must be a multiple of make-vocab-size-divisible-by {} "
                "no smaller than vocab-size {}",
                where, padded_vocab_size, make_vocab_size_divisible_by, vocab_size);
  if (kv_channels < 0 || kv_channels > kMaxSize)
    input_error("{}: kv-channels must be positive (or null for hidden-size / num-heads), got {}", where,
                kv_channels);
  if (kv_channels == 0 && hidden_size % num_heads != 0)
    input_error("{}: hidden-size {} is not divisible by num-heads {} (give kv-channels for the head size)", where,
                hidden_size, num_heads);
  if (num_heads % num_kv_heads != 0)
    input_error("{}: num-heads {} is not divisible by num-kv-heads {}", where, num_heads,
                num_kv_heads);
  // The gpt2 preset family converts to GPT2LMHeadModel, which has no grouped-query attention.
  if (family == ModelFamily::gpt2 && num_kv_heads != num_heads)
    input_error("{}: the gpt2 family has no grouped-query attention: num-kv-heads {} must equal "
                "num-heads {}",
                where, num_kv_heads, num_heads);
  if (uses_rope()) {
    if (head_size() % 2 != 0)
      input_error("{}: head size {} (kv-channels, or hidden-size / num-heads) must be even for RoPE", where,
                  head_size());
    if (!(rope_theta > 0) || !std::isfinite(rope_theta))
      input_error("{}: rope-theta must be positive, got {}", where, rope_theta);
  }
  if (use_rope_scaling) {
    if (!uses_rope()) input_error("{}: use-rope-scaling needs position-embedding-type rope", where);
    if (rotary_seq_len_interpolation_factor != 1.0)
      input_error("{}: use-rope-scaling and rotary-seq-len-interpolation-factor {} exclude each other", where,
                  rotary_seq_len_interpolation_factor);
    if (!(rope_scaling_factor >= 1) || !std::isfinite(rope_scaling_factor))
      input_error("{}: rope-scaling-factor must be at least 1, got {}", where, rope_scaling_factor);
    if (!(rope_scaling_low_freq_factor > 0) || !(rope_scaling_high_freq_factor > rope_scaling_low_freq_factor) ||
        !std::isfinite(rope_scaling_high_freq_factor))
      input_error("{}: rope-scaling-high-freq-factor {} must be above rope-scaling-low-freq-factor {} > 0", where,
                  rope_scaling_high_freq_factor, rope_scaling_low_freq_factor);
    if (rope_scaling_original_max_position_embeddings <= 0)
      input_error("{}: rope-scaling-original-max-position-embeddings must be positive, got {}", where,
                  rope_scaling_original_max_position_embeddings);
  }
  if (!(rotary_seq_len_interpolation_factor >= 1) || !std::isfinite(rotary_seq_len_interpolation_factor))
    input_error("{}: rotary-seq-len-interpolation-factor must be at least 1, got {}", where,
                rotary_seq_len_interpolation_factor);
  if (rotary_seq_len_interpolation_factor != 1.0 && !uses_rope())
    input_error("{}: rotary-seq-len-interpolation-factor needs position-embedding-type rope", where);
  if (qk_layernorm && norm != NormKind::rmsnorm)
    input_error("{}: qk-layernorm is an RMSNorm of each head: it needs norm rmsnorm, not {}", where, to_string(norm));
  if (window_size < -1) input_error("{}: window-size {} must be at least 0 (or -1, no window)", where, window_size);
  if (!(norm_eps > 0) || !std::isfinite(norm_eps))
    input_error("{}: norm-eps must be positive, got {}", where, norm_eps);
  if (!(init_std > 0) || !std::isfinite(init_std))
    input_error("{}: init-std must be positive, got {}", where, init_std);
  if (!(hidden_dropout >= 0 && hidden_dropout < 1))
    input_error("{}: hidden-dropout must be in [0, 1), got {}", where, hidden_dropout);
  if (!(attention_dropout >= 0 && attention_dropout < 1))
    input_error("{}: attention-dropout must be in [0, 1), got {}", where, attention_dropout);
}

RopeScaling ModelConfig::rope_scaling() const {
  RopeScaling s;
  if (use_rope_scaling) {
    s.type = RopeScalingType::llama3;
    s.factor = rope_scaling_factor;
    s.low_freq_factor = rope_scaling_low_freq_factor;
    s.high_freq_factor = rope_scaling_high_freq_factor;
    s.original_max_position_embeddings = rope_scaling_original_max_position_embeddings;
  } else if (rotary_seq_len_interpolation_factor != 1.0) {
    s.type = RopeScalingType::linear;
    s.factor = rotary_seq_len_interpolation_factor;
  }
  return s;
}

std::vector<double> ModelConfig::rope_inv_freq() const {
  return meg::rope_inv_freq(static_cast<int>(head_size()), rope_theta, rope_scaling());
}

std::string ModelConfig::layer_pattern() const {
  if (!hybrid_layer_pattern.empty()) return hybrid_layer_pattern;
  if (!moe.enabled()) return default_layer_pattern(num_layers);
  std::string pattern;
  for (const bool is_moe : parse_layer_freq(moe.layer_freq, num_layers, "model config")) pattern += is_moe ? "*E" : "*-";
  return pattern;
}

std::vector<LayerSpec> ModelConfig::layers() const { return parse_layer_pattern(layer_pattern(), "model config"); }

int64_t ModelConfig::num_parameters() const { return static_cast<int64_t>(table_size(gpt_parameter_table(*this))); }

int64_t ModelConfig::active_parameters() const {
  int64_t idle = 0;  // the parameters of the experts a token does not use
  for (const ParamTensor& t : gpt_parameter_table(*this))
    if (t.expert >= 0) idle += int64_t(t.numel) * (moe.num_experts - moe.router_topk) / moe.num_experts;
  return num_parameters() - idle;
}

int64_t ModelConfig::flops_per_token(int64_t T) const {
  int64_t attention_layers = 0;
  for (const LayerSpec& l : layers()) attention_layers += l.kind == LayerKind::attention;
  return 6 * active_parameters() + 12 * attention_layers * num_heads * head_size() * T;
}

nlohmann::ordered_json ModelConfig::to_json() const {
  nlohmann::ordered_json j;
  j["family"] = to_string(family);
  j["num-layers"] = num_layers;
  j["hybrid-layer-pattern"] = layer_pattern();
  j["hidden-size"] = hidden_size;
  j["num-heads"] = num_heads;
  j["num-kv-heads"] = num_kv_heads;
  j["kv-channels"] = kv_channels > 0 ? nlohmann::ordered_json(kv_channels) : nlohmann::ordered_json(nullptr);
  j["ffn-hidden-size"] = ffn_hidden_size;
  j["seq-length"] = seq_length;
  j["vocab-size"] = vocab_size;
  j["make-vocab-size-divisible-by"] = make_vocab_size_divisible_by;
  j["padded-vocab-size"] = padded_vocab_size;
  j["norm-eps"] = norm_eps;
  j["position-embedding-type"] = to_string(position_embedding);
  j["rope-theta"] = rope_theta;
  j["use-rope-scaling"] = use_rope_scaling;
  j["rope-scaling-factor"] = rope_scaling_factor;
  j["rope-scaling-low-freq-factor"] = rope_scaling_low_freq_factor;
  j["rope-scaling-high-freq-factor"] = rope_scaling_high_freq_factor;
  j["rope-scaling-original-max-position-embeddings"] = rope_scaling_original_max_position_embeddings;
  j["rotary-seq-len-interpolation-factor"] = rotary_seq_len_interpolation_factor;
  j["tie-embeddings"] = tie_embeddings;
  j["use-bias"] = use_bias;
  j["add-qkv-bias"] = add_qkv_bias;
  j["qk-layernorm"] = qk_layernorm;
  j["activation"] = to_string(activation);
  j["norm"] = to_string(norm);
  j["init-std"] = init_std;
  j["hidden-dropout"] = hidden_dropout;
  j["attention-dropout"] = attention_dropout;
  j["window-size"] = windowed() ? nlohmann::ordered_json::array({window_size, 0}) : nlohmann::ordered_json(nullptr);
  if (moe.enabled()) moe.write_json(j);
  return j;
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) input_error("{}: expected a JSON object, got {}", where, j.type_name());
  for (const auto& [key, value] : j.items()) {
    if (key == "preset") continue;
    bool known = false;
    for (const auto& k : kKeys) known = known || k == key;
    for (const auto& k : MoeConfig::json_keys()) known = known || k == key;
    if (!known)
      input_error("{}: unknown key '{}' (valid: preset, {}, {})", where, key, fmt::join(kKeys, ", "),
                  fmt::join(MoeConfig::json_keys(), ", "));
  }

  ModelConfig c = j.contains("preset") ? preset(json_get<std::string>(j, "preset", where))
                                       : defaults(ModelFamily::gpt2);
  const ModelConfig base = c;
  if (j.contains("family")) {
    const ModelFamily f = parse_model_family(json_get<std::string>(j, "family", where), where);
    if (f != c.family) {
      const ModelConfig d = defaults(f);
      c.family = f;
      c.tie_embeddings = d.tie_embeddings;
      c.use_bias = d.use_bias;
      c.activation = d.activation;
      c.norm = d.norm;
      c.position_embedding = d.position_embedding;
    }
  }
  auto has = [&](const char* key) { return j.contains(key); };
  if (has("num-layers")) c.num_layers = json_get<int64_t>(j, "num-layers", where);
  if (has("hidden-size")) c.hidden_size = json_get<int64_t>(j, "hidden-size", where);
  if (has("num-heads")) c.num_heads = json_get<int64_t>(j, "num-heads", where);
  if (has("num-kv-heads")) c.num_kv_heads = json_get<int64_t>(j, "num-kv-heads", where);
  if (has("kv-channels"))
    c.kv_channels = j.at("kv-channels").is_null() ? 0 : json_get<int64_t>(j, "kv-channels", where);
  if (has("ffn-hidden-size")) c.ffn_hidden_size = json_get<int64_t>(j, "ffn-hidden-size", where);
  if (has("seq-length")) c.seq_length = json_get<int64_t>(j, "seq-length", where);
  if (has("vocab-size")) c.vocab_size = json_get<int64_t>(j, "vocab-size", where);
  if (has("make-vocab-size-divisible-by"))
    c.make_vocab_size_divisible_by = json_get<int64_t>(j, "make-vocab-size-divisible-by", where);
  if (has("padded-vocab-size")) c.padded_vocab_size = json_get<int64_t>(j, "padded-vocab-size", where);
  if (has("norm-eps")) c.norm_eps = json_get<double>(j, "norm-eps", where);
  if (has("position-embedding-type"))
    c.position_embedding = parse_position_embedding(json_get<std::string>(j, "position-embedding-type", where), where);
  if (has("rope-theta")) c.rope_theta = json_get<double>(j, "rope-theta", where);
  if (has("use-rope-scaling")) c.use_rope_scaling = json_get<bool>(j, "use-rope-scaling", where);
  if (has("rope-scaling-factor")) c.rope_scaling_factor = json_get<double>(j, "rope-scaling-factor", where);
  if (has("rope-scaling-low-freq-factor"))
    c.rope_scaling_low_freq_factor = json_get<double>(j, "rope-scaling-low-freq-factor", where);
  if (has("rope-scaling-high-freq-factor"))
    c.rope_scaling_high_freq_factor = json_get<double>(j, "rope-scaling-high-freq-factor", where);
  if (has("rope-scaling-original-max-position-embeddings"))
    c.rope_scaling_original_max_position_embeddings =
        json_get<int64_t>(j, "rope-scaling-original-max-position-embeddings", where);
  if (has("rotary-seq-len-interpolation-factor"))
    c.rotary_seq_len_interpolation_factor = json_get<double>(j, "rotary-seq-len-interpolation-factor", where);
  if (has("tie-embeddings")) c.tie_embeddings = json_get<bool>(j, "tie-embeddings", where);
  if (has("use-bias")) c.use_bias = json_get<bool>(j, "use-bias", where);
  if (has("add-qkv-bias")) c.add_qkv_bias = json_get<bool>(j, "add-qkv-bias", where);
  if (has("qk-layernorm")) c.qk_layernorm = json_get<bool>(j, "qk-layernorm", where);
  if (has("activation")) c.activation = parse_activation(json_get<std::string>(j, "activation", where), where);
  if (has("norm")) c.norm = parse_norm(json_get<std::string>(j, "norm", where), where);
  if (has("init-std")) c.init_std = json_get<double>(j, "init-std", where);
  if (has("hidden-dropout")) c.hidden_dropout = json_get<double>(j, "hidden-dropout", where);
  if (has("attention-dropout")) c.attention_dropout = json_get<double>(j, "attention-dropout", where);
  if (has("window-size") && !j.at("window-size").is_null()) {
    const auto& w = j.at("window-size");
    if (!w.is_array() || w.size() != 2 || !w[0].is_number_integer() || !w[1].is_number_integer())
      input_error("{}: key 'window-size': expected [L, 0] or null, got {}", where, w.dump());
    c.window_size = checked_window(w[0].get<int64_t>(), w[1].get<int64_t>(), where);
  }
  c.moe.read_json(j, where);

  // The pattern, checked here to name the file; it gives num-layers when that is not given, and
  // the default pattern is stored as "" so that it follows a later num-layers.
  if (has("hybrid-layer-pattern")) {
    const std::string pattern = json_get<std::string>(j, "hybrid-layer-pattern", where);
    const int64_t blocks = count_blocks(parse_layer_pattern(pattern, where));
    if (!has("num-layers")) c.num_layers = blocks;
    c.hybrid_layer_pattern = "";
    if (pattern != c.layer_pattern()) c.hybrid_layer_pattern = pattern;
  }
  // Derived sizes follow their base unless given (see apply_overrides).
  if (!has("num-kv-heads") && (base.num_kv_heads == 0 || base.num_kv_heads == base.num_heads))
    c.num_kv_heads = c.num_heads;
  if (!has("ffn-hidden-size") &&
      (base.ffn_hidden_size == 0 ||
       (base.ffn_hidden_size == 4 * base.hidden_size && c.activation != Activation::swiglu)))
    c.ffn_hidden_size = 4 * c.hidden_size;
  if (!has("padded-vocab-size") && c.make_vocab_size_divisible_by > 0) c.pad_vocab();
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  return ModelConfig::from_json(read_json_file(path), path);
}

void apply_overrides(ModelConfig& c, const ModelOverrides& o) {
  const ModelConfig base = c;
  if (o.num_layers) c.num_layers = *o.num_layers;
  if (o.hidden_size) c.hidden_size = *o.hidden_size;
  if (o.num_heads) c.num_heads = *o.num_heads;
  if (o.num_kv_heads) c.num_kv_heads = *o.num_kv_heads;
  if (o.ffn_hidden_size) c.ffn_hidden_size = *o.ffn_hidden_size;
  if (o.seq_length) c.seq_length = *o.seq_length;
  if (o.vocab_size) c.vocab_size = *o.vocab_size;
  if (o.init_std) c.init_std = *o.init_std;
  if (o.window_size) c.window_size = parse_window_size(*o.window_size, "--window-size");
  c.moe.read_json(o.moe, "command line");

  if (o.num_heads && !o.num_kv_heads && base.num_kv_heads == base.num_heads)
    c.num_kv_heads = c.num_heads;
  if (o.hidden_size && !o.ffn_hidden_size && base.ffn_hidden_size == 4 * base.hidden_size &&
      c.activation != Activation::swiglu)
    c.ffn_hidden_size = 4 * c.hidden_size;
  if (o.vocab_size && c.make_vocab_size_divisible_by > 0) c.pad_vocab();

  if (const auto positions = o.max_position_embeddings) {
    if (*positions < c.seq_length)
      input_error("--max-position-embeddings {} is below the sequence length {}", *positions, c.seq_length);
    if (c.learned_positions() && *positions != c.seq_length)
      input_error("--max-position-embeddings {}: learned position embeddings have one row per position of the "
                  "sequence length, {}",
                  *positions, c.seq_length);
  }
}

nlohmann::ordered_json ModelOverrides::to_json() const {
  nlohmann::ordered_json j = {{"num-layers", json_or_null(num_layers)},
          {"hidden-size", json_or_null(hidden_size)},
          {"num-heads", json_or_null(num_heads)},
          {"num-kv-heads", json_or_null(num_kv_heads)},
          {"ffn-hidden-size", json_or_null(ffn_hidden_size)},
          {"seq-length", json_or_null(seq_length)},
          {"vocab-size", json_or_null(vocab_size)},
          {"init-std", json_or_null(init_std)},
          {"window-size", json_or_null(window_size)},
          {"max-position-embeddings", json_or_null(max_position_embeddings)}};
  for (const auto& [key, value] : moe.items()) j[key] = value;  // only those given
  return j;
}

ModelConfig resolve_model_config(const std::string& preset, const std::string& config_file,
                                 const ModelOverrides& overrides) {
  ModelConfig c;
  std::string where = "model config";
  if (!config_file.empty()) {
    where = config_file;
    nlohmann::json j = read_json_file(config_file);
    if (j.is_object() && !preset.empty()) {
      if (j.contains("preset") && j["preset"] != preset)
        input_error("{}: preset {} differs from the preset '{}' given on the command line",
                    config_file, j["preset"].dump(), preset);
      j["preset"] = preset;
    }
    c = ModelConfig::from_json(j, config_file);
  } else if (!preset.empty()) {
    c = ModelConfig::preset(preset);
  } else {
    input_error("model config: give a model preset ({}) or a model config file",
                fmt::join(ModelConfig::preset_names(), ", "));
  }
  apply_overrides(c, overrides);
  c.validate(where);
  return c;
}

ModelConfig resolve_model_config_json(const nlohmann::json& base, const std::string& where,
                                      const ModelOverrides& overrides) {
  ModelConfig c = ModelConfig::from_json(base, where);
  apply_overrides(c, overrides);
  c.validate(where);
  return c;
}

}  // namespace meg
