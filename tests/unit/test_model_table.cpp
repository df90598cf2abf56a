// The model description: the parameter table's entries (layer, role, split, placement, sequence-
// parallel flag) for the tiny presets, the parameter count as the table's size, lookups by layer
// and role, the hybrid layer pattern, and configs independent of the family (old JSON included).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "test_util.hpp"
#include "convert/hf_config.hpp"
#include "core/error.hpp"
#include "model/config.hpp"
#include "model/gpt.hpp"
#include "model/layer_spec.hpp"
#include "model/param_table.hpp"
#include "model/pipeline.hpp"
#include "model/tensor_parallel.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {

ModelConfig with_vocab(const std::string& preset, int64_t vocab) {
  ModelConfig c = ModelConfig::preset(preset);
  c.set_vocab_from_tokenizer(vocab);
  c.validate();
  return c;
}

// What one entry should say.
struct Expected {
  std::string name;
  int64_t layer;
  TensorRole role;
  TpSplit split;
  std::vector<int64_t> parts;
  PipelinePlace place;
  bool sequence_parallel;
};

void check_table(const ModelConfig& c, const std::vector<Expected>& expected) {
  const auto table = gpt_parameter_table(c);
  REQUIRE(table.size() == expected.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const ParamTensor& t = table[i];
    const Expected& e = expected[i];
    INFO(e.name);
    CHECK(t.name == e.name);
    CHECK(t.layer == e.layer);
    CHECK(t.role == e.role);
    CHECK(t.tp.split == e.split);
    CHECK(t.tp.parts == e.parts);
    CHECK(t.pipeline == e.place);
    CHECK(t.sequence_parallel == e.sequence_parallel);
  }
}

constexpr auto kLayer = PipelinePlace::layer;
constexpr auto kRep = TpSplit::replicated;
constexpr auto kCol = TpSplit::column_parallel;
constexpr auto kRow = TpSplit::row_parallel;

}  // namespace

TEST_CASE("model table: every entry of tiny (GPT-2 features)", "[model]") {
  using enum TensorRole;
  // C 64, 4 heads of 16, F 256, Vp 1024, 64 learned positions, biases, LayerNorm, tied.
  std::vector<Expected> e = {
      {"embedding.word_embeddings.weight", kNoLayer, word_embeddings, TpSplit::vocab_parallel, {1024},
       PipelinePlace::first_and_last_stage, false},
      {"embedding.position_embeddings.weight", kNoLayer, position_embeddings, kRep, {}, PipelinePlace::first_stage,
       true}};
  for (int64_t b = 0; b < 2; ++b) {
    const std::string pre = "decoder.layers." + std::to_string(b) + ".";
    const int64_t attn = 2 * b, mlp = 2 * b + 1;
    const std::vector<Expected> block = {
        {pre + "input_layernorm.weight", attn, norm_weight, kRep, {}, kLayer, true},
        {pre + "input_layernorm.bias", attn, norm_bias, kRep, {}, kLayer, true},
        {pre + "self_attention.linear_qkv.weight", attn, qkv_weight, kCol, {64, 64, 64}, kLayer, false},
        {pre + "self_attention.linear_qkv.bias", attn, qkv_bias, kCol, {64, 64, 64}, kLayer, false},
        {pre + "self_attention.linear_proj.weight", attn, proj_weight, kRow, {64}, kLayer, false},
        {pre + "self_attention.linear_proj.bias", attn, proj_bias, kRep, {}, kLayer, false},
        {pre + "pre_mlp_layernorm.weight", mlp, norm_weight, kRep, {}, kLayer, true},
        {pre + "pre_mlp_layernorm.bias", mlp, norm_bias, kRep, {}, kLayer, true},
        {pre + "mlp.linear_fc1.weight", mlp, fc1_weight, kCol, {256}, kLayer, false},
        {pre + "mlp.linear_fc1.bias", mlp, fc1_bias, kCol, {256}, kLayer, false},
        {pre + "mlp.linear_fc2.weight", mlp, fc2_weight, kRow, {256}, kLayer, false},
        {pre + "mlp.linear_fc2.bias", mlp, fc2_bias, kRep, {}, kLayer, false}};
    e.insert(e.end(), block.begin(), block.end());
  }
  e.push_back({"decoder.final_layernorm.weight", kNoLayer, final_norm_weight, kRep, {}, PipelinePlace::last_stage,
               true});
  e.push_back({"decoder.final_layernorm.bias", kNoLayer, final_norm_bias, kRep, {}, PipelinePlace::last_stage, true});
  check_table(with_vocab("tiny", 1000), e);
}

TEST_CASE("model table: every entry of tiny-llama (Llama features)", "[model]") {
  using enum TensorRole;
  // C 64, 4 query heads and 2 key/value heads of 16, SwiGLU F 176, Vp 1024, RoPE, no biases,
  // RMSNorm, untied.
  std::vector<Expected> e = {{"embedding.word_embeddings.weight", kNoLayer, word_embeddings, TpSplit::vocab_parallel,
                              {1024}, PipelinePlace::first_stage, false}};
  for (int64_t b = 0; b < 2; ++b) {
    const std::string pre = "decoder.layers." + std::to_string(b) + ".";
    const int64_t attn = 2 * b, mlp = 2 * b + 1;
    const std::vector<Expected> block = {
        {pre + "input_layernorm.weight", attn, norm_weight, kRep, {}, kLayer, true},
        {pre + "self_attention.linear_qkv.weight", attn, qkv_weight, kCol, {64, 32, 32}, kLayer, false},
        {pre + "self_attention.linear_proj.weight", attn, proj_weight, kRow, {64}, kLayer, false},
        {pre + "pre_mlp_layernorm.weight", mlp, norm_weight, kRep, {}, kLayer, true},
        {pre + "mlp.linear_fc1.weight", mlp, fc1_weight, kCol, {176, 176}, kLayer, false},
        {pre + "mlp.linear_fc2.weight", mlp, fc2_weight, kRow, {176}, kLayer, false}};
    e.insert(e.end(), block.begin(), block.end());
  }
  e.push_back({"decoder.final_layernorm.weight", kNoLayer, final_norm_weight, kRep, {}, PipelinePlace::last_stage,
               true});
  e.push_back({"output_layer.weight", kNoLayer, output_layer_weight, TpSplit::vocab_parallel, {1024},
               PipelinePlace::last_stage, false});
  check_table(with_vocab("tiny-llama", 1000), e);
}

TEST_CASE("model table: the parameter count is the table's size", "[model]") {
  // The published counts (test_model_config.cpp derives them by hand).
  CHECK(table_size(gpt_parameter_table(ModelConfig::preset("gpt2-124m"))) == 124475904);
  CHECK(table_size(gpt_parameter_table(ModelConfig::preset("llama-1b"))) == 1235814400);
  CHECK(table_size(gpt_parameter_table(ModelConfig::preset("llama-8b"))) == 8030261248);
  for (const std::string& name : ModelConfig::preset_names()) {
    const ModelConfig c = ModelConfig::preset(name);
    CHECK(c.num_parameters() == int64_t(table_size(gpt_parameter_table(c))));
  }
}

TEST_CASE("model table: a rank's table keeps the roles with local shapes and parts", "[model]") {
  const ModelConfig c = with_vocab("tiny-llama", 1000);
  const auto full = gpt_parameter_table(c), local = gpt_parameter_table(c, 2);
  REQUIRE(full.size() == local.size());
  for (size_t i = 0; i < full.size(); ++i) {
    INFO(full[i].name);
    CHECK(local[i].role == full[i].role);
    CHECK(local[i].layer == full[i].layer);
    CHECK(local[i].tp.split == full[i].tp.split);
    for (size_t p = 0; p < full[i].tp.parts.size(); ++p) CHECK(local[i].tp.parts[p] * 2 == full[i].tp.parts[p]);
  }
}

TEST_CASE("model table: tensors found by layer and role", "[model]") {
  for (const std::string preset : {"tiny", "tiny-llama"}) {
    INFO(preset);
    const ModelConfig c = with_vocab(preset, 1000);
    const auto table = gpt_parameter_table(c);
    const TensorIndex index(c, table);
    for (const ParamTensor& t : table) CHECK(index.at(t.layer, t.role) == t.offset);
    const auto offset_of = [&](const std::string& name) {
      for (const ParamTensor& t : table)
        if (t.name == name) return t.offset;
      return kAbsentTensor;
    };
    CHECK(index.layer(2)[TensorRole::qkv_weight] ==
          offset_of("decoder.layers.1.self_attention.linear_qkv.weight"));
    CHECK(index.layer(3)[TensorRole::norm_weight] == offset_of("decoder.layers.1.pre_mlp_layernorm.weight"));
    CHECK(index.layer(0)[TensorRole::fc1_weight] == kAbsentTensor);  // an MLP role
    CHECK(index.output_weight() ==
          offset_of(c.tie_embeddings ? "embedding.word_embeddings.weight" : "output_layer.weight"));
    CHECK((index.at(kNoLayer, TensorRole::position_embeddings) == kAbsentTensor) == !c.learned_positions());
  }
  // A stage's table: its own blocks' layers only, offsets into its own array.
  const ModelConfig c = with_vocab("tiny", 1000);
  const auto last = stage_table(c, {1, 2}, gpt_parameter_table(c));
  const TensorIndex index(c, last);
  CHECK(index.layer(0)[TensorRole::qkv_weight] == kAbsentTensor);
  CHECK(index.output_weight() == 0);  // the tied copy of the word embedding, first
  CHECK(index.layer(2)[TensorRole::norm_weight] == 1024 * 64);
}

TEST_CASE("model table: pipeline placement", "[model]") {
  ModelConfig c = with_vocab("tiny", 1000);
  const auto table = gpt_parameter_table(c);
  const PipelineStage first{0, 2}, last{1, 2};
  for (const ParamTensor& t : table) {
    INFO(t.name);
    if (t.role == TensorRole::word_embeddings) {
      CHECK(stage_holds(c, first, t));
      CHECK(stage_holds(c, last, t));  // tied: the output layer's copy
    } else if (t.layer != kNoLayer) {
      CHECK(stage_holds(c, first, t) == (t.layer < 2));
      CHECK(stage_holds(c, last, t) == (t.layer >= 2));
    }
  }
  c.tie_embeddings = false;
  CHECK_FALSE(stage_holds(c, last, gpt_parameter_table(c).front()));
}

TEST_CASE("model config: the hybrid layer pattern", "[model]") {
  CHECK(default_layer_pattern(2) == "*-*-");
  const auto layers = parse_layer_pattern("*-*-", "test");
  REQUIRE(layers.size() == 4);
  CHECK(layers[2] == LayerSpec{LayerKind::attention, 1});
  CHECK(layers[3] == LayerSpec{LayerKind::mlp, 1});

  const auto refused = [](const std::string& pattern) {
    return input_error_of([&] { parse_layer_pattern(pattern, "model.json"); });
  };
  CHECK_THAT(refused("*-M-"), ContainsSubstring("layer kind 'M' (Mamba) is not implemented at position 3"));
  CHECK(parse_layer_pattern("*E", "test")[1] == LayerSpec{LayerKind::moe, 0});
  CHECK_THAT(refused("E"), ContainsSubstring("an MoE layer 'E' without its attention layer '*' before it"));
  CHECK_THAT(refused("*-x-"), ContainsSubstring("unknown layer symbol 'x'"));
  CHECK_THAT(refused("-*"), ContainsSubstring("position 1"));
  CHECK_THAT(refused("**--"), ContainsSubstring("position 2"));
  CHECK_THAT(refused("*-*"), ContainsSubstring("the last attention layer '*' has no MLP layer"));
  CHECK_THAT(refused("*-M-"), ContainsSubstring("model.json"));

  // In JSON: the default pattern is written, read back and follows num-layers; a pattern alone
  // gives num-layers; one that disagrees with num-layers is refused by validate().
  ModelConfig c = with_vocab("tiny", 1000);
  CHECK(c.to_json()["hybrid-layer-pattern"] == "*-*-");
  CHECK(ModelConfig::from_json(nlohmann::json::parse(c.to_json().dump())) == c);
  nlohmann::json j = c.to_json();
  j["hybrid-layer-pattern"] = "*-*-*-";
  j.erase("num-layers");
  CHECK(ModelConfig::from_json(j).num_layers == 3);
  j["num-layers"] = 2;
  CHECK_THAT(input_error_of([&] { ModelConfig::from_json(j, "m.json").validate("m.json"); }),
             ContainsSubstring("has 3 blocks"));
  j["hybrid-layer-pattern"] = "M-";
  CHECK_THAT(input_error_of([&] { ModelConfig::from_json(j, "m.json"); }),
             ContainsSubstring("m.json: hybrid-layer-pattern \"M-\": layer kind 'M' (Mamba) is not implemented"));
  c.num_layers = 4;  // the default pattern follows
  CHECK(c.layers().size() == 8);
}

TEST_CASE("model config: JSON written before the feature keys loads to the same model", "[model]") {
  for (const std::string preset : {"tiny", "tiny-llama"}) {
    INFO(preset);
    const ModelConfig c = with_vocab(preset, 1000);
    nlohmann::json old = c.to_json();
    old.erase("position-embedding-type");
    old.erase("hybrid-layer-pattern");
    const ModelConfig back = ModelConfig::from_json(old);
    CHECK(back == c);
    CHECK(back.position_embedding ==
          (preset == "tiny" ? PositionEmbedding::learned_absolute : PositionEmbedding::rope));
  }
  const nlohmann::json j = nlohmann::json::parse(R"({"family": "llama", "num-layers": 2, "hidden-size": 64,
      "num-heads": 4, "num-kv-heads": 2, "ffn-hidden-size": 176, "seq-length": 64, "vocab-size": 1000})");
  CHECK(ModelConfig::from_json(j) == with_vocab("tiny-llama", 1000));
}

TEST_CASE("model config: features are independent of the family", "[model]") {
  // A Llama-family config with learned positions: the table has them, the model adds no RoPE.
  ModelConfig c = with_vocab("tiny-llama", 1000);
  nlohmann::json j = c.to_json();
  j["position-embedding-type"] = "learned_absolute";
  c = ModelConfig::from_json(j);
  c.validate();
  CHECK(c.learned_positions());
  CHECK_FALSE(c.uses_rope());
  CHECK(gpt_parameter_table(c)[1].role == TensorRole::position_embeddings);
  CHECK(c.to_json()["position-embedding-type"] == "learned_absolute");
  // No position embedding at all: a model that still runs.
  c.position_embedding = PositionEmbedding::none;
  c.validate();
  GptModel<float> m(c);
  m.init(1);
  const std::vector<int32_t> tokens = {1, 2, 3, 4}, targets = {2, 3, 4, 5};
  CHECK(std::isfinite(m.forward(tokens.data(), targets.data(), 1, 4)));
  CHECK_THAT(input_error_of([&] { parse_position_embedding("alibi", "m.json"); }),
             ContainsSubstring("learned_absolute, rope, none"));
  // The Hugging Face architecture is looked up explicitly: a family without one is refused.
  ModelConfig unknown = c;
  unknown.family = static_cast<ModelFamily>(7);
  CHECK_THAT(input_error_of([&] { hf_architecture(unknown); }), ContainsSubstring("no Hugging Face architecture"));
  CHECK(std::string(hf_architecture(with_vocab("tiny", 1000)).name) == "GPT2LMHeadModel");
  CHECK(std::string(hf_architecture(with_vocab("tiny-llama", 1000)).name) == "LlamaForCausalLM");
}
