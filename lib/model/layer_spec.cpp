// What each part of the model contributes to the parameter table (see layer_spec.hpp), and the
// hybrid layer pattern's symbols.
#include "model/layer_spec.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/config.hpp"

namespace meg {

namespace {

// Builds tensors with their shape, role and the properties that follow from the role.
ParamTensor tensor(std::string name, TensorRole role, std::vector<int64_t> shape, ParamInit init, TpSplitOf tp = {}) {
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

// A norm's weight and (LayerNorm only) bias, replicated; with sequence parallelism their gradients
// cover this rank's rows.
void add_norm(std::vector<ParamTensor>& out, const ModelConfig& c, const std::string& prefix, TensorRole weight,
              TensorRole bias) {
  out.push_back(tensor(prefix + ".weight", weight, {c.hidden_size}, ParamInit::ones));
  out.back().sequence_parallel = true;
  if (c.norm != NormKind::layernorm) return;
  out.push_back(tensor(prefix + ".bias", bias, {c.hidden_size}, ParamInit::zeros));
  out.back().sequence_parallel = true;
}

// A linear layer's weight [OUT, IN] and (use-bias only) bias [OUT]. A column-parallel layer's bias
// splits with its rows; a row-parallel layer's is replicated.
void add_linear(std::vector<ParamTensor>& out, const ModelConfig& c, const std::string& prefix, TensorRole weight,
                TensorRole bias, int64_t rows, int64_t cols, ParamInit init, const TpSplitOf& tp) {
  out.push_back(tensor(prefix + ".weight", weight, {rows, cols}, init, tp));
  if (c.use_bias)
    out.push_back(tensor(prefix + ".bias", bias, {rows}, ParamInit::zeros,
                         tp.split == TpSplit::column_parallel ? tp : TpSplitOf{}));
}

}  // namespace

std::string default_layer_pattern(int64_t blocks) {
  std::string pattern;
  for (int64_t b = 0; b < blocks; ++b) pattern += "*-";
  return pattern;
}

std::vector<LayerSpec> parse_layer_pattern(const std::string& pattern, const std::string& where) {
  std::vector<LayerSpec> layers;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char s = pattern[i];
    const auto refuse = [&](const std::string& why) {
      input_error("{}: hybrid-layer-pattern \"{}\": {} at position {} ({})", where, pattern, why, i + 1,
                  "only \"*-\" blocks, attention then MLP, are implemented");
    };
    if (s == 'M') refuse("layer kind 'M' (Mamba) is not implemented");
    if (s == 'E') refuse("layer kind 'E' (mixture of experts) is not implemented");
    if (s != '*' && s != '-') refuse(fmt::format("unknown layer symbol '{}' (valid: * attention, - MLP)", s));
    const LayerKind kind = s == '*' ? LayerKind::attention : LayerKind::mlp;
    if (kind != (i % 2 == 0 ? LayerKind::attention : LayerKind::mlp))
      refuse(kind == LayerKind::mlp ? "an MLP layer '-' without its attention layer '*' before it"
                                    : "an attention layer '*' without its MLP layer '-' after it");
    layers.push_back({kind, static_cast<int64_t>(i / 2)});
  }
  if (layers.size() % 2 != 0)
    input_error("{}: hybrid-layer-pattern \"{}\": the last attention layer '*' has no MLP layer '-' after it (only "
                "\"*-\" blocks, attention then MLP, are implemented)",
                where, pattern);
  return layers;
}

std::vector<ParamTensor> embedding_tensors(const ModelConfig& c) {
  std::vector<ParamTensor> out;
  out.push_back(tensor("embedding.word_embeddings.weight", TensorRole::word_embeddings,
                       {c.padded_vocab_size, c.hidden_size}, ParamInit::normal,
                       {TpSplit::vocab_parallel, {c.padded_vocab_size}}));
  // A tied word embedding also serves as the output layer, on the last stage.
  out.back().pipeline = c.tie_embeddings ? PipelinePlace::first_and_last_stage : PipelinePlace::first_stage;
  if (c.position_embedding == PositionEmbedding::learned_absolute) {
    out.push_back(tensor("embedding.position_embeddings.weight", TensorRole::position_embeddings,
                         {c.seq_length, c.hidden_size}, ParamInit::normal));
    out.back().pipeline = PipelinePlace::first_stage;
    out.back().sequence_parallel = true;
  }
  return out;
}

std::vector<ParamTensor> layer_tensors(const ModelConfig& c, const LayerSpec& layer) {
  const int64_t C = c.hidden_size, HS = c.head_size(), Q = c.num_heads * HS, KV = c.num_kv_heads * HS;
  const int64_t F = c.ffn_hidden_size;
  const std::string pre = "decoder.layers." + std::to_string(layer.block) + ".";
  std::vector<ParamTensor> out;
  switch (layer.kind) {
    case LayerKind::attention:
      add_norm(out, c, pre + "input_layernorm", TensorRole::norm_weight, TensorRole::norm_bias);
      add_linear(out, c, pre + "self_attention.linear_qkv", TensorRole::qkv_weight, TensorRole::qkv_bias, Q + 2 * KV, C,
                 ParamInit::normal, {TpSplit::column_parallel, {Q, KV, KV}});
      add_linear(out, c, pre + "self_attention.linear_proj", TensorRole::proj_weight, TensorRole::proj_bias, C, Q,
                 ParamInit::normal_scaled, {TpSplit::row_parallel, {Q}});
      break;
    case LayerKind::mlp: {
      const bool gated = c.activation == Activation::swiglu;
      add_norm(out, c, pre + "pre_mlp_layernorm", TensorRole::norm_weight, TensorRole::norm_bias);
      add_linear(out, c, pre + "mlp.linear_fc1", TensorRole::fc1_weight, TensorRole::fc1_bias, (gated ? 2 : 1) * F, C,
                 ParamInit::normal,
                 {TpSplit::column_parallel, gated ? std::vector<int64_t>{F, F} : std::vector<int64_t>{F}});
      add_linear(out, c, pre + "mlp.linear_fc2", TensorRole::fc2_weight, TensorRole::fc2_bias, C, F,
                 ParamInit::normal_scaled, {TpSplit::row_parallel, {F}});
      break;
    }
    default: throw std::logic_error("layer_tensors: unknown layer kind");
  }
  return out;
}

std::vector<ParamTensor> head_tensors(const ModelConfig& c) {
  std::vector<ParamTensor> out;
  add_norm(out, c, "decoder.final_layernorm", TensorRole::final_norm_weight, TensorRole::final_norm_bias);
  if (!c.tie_embeddings)
    out.push_back(tensor("output_layer.weight", TensorRole::output_layer_weight, {c.padded_vocab_size, c.hidden_size},
                         ParamInit::normal, {TpSplit::vocab_parallel, {c.padded_vocab_size}}));
  for (auto& t : out) t.pipeline = PipelinePlace::last_stage;
  return out;
}

}  // namespace meg
