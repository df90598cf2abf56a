// The layer kinds' registry, the hybrid layer pattern's symbols, and what each part of the model
// contributes to the parameter table (see layer_spec.hpp).
#include "model/layer_spec.hpp"

#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/config.hpp"

namespace meg {

ParamTensor make_param_tensor(std::string name, TensorRole role, std::vector<int64_t> shape, ParamInit init,
                              TpSplitOf tp) {
  ParamTensor t;
  t.name = std::move(name);
  t.role = role;
  t.shape = std::move(shape);
  t.numel = 1;
  for (const int64_t d : t.shape) t.numel *= static_cast<size_t>(d);
  t.init = init;
  t.weight_decay = init == ParamInit::normal || init == ParamInit::normal_scaled;  // not norms, not biases
  t.tp = std::move(tp);
  return t;
}

// With sequence parallelism a norm's gradients cover this rank's rows.
void add_norm_tensors(std::vector<ParamTensor>& out, const ModelConfig& c, const std::string& prefix,
                      TensorRole weight, TensorRole bias) {
  out.push_back(make_param_tensor(prefix + ".weight", weight, {c.hidden_size}, ParamInit::ones));
  out.back().sequence_parallel = true;
  if (c.norm != NormKind::layernorm) return;
  out.push_back(make_param_tensor(prefix + ".bias", bias, {c.hidden_size}, ParamInit::zeros));
  out.back().sequence_parallel = true;
}

void add_linear_tensors(std::vector<ParamTensor>& out, const ModelConfig& c, const std::string& prefix,
                        TensorRole weight, TensorRole bias, int64_t rows, int64_t cols, ParamInit init,
                        const TpSplitOf& tp, std::optional<bool> with_bias) {
  out.push_back(make_param_tensor(prefix + ".weight", weight, {rows, cols}, init, tp));
  if (with_bias.value_or(c.use_bias))
    out.push_back(make_param_tensor(prefix + ".bias", bias, {rows}, ParamInit::zeros,
                                    tp.split == TpSplit::column_parallel ? tp : TpSplitOf{}));
}

namespace {

std::vector<ParamTensor> attention_tensors(const ModelConfig& c, const std::string& pre) {
  using enum TensorRole;
  const int64_t C = c.hidden_size, HS = c.head_size(), Q = c.num_heads * HS, KV = c.num_kv_heads * HS;
  std::vector<ParamTensor> out;
  add_norm_tensors(out, c, pre + "input_layernorm", norm_weight, norm_bias);
  add_linear_tensors(out, c, pre + "self_attention.linear_qkv", qkv_weight, qkv_bias, Q + 2 * KV, C,
                     ParamInit::normal, {TpSplit::column_parallel, {Q, KV, KV}}, c.qkv_has_bias());
  // Every head shares its norm's weights: replicated over the tensor-parallel group, and, as they
  // act on the heads rather than the stream's rows, never sequence-parallel.
  if (c.qk_layernorm) {
    out.push_back(make_param_tensor(pre + "self_attention.q_layernorm.weight", q_norm_weight, {HS}, ParamInit::ones));
    out.push_back(make_param_tensor(pre + "self_attention.k_layernorm.weight", k_norm_weight, {HS}, ParamInit::ones));
  }
  add_linear_tensors(out, c, pre + "self_attention.linear_proj", proj_weight, proj_bias, C, Q,
                     ParamInit::normal_scaled, {TpSplit::row_parallel, {Q}});
  return out;
}

std::vector<ParamTensor> mlp_tensors(const ModelConfig& c, const std::string& pre) {
  using enum TensorRole;
  const int64_t C = c.hidden_size, F = c.ffn_hidden_size;
  const bool gated = c.activation == Activation::swiglu;
  std::vector<ParamTensor> out;
  add_norm_tensors(out, c, pre + "pre_mlp_layernorm", norm_weight, norm_bias);
  add_linear_tensors(out, c, pre + "mlp.linear_fc1", fc1_weight, fc1_bias, (gated ? 2 : 1) * F, C,
                     ParamInit::normal,
                     {TpSplit::column_parallel, gated ? std::vector<int64_t>{F, F} : std::vector<int64_t>{F}});
  add_linear_tensors(out, c, pre + "mlp.linear_fc2", fc2_weight, fc2_bias, C, F, ParamInit::normal_scaled,
                     {TpSplit::row_parallel, {F}});
  return out;
}

// The registry, by symbol, starting with the kinds lib/ implements.
std::map<char, LayerKind>& registry() {
  static std::map<char, LayerKind> kinds = {
      {LayerKind::attention, {LayerKind::attention, "attention", 0, attention_tensors}},
      {LayerKind::mlp, {LayerKind::mlp, "MLP", LayerKind::attention, mlp_tensors}},
  };
  return kinds;
}

// The kind that completes the block of SYMBOL's, if any.
const LayerKind* completer_of(char symbol) {
  for (const auto& [s, kind] : registry())
    if (kind.completes == symbol) return &kind;
  return nullptr;
}

std::string describe(const LayerKind& kind) { return fmt::format("{} layer '{}'", kind.name, kind.symbol); }

// The registered kinds, for messages: "'*' attention, '-' MLP (after '*')".
std::string valid_kinds() {
  std::string out;
  for (const auto& [s, kind] : registry()) {
    if (!out.empty()) out += ", ";
    out += fmt::format("'{}' {}", s, kind.name);
    if (kind.completes) out += fmt::format(" (after '{}')", kind.completes);
  }
  return out;
}

}  // namespace

void register_layer_kind(LayerKind kind) {
  auto& kinds = registry();
  if (kinds.count(kind.symbol)) throw std::logic_error(fmt::format("layer kind '{}' is registered twice", kind.symbol));
  if (kind.completes && !kinds.count(kind.completes))
    throw std::logic_error(fmt::format("layer kind '{}' completes unregistered kind '{}'", kind.symbol, kind.completes));
  if (kind.completes && completer_of(kind.completes))
    throw std::logic_error(fmt::format("layer kind '{}' already has a kind completing it", kind.completes));
  if (!kind.tensors) throw std::logic_error(fmt::format("layer kind '{}' has no tensors", kind.symbol));
  const char symbol = kind.symbol;
  kinds.emplace(symbol, std::move(kind));
}

const LayerKind& layer_kind(char symbol) {
  const auto& kinds = registry();
  const auto it = kinds.find(symbol);
  if (it == kinds.end()) throw std::logic_error(fmt::format("layer kind '{}' is not registered", symbol));
  return it->second;
}

std::string default_layer_pattern(int64_t blocks) {
  std::string pattern;
  for (int64_t b = 0; b < blocks; ++b) pattern += "*-";
  return pattern;
}

std::vector<LayerSpec> parse_layer_pattern(const std::string& pattern, const std::string& where) {
  const auto& kinds = registry();
  std::vector<LayerSpec> layers;
  const LayerKind* needed = nullptr;  // the kind the previous layer's block still needs
  int64_t block = -1;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char s = pattern[i];
    const auto refuse = [&](const std::string& why) {
      input_error("{}: hybrid-layer-pattern \"{}\": {} at position {} (layer kinds: {})", where, pattern, why, i + 1,
                  valid_kinds());
    };
    const auto it = kinds.find(s);
    if (it == kinds.end()) {
      if (s == 'M') refuse("layer kind 'M' (Mamba) is not implemented");
      if (s == 'E') refuse("layer kind 'E' (mixture of experts) is not implemented");
      refuse(fmt::format("unknown layer symbol '{}'", s));
    }
    const LayerKind& kind = it->second;
    if (needed && s != needed->symbol)
      refuse(fmt::format("an {} without its {} after it", describe(layer_kind(needed->completes)), describe(*needed)));
    if (kind.completes && !needed)
      refuse(fmt::format("an {} without its {} before it", describe(kind), describe(layer_kind(kind.completes))));
    if (!kind.completes) ++block;
    needed = completer_of(s);
    layers.push_back({s, block});
  }
  if (needed)
    input_error("{}: hybrid-layer-pattern \"{}\": the last {} has no {} after it (layer kinds: {})", where, pattern,
                describe(layer_kind(needed->completes)), describe(*needed), valid_kinds());
  return layers;
}

int64_t count_blocks(const std::vector<LayerSpec>& layers) { return layers.empty() ? 0 : layers.back().block + 1; }

std::vector<ParamTensor> embedding_tensors(const ModelConfig& c) {
  std::vector<ParamTensor> out;
  out.push_back(make_param_tensor("embedding.word_embeddings.weight", TensorRole::word_embeddings,
                                  {c.padded_vocab_size, c.hidden_size}, ParamInit::normal,
                                  {TpSplit::vocab_parallel, {c.padded_vocab_size}}));
  // A tied word embedding also serves as the output layer, on the last stage.
  out.back().pipeline = c.tie_embeddings ? PipelinePlace::first_and_last_stage : PipelinePlace::first_stage;
  if (c.position_embedding == PositionEmbedding::learned_absolute) {
    out.push_back(make_param_tensor("embedding.position_embeddings.weight", TensorRole::position_embeddings,
                                    {c.seq_length, c.hidden_size}, ParamInit::normal));
    out.back().pipeline = PipelinePlace::first_stage;
    out.back().sequence_parallel = true;
  }
  return out;
}

std::vector<ParamTensor> layer_tensors(const ModelConfig& c, const LayerSpec& layer) {
  return layer_kind(layer.kind).tensors(c, "decoder.layers." + std::to_string(layer.block) + ".");
}

std::vector<ParamTensor> head_tensors(const ModelConfig& c) {
  std::vector<ParamTensor> out;
  add_norm_tensors(out, c, "decoder.final_layernorm", TensorRole::final_norm_weight, TensorRole::final_norm_bias);
  if (!c.tie_embeddings)
    out.push_back(make_param_tensor("output_layer.weight", TensorRole::output_layer_weight,
                                    {c.padded_vocab_size, c.hidden_size}, ParamInit::normal,
                                    {TpSplit::vocab_parallel, {c.padded_vocab_size}}));
  for (auto& t : out) t.pipeline = PipelinePlace::last_stage;
  return out;
}

}  // namespace meg
