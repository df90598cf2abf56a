// The MoE settings: moe-layer-freq, validation, the JSON record and the presets.
#include <string>
#include <vector>

#include "catch.hpp"
#include "test_util.hpp"
#include "model/config.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("moe config: moe-layer-freq's integer and list forms", "[moe]") {
  using V = std::vector<bool>;
  CHECK(parse_layer_freq("1", 3, "t") == V{true, true, true});
  CHECK(parse_layer_freq("2", 5, "t") == V{true, false, true, false, true});
  CHECK(parse_layer_freq("[1,0,1]", 3, "t") == V{true, false, true});
  CHECK(parse_layer_freq("([0]*3+[1]*2)", 5, "t") == V{false, false, false, true, true});
  CHECK(parse_layer_freq("([1]*2+[0]*1)*2", 6, "t") == V{true, true, false, true, true, false});
  CHECK(parse_layer_freq("'([1]*4)'", 4, "t") == V{true, true, true, true});
  CHECK(parse_layer_freq(" [ 0 , 1 ] ", 2, "t") == V{false, true});

  const auto refused = [](const std::string& freq, int64_t blocks) {
    return input_error_of([&] { parse_layer_freq(freq, blocks, "m.json"); });
  };
  CHECK_THAT(refused("0", 2), ContainsSubstring("m.json: moe-layer-freq 0 must be at least 1"));
  CHECK_THAT(refused("[1,0]", 3), ContainsSubstring("has 2 entries for 3 blocks"));
  CHECK_THAT(refused("[1,2]", 2), ContainsSubstring("a layer flag is 0 (dense) or 1 (MoE)"));
  CHECK_THAT(refused("list(range(2))", 2), ContainsSubstring("expected '[' or '('"));
  CHECK_THAT(refused("([1]*2", 2), ContainsSubstring("expected ')'"));
  CHECK_THAT(refused("[1]*2-[1]", 2), ContainsSubstring("unexpected '-'"));
  CHECK_THAT(refused("[1]*", 2), ContainsSubstring("expected a number"));
}

TEST_CASE("moe config: the layer pattern, the record and old records", "[moe]") {
  ModelConfig c = ModelConfig::preset("tiny-moe");
  c.vocab_size = 100;
  c.pad_vocab();
  c.moe.layer_freq = "[0,1]";
  c.moe.expert_capacity_factor = 1.25;
  c.moe.token_drop_policy = MoeDropPolicy::position;
  c.validate();
  CHECK(c.layer_pattern() == "*-*E");
  const auto j = c.to_json();
  CHECK(j["num-experts"] == 4);
  CHECK(j["moe-expert-capacity-factor"] == 1.25);
  CHECK(j["moe-router-topk-scaling-factor"].is_null());
  CHECK(j["hybrid-layer-pattern"] == "*-*E");
  const ModelConfig back = ModelConfig::from_json(j);
  CHECK(back == c);
  CHECK(back.hybrid_layer_pattern.empty());  // it follows moe-layer-freq

  // A dense model writes no MoE keys; a record without them is dense.
  const ModelConfig dense = ModelConfig::preset("llama-8b");
  CHECK(!dense.to_json().contains("num-experts"));
  CHECK(!ModelConfig::from_json(dense.to_json()).moe.enabled());
}

TEST_CASE("moe config: bad settings are refused in one line each", "[moe]") {
  const auto refused = [](const nlohmann::json& keys) {
    nlohmann::json j = {{"preset", "tiny-moe"}, {"vocab-size", 100}};
    j.update(keys);
    return input_error_of([&] { ModelConfig::from_json(j, "m.json").validate("m.json"); });
  };
  CHECK_THAT(refused({{"moe-router-topk", 5}}), ContainsSubstring("moe-router-topk 5 exceeds num-experts 4"));
  CHECK_THAT(refused({{"moe-router-topk", 1}}), ContainsSubstring("use moe-router-pre-softmax"));
  CHECK_THAT(refused({{"moe-router-score-function", "tanh"}}),
             ContainsSubstring("moe-router-score-function 'tanh' is not one of softmax, sigmoid"));
  CHECK_THAT(refused({{"moe-router-enable-expert-bias", true}}),
             ContainsSubstring("needs moe-router-score-function sigmoid"));
  CHECK_THAT(refused({{"moe-router-num-groups", 3}, {"moe-router-group-topk", 1}}),
             ContainsSubstring("num-experts 4 is not divisible by moe-router-num-groups 3"));
  CHECK_THAT(refused({{"moe-router-num-groups", 2}}), ContainsSubstring("needs both"));
  CHECK_THAT(refused({{"moe-router-load-balancing-type", "global_aux_loss"}}),
             ContainsSubstring("global_aux_loss is not implemented"));
  CHECK_THAT(refused({{"moe-router-load-balancing-type", "sinkhorn"}}), ContainsSubstring("is not one of"));
  CHECK_THAT(refused({{"moe-pad-expert-input-to-capacity", true}}),
             ContainsSubstring("needs moe-expert-capacity-factor"));
  CHECK_THAT(refused({{"moe-expert-capacity-factor", -1.0}}), ContainsSubstring("must be positive"));
  CHECK_THAT(refused({{"moe-shared-expert-gate", true}}),
             ContainsSubstring("needs moe-shared-expert-intermediate-size"));
  CHECK_THAT(refused({{"moe-router-dtype", "bf16"}}), ContainsSubstring("moe-router-dtype 'bf16'"));
  CHECK_THAT(refused({{"moe-layer-freq", "[1]"}}), ContainsSubstring("has 1 entries for 2 blocks"));
  CHECK_THAT(refused({{"num-experts", 0}, {"hybrid-layer-pattern", "*E*-"}}),
             ContainsSubstring("has MoE layers 'E', but num-experts is 0"));
  CHECK_THAT(refused({{"moe-aux-loss-coeff", "x"}}), ContainsSubstring("moe-aux-loss-coeff"));
}

TEST_CASE("moe config: the Mixtral and Qwen3-MoE presets have the released models' sizes", "[moe]") {
  // Mixtral-8x7B-v0.1 and Qwen3-30B-A3B as their model cards count them.
  CHECK(ModelConfig::preset("mixtral-8x7b").num_parameters() == 46702792704);
  CHECK(ModelConfig::preset("qwen3-30b-a3b").num_parameters() == 30532122624);
  // Active: 2 of 8 and 8 of 128 experts (Mixtral's 12.9B, Qwen3's 3.3B).
  CHECK(ModelConfig::preset("mixtral-8x7b").active_parameters() == 12879925248);
  CHECK(ModelConfig::preset("qwen3-30b-a3b").active_parameters() == 3353032704);
  CHECK(ModelConfig::preset("llama-8b").active_parameters() == ModelConfig::preset("llama-8b").num_parameters());
}
