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

// An MoE layer (moe/cpu_moe_layer.hpp): the MLP's norm, the router, the experts in Megatron's
// SequentialMLP names (each role's experts back to back: all fc1 weights, then their biases, ...),
// then the shared experts.
std::vector<ParamTensor> moe_tensors(const ModelConfig& c, const std::string& pre) {
  using enum TensorRole;
  const MoeConfig& moe = c.moe;
  const int64_t C = c.hidden_size, E = moe.num_experts, F = moe.expert_ffn(c.ffn_hidden_size);
  const bool gated = c.activation == Activation::swiglu;
  const auto fc1_split = [&](int64_t width) {
    return TpSplitOf{TpSplit::column_parallel,
                     gated ? std::vector<int64_t>{width, width} : std::vector<int64_t>{width}};
  };
  std::vector<ParamTensor> out;
  add_norm_tensors(out, c, pre + "pre_mlp_layernorm", norm_weight, norm_bias);
  out.push_back(make_param_tensor(pre + "mlp.router.weight", router_weight, {E, C}, ParamInit::normal));
  if (moe.router_enable_expert_bias) {
    out.push_back(make_param_tensor(pre + "mlp.router.expert_bias", router_expert_bias, {E}, ParamInit::zeros));
  }
  // Each linear layer's weights of all experts, then their biases.
  const auto add_experts = [&](const char* linear, TensorRole weight, TensorRole bias, int64_t rows, int64_t cols,
                               ParamInit init, const TpSplitOf& tp) {
    for (const bool is_bias : {false, true}) {
      if (is_bias && !c.use_bias) continue;
      for (int64_t j = 0; j < E; ++j) {
        const std::string name = fmt::format("{}mlp.experts.local_experts.{}.{}.{}", pre, j, linear,
                                             is_bias ? "bias" : "weight");
        if (is_bias)
          out.push_back(make_param_tensor(name, bias, {rows}, ParamInit::zeros,
                                          tp.split == TpSplit::column_parallel ? tp : TpSplitOf{}));
        else
          out.push_back(make_param_tensor(name, weight, {rows, cols}, init, tp));
        out.back().expert = j;
      }
    }
  };
  add_experts("linear_fc1", expert_fc1_weight, expert_fc1_bias, (gated ? 2 : 1) * F, C, ParamInit::normal,
              fc1_split(F));
  add_experts("linear_fc2", expert_fc2_weight, expert_fc2_bias, C, F, ParamInit::normal_scaled,
              {TpSplit::row_parallel, {F}});
  if (moe.has_shared_experts()) {
    const int64_t S = moe.shared_expert_intermediate_size;
    add_linear_tensors(out, c, pre + "mlp.shared_experts.linear_fc1", shared_fc1_weight, shared_fc1_bias,
                       (gated ? 2 : 1) * S, C, ParamInit::normal, fc1_split(S));
    add_linear_tensors(out, c, pre + "mlp.shared_experts.linear_fc2", shared_fc2_weight, shared_fc2_bias, C, S,
                       ParamInit::normal_scaled, {TpSplit::row_parallel, {S}});
    if (moe.shared_expert_gate)
      out.push_back(make_param_tensor(pre + "mlp.shared_experts.gate_weight", shared_gate_weight, {1, C},
                                      ParamInit::normal));
  }
  return out;
}

// The registry, by symbol, starting with the kinds lib/ implements.
std::map<char, LayerKind>& registry() {
  static std::map<char, LayerKind> kinds = {
      {LayerKind::attention, {LayerKind::attention, "attention", 0, attention_tensors}},
      {LayerKind::mlp, {LayerKind::mlp, "MLP", LayerKind::attention, mlp_tensors}},
      {LayerKind::moe, {LayerKind::moe, "MoE", LayerKind::attention, moe_tensors}},
  };
  return kinds;
}

std::string describe(const LayerKind& kind) { return fmt::format("{} layer '{}'", kind.name, kind.symbol); }

// The kinds that complete the block of SYMBOL's, for messages ("MLP layer '-' or MoE layer 'E'"),
// empty for none.
std::string completers_of(char symbol) {
  std::string out;
  for (const auto& [s, kind] : registry())
    if (kind.completes == symbol) out += (out.empty() ? "" : " or ") + describe(kind);
  return out;
}

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
  char open = 0;  // the kind whose block the previous layer opened and still needs completing
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
      refuse(fmt::format("unknown layer symbol '{}'", s));
    }
    const LayerKind& kind = it->second;
    if (open && kind.completes != open)
      refuse(fmt::format("an {} without its {} after it", describe(layer_kind(open)), completers_of(open)));
    if (kind.completes && !open)
      refuse(fmt::format("an {} without its {} before it", describe(kind), describe(layer_kind(kind.completes))));
    if (!kind.completes) ++block;
    open = !kind.completes && !completers_of(s).empty() ? s : 0;
    layers.push_back({s, block});
  }
  if (open)
    input_error("{}: hybrid-layer-pattern \"{}\": the last {} has no {} after it (layer kinds: {})", where, pattern,
                describe(layer_kind(open)), completers_of(open), valid_kinds());
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
