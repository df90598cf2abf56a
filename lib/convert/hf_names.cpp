#include "convert/hf_names.hpp"

#include <algorithm>
#include <map>
#include <utility>
#include <stdexcept>

#include "core/parallel.hpp"
#include "model/gpt.hpp"

namespace meg {

namespace {

// Builds the map entries in state_dict order, taking meg shapes from the model's own table.
class MapBuilder {
 public:
  explicit MapBuilder(const ModelConfig& config) {
    for (const auto& t : gpt_parameter_table(config)) shapes_[t.name] = t.shape;
  }

  // HF_NAME holds rows [BEGIN, BEGIN + ROWS) of MEG_NAME (ROWS < 0: all of them).
  void rows(const std::string& hf_name, const std::string& meg_name, int64_t begin = 0, int64_t rows = -1,
            bool transpose = false) {
    HfTensorMap m;
    m.hf_name = hf_name;
    m.meg_name = meg_name;
    m.meg_shape = shapes_.at(meg_name);
    m.row_begin = begin;
    m.rows = rows < 0 ? m.meg_shape[0] - begin : rows;
    m.transpose = transpose;
    const auto r = static_cast<uint64_t>(m.rows), c = static_cast<uint64_t>(m.meg_cols());
    if (m.meg_shape.size() == 1) m.hf_shape = {r};
    else m.hf_shape = transpose ? std::vector<uint64_t>{c, r} : std::vector<uint64_t>{r, c};
    maps_.push_back(std::move(m));
  }
  // A Conv1D weight: the whole meg tensor, transposed.
  void conv1d(const std::string& hf_name, const std::string& meg_name) { rows(hf_name, meg_name, 0, -1, true); }

  std::vector<HfTensorMap> take() { return std::move(maps_); }

 private:
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::vector<HfTensorMap> maps_;
};

std::vector<HfTensorMap> gpt2_map(const ModelConfig& c) {
  MapBuilder b(c);
  const int64_t V = c.vocab_size;
  b.rows("transformer.wte.weight", "embedding.word_embeddings.weight", 0, V);
  b.rows("transformer.wpe.weight", "embedding.position_embeddings.weight");
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string hf = "transformer.h." + std::to_string(l) + ".";
    const std::string meg = "decoder.layers." + std::to_string(l) + ".";
    b.rows(hf + "ln_1.weight", meg + "input_layernorm.weight");
    b.rows(hf + "ln_1.bias", meg + "input_layernorm.bias");
    b.conv1d(hf + "attn.c_attn.weight", meg + "self_attention.linear_qkv.weight");
    b.rows(hf + "attn.c_attn.bias", meg + "self_attention.linear_qkv.bias");
    b.conv1d(hf + "attn.c_proj.weight", meg + "self_attention.linear_proj.weight");
    b.rows(hf + "attn.c_proj.bias", meg + "self_attention.linear_proj.bias");
    b.rows(hf + "ln_2.weight", meg + "pre_mlp_layernorm.weight");
    b.rows(hf + "ln_2.bias", meg + "pre_mlp_layernorm.bias");
    b.conv1d(hf + "mlp.c_fc.weight", meg + "mlp.linear_fc1.weight");
    b.rows(hf + "mlp.c_fc.bias", meg + "mlp.linear_fc1.bias");
    b.conv1d(hf + "mlp.c_proj.weight", meg + "mlp.linear_fc2.weight");
    b.rows(hf + "mlp.c_proj.bias", meg + "mlp.linear_fc2.bias");
  }
  b.rows("transformer.ln_f.weight", "decoder.final_layernorm.weight");
  b.rows("transformer.ln_f.bias", "decoder.final_layernorm.bias");
  if (!c.tie_embeddings) b.rows("lm_head.weight", "output_layer.weight", 0, V);
  return b.take();
}

std::vector<HfTensorMap> llama_map(const ModelConfig& c) {
  MapBuilder b(c);
  const int64_t V = c.vocab_size, Q = c.num_heads * c.head_size(), KV = c.num_kv_heads * c.head_size();
  const int64_t F = c.ffn_hidden_size;
  b.rows("model.embed_tokens.weight", "embedding.word_embeddings.weight", 0, V);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".";
    const std::string meg = "decoder.layers." + std::to_string(l) + ".";
    // Registration order of LlamaDecoderLayer: self_attn (q, k, v, o), mlp (gate, up, down), then
    // the two norms; each nn.Linear holds its weight, then its bias.
    const std::string qkv = meg + "self_attention.linear_qkv.";
    const std::pair<const char*, std::pair<int64_t, int64_t>> parts[] = {
        {"q_proj", {0, Q}}, {"k_proj", {Q, KV}}, {"v_proj", {Q + KV, KV}}};
    for (const auto& [proj, range] : parts) {
      b.rows(hf + "self_attn." + proj + ".weight", qkv + "weight", range.first, range.second);
      if (c.use_bias) b.rows(hf + "self_attn." + proj + ".bias", qkv + "bias", range.first, range.second);
    }
    b.rows(hf + "self_attn.o_proj.weight", meg + "self_attention.linear_proj.weight");
    if (c.use_bias) b.rows(hf + "self_attn.o_proj.bias", meg + "self_attention.linear_proj.bias");
    b.rows(hf + "mlp.gate_proj.weight", meg + "mlp.linear_fc1.weight", 0, F);
    if (c.use_bias) b.rows(hf + "mlp.gate_proj.bias", meg + "mlp.linear_fc1.bias", 0, F);
    b.rows(hf + "mlp.up_proj.weight", meg + "mlp.linear_fc1.weight", F, F);
    if (c.use_bias) b.rows(hf + "mlp.up_proj.bias", meg + "mlp.linear_fc1.bias", F, F);
    b.rows(hf + "mlp.down_proj.weight", meg + "mlp.linear_fc2.weight");
    if (c.use_bias) b.rows(hf + "mlp.down_proj.bias", meg + "mlp.linear_fc2.bias");
    b.rows(hf + "input_layernorm.weight", meg + "input_layernorm.weight");
    b.rows(hf + "post_attention_layernorm.weight", meg + "pre_mlp_layernorm.weight");
  }
  b.rows("model.norm.weight", "decoder.final_layernorm.weight");
  if (!c.tie_embeddings) b.rows("lm_head.weight", "output_layer.weight", 0, V);
  return b.take();
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
  return config.family == ModelFamily::gpt2 ? gpt2_map(config) : llama_map(config);
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
