#include "convert/hf_names.hpp"

#include <algorithm>
#include <map>
#include <utility>
#include <stdexcept>

#include <fmt/format.h>

#include "convert/hf_config.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "model/layer_spec.hpp"
#include "model/param_table.hpp"

namespace meg {

namespace {

// How a Hugging Face tensor is cut from its meg tensor: all of it, the real vocabulary's rows
// [0, V) of a padded one, or one of its stacked parts (its TpSplitOf's parts: q, k, v of
// linear_qkv; gate, up of a gated linear_fc1).
enum class HfCut { whole, vocabulary, part };

// One Hugging Face tensor of an architecture: its name ("{}" for the block number), the meg tensor
// (by role; inside a block, of the block's attention or MLP layer) and the cut. Conv1D weights
// (GPT-2's) are stored transposed. An entry whose meg tensor the config lacks (a bias without
// use-bias, positions without learned ones) is not in the checkpoint.
struct HfTensorSpec {
  const char* name;
  TensorRole role;
  char kind = LayerKind::attention;  // the layer kind's symbol, in a block only
  HfCut cut = HfCut::whole;
  int part = 0;
  bool transpose = false;
};

// An architecture's tensors in state_dict order (save_pretrained fills shards in it): before the
// blocks, each block's, after them; and the names of the buffers each block of some exports holds
// besides its weights, which meg does not read; and a prefix of the names some uploads omit.
struct HfTensorTable {
  std::vector<HfTensorSpec> before, block, after;
  std::vector<const char*> block_buffers;
  const char* optional_prefix = "";
};

constexpr char kAttn = LayerKind::attention, kMlp = LayerKind::mlp;

const HfTensorTable& gpt2_table() {
  using enum TensorRole;
  static const HfTensorTable table = {
      {{"transformer.wte.weight", word_embeddings, kAttn, HfCut::vocabulary},
       {"transformer.wpe.weight", position_embeddings}},
      {{"transformer.h.{}.ln_1.weight", norm_weight, kAttn},
       {"transformer.h.{}.ln_1.bias", norm_bias, kAttn},
       {"transformer.h.{}.attn.c_attn.weight", qkv_weight, kAttn, HfCut::whole, 0, true},
       {"transformer.h.{}.attn.c_attn.bias", qkv_bias, kAttn},
       {"transformer.h.{}.attn.c_proj.weight", proj_weight, kAttn, HfCut::whole, 0, true},
       {"transformer.h.{}.attn.c_proj.bias", proj_bias, kAttn},
       {"transformer.h.{}.ln_2.weight", norm_weight, kMlp},
       {"transformer.h.{}.ln_2.bias", norm_bias, kMlp},
       {"transformer.h.{}.mlp.c_fc.weight", fc1_weight, kMlp, HfCut::whole, 0, true},
       {"transformer.h.{}.mlp.c_fc.bias", fc1_bias, kMlp},
       {"transformer.h.{}.mlp.c_proj.weight", fc2_weight, kMlp, HfCut::whole, 0, true},
       {"transformer.h.{}.mlp.c_proj.bias", fc2_bias, kMlp}},
      {{"transformer.ln_f.weight", final_norm_weight},
       {"transformer.ln_f.bias", final_norm_bias},
       {"lm_head.weight", output_layer_weight, kAttn, HfCut::vocabulary}},
      // The causal masks old versions of transformers saved.
      {"transformer.h.{}.attn.bias", "transformer.h.{}.attn.masked_bias"},
      // OpenAI's upload names its tensors without the "transformer." that save_pretrained writes.
      "transformer.",
  };
  return table;
}

const HfTensorTable& llama_table() {
  using enum TensorRole;
  // Registration order of LlamaDecoderLayer: self_attn (q, k, v, o; Qwen3's q_norm, k_norm), mlp
  // (gate, up, down), then the two norms; each nn.Linear holds its weight, then its bias. Qwen2,
  // Qwen3 and Mistral share the layout; the tensors a config lacks are not in its checkpoint.
  static const HfTensorTable table = {
      {{"model.embed_tokens.weight", word_embeddings, kAttn, HfCut::vocabulary}},
      {{"model.layers.{}.self_attn.q_proj.weight", qkv_weight, kAttn, HfCut::part, 0},
       {"model.layers.{}.self_attn.q_proj.bias", qkv_bias, kAttn, HfCut::part, 0},
       {"model.layers.{}.self_attn.k_proj.weight", qkv_weight, kAttn, HfCut::part, 1},
       {"model.layers.{}.self_attn.k_proj.bias", qkv_bias, kAttn, HfCut::part, 1},
       {"model.layers.{}.self_attn.v_proj.weight", qkv_weight, kAttn, HfCut::part, 2},
       {"model.layers.{}.self_attn.v_proj.bias", qkv_bias, kAttn, HfCut::part, 2},
       {"model.layers.{}.self_attn.o_proj.weight", proj_weight, kAttn},
       {"model.layers.{}.self_attn.o_proj.bias", proj_bias, kAttn},
       {"model.layers.{}.self_attn.q_norm.weight", q_norm_weight, kAttn},
       {"model.layers.{}.self_attn.k_norm.weight", k_norm_weight, kAttn},
       {"model.layers.{}.mlp.gate_proj.weight", fc1_weight, kMlp, HfCut::part, 0},
       {"model.layers.{}.mlp.gate_proj.bias", fc1_bias, kMlp, HfCut::part, 0},
       {"model.layers.{}.mlp.up_proj.weight", fc1_weight, kMlp, HfCut::part, 1},
       {"model.layers.{}.mlp.up_proj.bias", fc1_bias, kMlp, HfCut::part, 1},
       {"model.layers.{}.mlp.down_proj.weight", fc2_weight, kMlp},
       {"model.layers.{}.mlp.down_proj.bias", fc2_bias, kMlp},
       {"model.layers.{}.input_layernorm.weight", norm_weight, kAttn},
       {"model.layers.{}.post_attention_layernorm.weight", norm_weight, kMlp}},
      {{"model.norm.weight", final_norm_weight},
       {"lm_head.weight", output_layer_weight, kAttn, HfCut::vocabulary}},
      // The rotary frequencies old versions of transformers saved.
      {"model.layers.{}.self_attn.rotary_emb.inv_freq"},
  };
  return table;
}

// The table of CONFIG's architecture (hf_config.hpp's explicit lookup).
const HfTensorTable& hf_tensor_table(const ModelConfig& config) {
  switch (hf_architecture(config).type) {
    case HfModelType::gpt2: return gpt2_table();
    case HfModelType::llama:
    case HfModelType::qwen2:
    case HfModelType::qwen3:
    case HfModelType::mistral: return llama_table();
  }
  throw std::logic_error("hf_tensor_table: unknown Hugging Face architecture");
}

std::string block_name(const char* pattern, int64_t block) { return fmt::format(fmt::runtime(pattern), block); }

// The map of one entry onto the meg tensor T.
HfTensorMap map_of(const HfTensorSpec& spec, std::string hf_name, const ParamTensor& t, int64_t vocab_size) {
  HfTensorMap m;
  m.hf_name = std::move(hf_name);
  m.meg_name = t.name;
  m.meg_shape = t.shape;
  m.rows = t.shape[0];
  switch (spec.cut) {
    case HfCut::whole: break;
    case HfCut::vocabulary: m.rows = vocab_size; break;
    case HfCut::part:
      if (size_t(spec.part) >= t.tp.parts.size())
        throw std::logic_error("hf_tensor_map: " + t.name + " has no part " + std::to_string(spec.part));
      for (int i = 0; i < spec.part; ++i) m.row_begin += t.tp.parts[size_t(i)];
      m.rows = t.tp.parts[size_t(spec.part)];
      break;
  }
  m.transpose = spec.transpose;
  const auto r = static_cast<uint64_t>(m.rows), c = static_cast<uint64_t>(m.meg_cols());
  if (m.meg_shape.size() == 1) m.hf_shape = {r};
  else m.hf_shape = spec.transpose ? std::vector<uint64_t>{c, r} : std::vector<uint64_t>{r, c};
  return m;
}

// DST[c, r] = SRC[r, c] for a ROWS x COLS source, in tiles so that both sides stay in cache, the
// bands of destination rows spread over the threads (each written by one: the same result on any
// number of them). Bounds are taken out of the inner loops, which the compiler then unrolls.
void transpose(float* dst, const float* src, size_t rows, size_t cols) {
  constexpr size_t kTile = 64;
  parallel_for(cols, kTile, [&](size_t c_begin, size_t c_end) {
    for (size_t r0 = 0; r0 < rows; r0 += kTile) {
      const size_t r_end = std::min(rows, r0 + kTile);
      for (size_t c = c_begin; c < c_end; ++c) {
        float* out = dst + c * rows;
        const float* in = src + c;
        for (size_t r = r0; r < r_end; ++r) out[r] = in[r * cols];
      }
    }
  });
}

}  // namespace

std::vector<HfTensorMap> hf_tensor_map(const ModelConfig& config) {
  const HfTensorTable& table = hf_tensor_table(config);
  const std::vector<ParamTensor> tensors = gpt_parameter_table(config);
  const TensorIndex index(config, tensors);
  std::map<size_t, const ParamTensor*> at_offset;
  for (const auto& t : tensors) at_offset[t.offset] = &t;

  std::vector<HfTensorMap> maps;
  // OFFSET: where index finds the entry's meg tensor (kAbsentTensor: the config lacks it).
  const auto add = [&](const HfTensorSpec& spec, std::string name, size_t offset) {
    if (offset != kAbsentTensor) maps.push_back(map_of(spec, std::move(name), *at_offset.at(offset), config.vocab_size));
  };
  for (const auto& spec : table.before) add(spec, spec.name, index.at(kNoLayer, spec.role));
  // Each block's layers by kind; a kind the architecture has no names for cannot be exported.
  std::vector<std::map<char, int64_t>> blocks(size_t(config.num_layers));
  const std::vector<LayerSpec> layers = config.layers();
  for (size_t l = 0; l < layers.size(); ++l) {
    const char kind = layers[l].kind;
    if (std::none_of(table.block.begin(), table.block.end(), [&](const HfTensorSpec& s) { return s.kind == kind; }))
      input_error("model config: Hugging Face {} has no {} layer '{}' (hybrid-layer-pattern \"{}\")",
                  hf_architecture(config).name, layer_kind(kind).name, kind, config.layer_pattern());
    blocks.at(size_t(layers[l].block))[kind] = int64_t(l);
  }
  for (int64_t b = 0; b < config.num_layers; ++b)
    for (const auto& spec : table.block) {
      const auto layer = blocks[size_t(b)].find(spec.kind);
      if (layer != blocks[size_t(b)].end()) add(spec, block_name(spec.name, b), index.at(layer->second, spec.role));
    }
  for (const auto& spec : table.after) add(spec, spec.name, index.at(kNoLayer, spec.role));
  return maps;
}

std::string hf_optional_prefix(const ModelConfig& config) { return hf_tensor_table(config).optional_prefix; }

std::vector<std::string> hf_ignored_tensors(const ModelConfig& config) {
  const HfTensorTable& table = hf_tensor_table(config);
  std::vector<std::string> names;
  for (int64_t b = 0; b < config.num_layers; ++b)
    for (const char* buffer : table.block_buffers) names.push_back(block_name(buffer, b));
  // transformers drops a tied output layer, which shares the embedding's storage; some files keep it.
  if (config.tie_embeddings)
    for (const auto& spec : table.after)
      if (spec.role == TensorRole::output_layer_weight) names.push_back(spec.name);
  return names;
}

void hf_from_meg(const HfTensorMap& map, std::span<const float> meg, std::vector<float>& out) {
  const auto cols = static_cast<size_t>(map.meg_cols()), rows = static_cast<size_t>(map.rows);
  if (meg.size() < (static_cast<size_t>(map.row_begin) + rows) * cols)
    throw std::logic_error("hf_from_meg: the meg tensor is too small for " + map.hf_name);
  const float* src = meg.data() + static_cast<size_t>(map.row_begin) * cols;
  out.resize(rows * cols);
  if (map.transpose) transpose(out.data(), src, rows, cols);
  else std::copy(src, src + rows * cols, out.begin());
}

void meg_from_hf(const HfTensorMap& map, std::span<const float> hf, std::span<float> meg) {
  const auto cols = static_cast<size_t>(map.meg_cols()), rows = static_cast<size_t>(map.rows);
  if (hf.size() != rows * cols || meg.size() < (static_cast<size_t>(map.row_begin) + rows) * cols)
    throw std::logic_error("meg_from_hf: sizes do not match the map of " + map.hf_name);
  float* dst = meg.data() + static_cast<size_t>(map.row_begin) * cols;
  if (map.transpose) transpose(dst, hf.data(), cols, rows);  // stored [cols, rows]
  else std::copy(hf.begin(), hf.end(), dst);
}

}  // namespace meg
