// The model features of today's open architectures (Llama 3.x's RoPE scaling, Qwen2's q/k/v biases,
// Qwen3's per-head q/k RMSNorm, a head size of its own): their config keys, parameter tables and
// tensor-parallel shards, CPU gradients, RoPE frequencies against transformers' formula, and the
// Hugging Face config of each architecture, both ways.
#include <cmath>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gradient_check.hpp"
#include "micro_model.hpp"
#include "test_util.hpp"
#include "convert/hf_config.hpp"
#include "convert/hf_names.hpp"
#include "model/config.hpp"
#include "model/param_table.hpp"
#include "model/tensor_parallel.hpp"
#include "ops/cpu/ops.hpp"
#include "ops/rope_frequencies.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {

// The micro Llama with one feature set on top.
ModelConfig qwen2_micro() {
  ModelConfig c = micro_config(ModelFamily::llama);
  c.add_qkv_bias = true;
  return c;
}
ModelConfig qwen3_micro() {
  ModelConfig c = micro_config(ModelFamily::llama);
  c.qk_layernorm = true;
  c.kv_channels = 6;  // 4 heads of 6 on a stream of 16
  return c;
}
ModelConfig llama3_micro() {
  ModelConfig c = micro_config(ModelFamily::llama);
  c.use_rope_scaling = true;
  c.rope_scaling_factor = 8;
  c.rope_scaling_original_max_position_embeddings = 16;
  return c;
}

const ParamTensor& find(const std::vector<ParamTensor>& table, const std::string& name) {
  for (const auto& t : table)
    if (t.name == name) return t;
  FAIL("no tensor " << name);
  return table.front();
}

bool has(const std::vector<ParamTensor>& table, const std::string& name) {
  for (const auto& t : table)
    if (t.name == name) return true;
  return false;
}

}  // namespace

TEST_CASE("model architectures: the features' keys round-trip", "[model][arch]") {
  for (ModelConfig c : {qwen2_micro(), qwen3_micro(), llama3_micro()}) {
    c.validate();
    CHECK(ModelConfig::from_json(nlohmann::json::parse(c.to_json().dump())) == c);
  }
  ModelConfig linear = micro_config(ModelFamily::llama);
  linear.rotary_seq_len_interpolation_factor = 4;
  CHECK(ModelConfig::from_json(nlohmann::json::parse(linear.to_json().dump())) == linear);
  CHECK(llama3_micro().to_json()["use-rope-scaling"] == true);
  CHECK(micro_config(ModelFamily::llama).to_json()["kv-channels"].is_null());
  CHECK(qwen3_micro().to_json()["kv-channels"] == 6);
  // The Llama 3.2 1B preset scales its frequencies as the released model does.
  const ModelConfig l1b = ModelConfig::preset("llama-1b");
  CHECK(l1b.use_rope_scaling);
  CHECK(l1b.rope_scaling_factor == 32);
}

TEST_CASE("model architectures: bad feature values are refused with one line", "[model][arch]") {
  ModelConfig c = llama3_micro();
  c.rotary_seq_len_interpolation_factor = 2;
  CHECK_THAT(input_error_of([&] { c.validate(); }), ContainsSubstring("exclude each other"));
  c = llama3_micro();
  c.rope_scaling_high_freq_factor = 0.5;
  CHECK_THAT(input_error_of([&] { c.validate(); }), ContainsSubstring("rope-scaling-high-freq-factor"));
  c = qwen3_micro();
  c.norm = NormKind::layernorm;
  CHECK_THAT(input_error_of([&] { c.validate(); }), ContainsSubstring("qk-layernorm"));
  c = qwen3_micro();
  c.kv_channels = 5;
  CHECK_THAT(input_error_of([&] { c.validate(); }), ContainsSubstring("must be even for RoPE"));
  c = micro_config(ModelFamily::gpt2);
  c.rotary_seq_len_interpolation_factor = 2;
  CHECK_THAT(input_error_of([&] { c.validate(); }), ContainsSubstring("needs position-embedding-type rope"));
}

TEST_CASE("model architectures: parameter tables and tensor-parallel shards", "[model][arch]") {
  const ModelConfig q2 = qwen2_micro();
  const auto t2 = gpt_parameter_table(q2);
  // q/k/v: 4 heads of 4 and 2 KV heads of 4: 16 + 8 + 8 rows, a bias of the same, no other bias.
  CHECK(find(t2, "decoder.layers.0.self_attention.linear_qkv.bias").shape == std::vector<int64_t>{32});
  CHECK_FALSE(has(t2, "decoder.layers.0.self_attention.linear_proj.bias"));
  CHECK_FALSE(has(t2, "decoder.layers.0.mlp.linear_fc1.bias"));
  const auto t2_tp = gpt_parameter_table(q2, 2);
  const ParamTensor& b = find(t2_tp, "decoder.layers.1.self_attention.linear_qkv.bias");
  CHECK(b.shape == std::vector<int64_t>{16});  // half the q, k and v rows each
  CHECK(b.tp.split == TpSplit::column_parallel);

  const ModelConfig q3 = qwen3_micro();
  const auto t3 = gpt_parameter_table(q3);
  CHECK(find(t3, "decoder.layers.0.self_attention.linear_qkv.weight").shape == std::vector<int64_t>{24 + 24, 16});
  CHECK(find(t3, "decoder.layers.0.self_attention.linear_proj.weight").shape == std::vector<int64_t>{16, 24});
  const ParamTensor& qn = find(t3, "decoder.layers.1.self_attention.q_layernorm.weight");
  CHECK(qn.shape == std::vector<int64_t>{6});
  CHECK(qn.init == ParamInit::ones);
  CHECK_FALSE(qn.weight_decay);
  CHECK(has(t3, "decoder.layers.1.self_attention.k_layernorm.weight"));
  CHECK(q3.num_parameters() == int64_t(table_size(t3)));
  const auto t3_tp = gpt_parameter_table(q3, 2);
  CHECK(find(t3_tp, "decoder.layers.0.self_attention.linear_qkv.weight").shape == std::vector<int64_t>{24, 16});
  CHECK(find(t3_tp, "decoder.layers.0.self_attention.linear_proj.weight").shape == std::vector<int64_t>{16, 12});
  CHECK(find(t3_tp, "decoder.layers.0.self_attention.q_layernorm.weight").shape == std::vector<int64_t>{6});
  CHECK(find(t3_tp, "decoder.layers.0.self_attention.q_layernorm.weight").tp.split == TpSplit::replicated);
}

TEST_CASE("model architectures: CPU gradients match finite differences", "[model][arch]") {
  SECTION("add-qkv-bias") { check_gradients_against_differences(qwen2_micro(), 0.0); }
  SECTION("qk-layernorm and kv-channels") { check_gradients_against_differences(qwen3_micro(), 0.0); }
  SECTION("qk-layernorm with dropout") { check_gradients_against_differences(qwen3_micro(), 0.1); }
  SECTION("llama3 RoPE scaling") { check_gradients_against_differences(llama3_micro(), 0.0); }
}

TEST_CASE("model architectures: RoPE frequencies follow transformers' formulas", "[model][arch][rope]") {
  // transformers' _compute_llama3_parameters for head size 16, base 10000, factor 8, low/high
  // frequency factors 1 and 4, 64 original positions, evaluated by python3 in double: one pair
  // kept, two smoothed, five divided by the factor.
  const double expected[] = {1.0,     0.24438459943539834, 0.013042256043820465, 0.003952847075210474,
                             0.00125, 0.0003952847075210474, 0.000125,           3.952847075210474e-05};
  RopeScaling s;
  s.type = RopeScalingType::llama3;
  s.factor = 8;
  s.low_freq_factor = 1;
  s.high_freq_factor = 4;
  s.original_max_position_embeddings = 64;
  const std::vector<double> f = rope_inv_freq(16, 10000.0, s);
  REQUIRE(f.size() == 8);
  for (size_t i = 0; i < 8; ++i) CHECK(std::abs(f[i] - expected[i]) <= 1e-15 * expected[i]);
  // linear: the plain frequencies over the factor; none: theta^(-2i/HS).
  const std::vector<double> plain = rope_inv_freq(16, 10000.0);
  const std::vector<double> linear = rope_inv_freq(16, 10000.0, {RopeScalingType::linear, 4.0});
  for (size_t i = 0; i < 8; ++i) {
    CHECK(plain[i] == std::pow(10000.0, -2.0 * double(i) / 16));
    CHECK(linear[i] == plain[i] / 4.0);
  }
  // The config's frequencies are these, and the rotation by them equals positions / factor.
  ModelConfig c = micro_config(ModelFamily::llama);
  c.rotary_seq_len_interpolation_factor = 4;
  CHECK(c.rope_inv_freq() == rope_inv_freq(4, 10000.0, {RopeScalingType::linear, 4.0}));
  const std::vector<double> x = {0.3, -1.2, 0.7, 2.0};
  std::vector<double> y(4), z(4);
  cpu::rope_forward_from(y.data(), x.data(), 1, 1, 4, 8, std::span<const double>(c.rope_inv_freq()));
  cpu::rope_forward_from(z.data(), x.data(), 1, 1, 4, 2, 10000.0);  // position 8 / 4
  for (size_t i = 0; i < 4; ++i) CHECK(std::abs(y[i] - z[i]) < 1e-14);
}

TEST_CASE("model architectures: Hugging Face configs both ways", "[model][arch][hf]") {
  const auto round_trip = [](ModelConfig c) {
    c.validate();
    const nlohmann::json j = nlohmann::json::parse(hf_json_text(hf_config_json(c, SafetensorsDtype::kF32, {})));
    ModelConfig back = model_config_from_hf(j, "config.json", c.make_vocab_size_divisible_by);
    back.init_std = c.init_std;
    CHECK(back == c);
    return j;
  };
  ModelConfig q2 = qwen2_micro();
  q2.norm_eps = 1e-6;
  q2.rope_theta = 1000000;
  const auto j2 = round_trip(q2);
  CHECK(j2["architectures"][0] == "Qwen2ForCausalLM");
  CHECK(j2["model_type"] == "qwen2");
  CHECK(j2["use_sliding_window"] == false);
  CHECK_FALSE(j2.contains("head_dim"));

  ModelConfig q3 = qwen3_micro();
  q3.norm_eps = 1e-6;
  const auto j3 = round_trip(q3);
  CHECK(j3["architectures"][0] == "Qwen3ForCausalLM");
  CHECK(j3["head_dim"] == 6);
  CHECK(j3["attention_bias"] == false);

  ModelConfig l3 = llama3_micro();
  l3.norm_eps = 1e-6;
  const auto jl = round_trip(l3);
  CHECK(jl["architectures"][0] == "LlamaForCausalLM");
  CHECK(jl["rope_scaling"]["rope_type"] == "llama3");
  CHECK(jl["rope_scaling"]["factor"] == 8.0);
  CHECK(jl["rope_scaling"]["original_max_position_embeddings"] == 16);

  ModelConfig lin = micro_config(ModelFamily::llama);
  lin.norm_eps = 1e-6;
  lin.rotary_seq_len_interpolation_factor = 2;
  CHECK(round_trip(lin)["rope_scaling"]["rope_type"] == "linear");

  // transformers 5 writes rope_theta and the scaling as rope_parameters (per layer type, or one).
  nlohmann::json v5 = jl;
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  v5["rope_parameters"] = jl["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = 10000.0;
  ModelConfig from_v5 = model_config_from_hf(v5, "config.json", 16);
  from_v5.init_std = l3.init_std;
  CHECK(from_v5 == l3);
  v5["rope_parameters"] = {{"full_attention", v5["rope_parameters"]}, {"sliding_attention", v5["rope_parameters"]}};
  CHECK(model_config_from_hf(v5, "config.json", 16).use_rope_scaling);
  v5["rope_parameters"]["sliding_attention"]["rope_theta"] = 1e6;
  CHECK_THAT(input_error_of([&] { model_config_from_hf(v5, "config.json", 16); }),
             ContainsSubstring("rope_parameters"));
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.5}};
  CHECK_THAT(input_error_of([&] { model_config_from_hf(v5, "config.json", 16); }),
             ContainsSubstring("partial_rotary_factor"));
  v5["rope_parameters"].erase("partial_rotary_factor");
  CHECK(model_config_from_hf(v5, "config.json", 16).rope_theta == 1e6);

  // Mistral reads as Llama's layout without biases; a window covering the positions is full
  // attention.
  nlohmann::json m = jl;
  m["architectures"] = {"MistralForCausalLM"};
  m["model_type"] = "mistral";
  m.erase("attention_bias");
  m.erase("mlp_bias");
  m["sliding_window"] = 8;
  const ModelConfig mc = model_config_from_hf(m, "config.json", 16);
  CHECK(mc.use_rope_scaling);
  CHECK_FALSE(mc.use_bias);
  CHECK_FALSE(mc.windowed());
  m["sliding_window"] = nullptr;
  CHECK_NOTHROW(model_config_from_hf(m, "config.json", 16));
  // transformers' sliding_window W sees W keys, the query's own included: Megatron's (W - 1, 0).
  m["sliding_window"] = 4;
  CHECK(model_config_from_hf(m, "config.json", 16).window_size == 3);
  m["sliding_window"] = 1;
  CHECK(model_config_from_hf(m, "config.json", 16).window_size == 0);

  // A window-size exports as MistralForCausalLM's sliding_window, or a Qwen's on all its layers.
  ModelConfig mw = micro_config(ModelFamily::llama);
  mw.norm_eps = 1e-6;
  mw.window_size = 3;
  const auto jm = round_trip(mw);
  CHECK(jm["architectures"][0] == "MistralForCausalLM");
  CHECK(jm["sliding_window"] == 4);
  q2.window_size = 0;
  const auto jq = round_trip(q2);
  CHECK(jq["use_sliding_window"] == true);
  CHECK(jq["sliding_window"] == 1);
  CHECK(jq["max_window_layers"] == 0);
  ModelConfig gpt2_window = micro_config(ModelFamily::gpt2);
  gpt2_window.window_size = 2;
  CHECK_THAT(input_error_of([&] { check_hf_exportable(gpt2_window); }), ContainsSubstring("window-size"));
  // Qwen3's q/k norms have Hugging Face names.
  bool q_norm = false;
  for (const auto& t : hf_tensor_map(q3)) q_norm = q_norm || t.hf_name == "model.layers.1.self_attn.q_norm.weight";
  CHECK(q_norm);
}

TEST_CASE("model architectures: unsupported Hugging Face configs are refused with one line", "[model][arch][hf]") {
  ModelConfig base = micro_config(ModelFamily::llama);
  base.norm_eps = 1e-6;
  const nlohmann::json j = hf_config_json(base, SafetensorsDtype::kF32, {});
  const auto refused = [](nlohmann::json bad) {
    return input_error_of([&] { model_config_from_hf(bad, "dir/config.json", 16); });
  };
  nlohmann::json bad = j;
  bad["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  CHECK_THAT(refused(bad), ContainsSubstring("dir/config.json") && ContainsSubstring("rope_scaling") &&
                               ContainsSubstring("dynamic"));
  bad["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
  CHECK_THAT(refused(bad), ContainsSubstring("rope_scaling") && ContainsSubstring("yarn"));
  bad["rope_scaling"] = {{"type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}};
  CHECK_THAT(refused(bad), ContainsSubstring("high_freq_factor"));
  bad = j;
  bad["model_type"] = "mistral";
  bad["sliding_window"] = 0;
  CHECK_THAT(refused(bad), ContainsSubstring("sliding_window") && ContainsSubstring("at least 1"));
  bad.erase("sliding_window");  // MistralConfig's default window, 4096, covers the 8 positions
  CHECK_FALSE(model_config_from_hf(bad, "config.json", 16).windowed());
  bad["max_position_embeddings"] = 8192;
  CHECK(model_config_from_hf(bad, "config.json", 16).window_size == 4095);
  bad = j;
  bad["model_type"] = "qwen3";
  bad["attention_bias"] = true;
  CHECK_THAT(refused(bad), ContainsSubstring("attention_bias"));
  bad = j;
  bad["model_type"] = "qwen2";
  bad["head_dim"] = 8;
  CHECK_THAT(refused(bad), ContainsSubstring("head_dim"));
  bad = j;
  bad["model_type"] = "qwen2";
  bad["use_sliding_window"] = true;
  bad["sliding_window"] = 4;
  // transformers' Qwen windows the layers from max_window_layers (default 28) on: none of 2 here.
  CHECK_FALSE(model_config_from_hf(bad, "config.json", 16).windowed());
  bad["max_window_layers"] = 0;
  CHECK(model_config_from_hf(bad, "config.json", 16).window_size == 3);
  bad["max_window_layers"] = 1;
  CHECK_THAT(refused(bad), ContainsSubstring("max_window_layers") && ContainsSubstring("share one window"));
  bad["layer_types"] = {"sliding_attention", "full_attention"};
  CHECK_THAT(refused(bad), ContainsSubstring("layer_types"));
  bad["layer_types"] = {"sliding_attention", "sliding_attention"};
  CHECK(model_config_from_hf(bad, "config.json", 16).window_size == 3);
  // Export refuses a combination no architecture has.
  ModelConfig odd = qwen3_micro();
  odd.add_qkv_bias = true;
  CHECK_THAT(input_error_of([&] { check_hf_exportable(odd); }), ContainsSubstring("qk-layernorm"));
}
