// A layer kind defined in the test tree (toy_layer.hpp) runs through the whole model with nothing
// of lib/ but its registration: its tensors join the table under its block's names, the count and
// the checkpoint names follow, its gradients match finite differences (with dropout too), and
// generation with a key/value cache gives the training model's logits. A kind that Hugging Face's
// architecture lacks cannot be exported; a kind without a CPU implementation is refused by name.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gradient_check.hpp"
#include "infer_test_models.hpp"
#include "test_util.hpp"
#include "toy_model.hpp"
#include "convert/hf_names.hpp"
#include "infer/cpu_inference_model.hpp"
#include "model/gpt.hpp"
#include "model/layer_spec.hpp"
#include "model/param_table.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("layer kinds: a test's kind takes its own blocks in the table", "[model]") {
  const ModelConfig c = toy::toy_config();
  const std::vector<LayerSpec> layers = c.layers();
  REQUIRE(layers.size() == 6);
  CHECK(layers[0] == LayerSpec{'T', 0});
  CHECK(layers[1] == LayerSpec{LayerKind::attention, 1});
  CHECK(layers[2] == LayerSpec{LayerKind::mlp, 1});
  CHECK(layers[3] == LayerSpec{'T', 2});
  CHECK(count_blocks(layers) == 4);

  const std::vector<ParamTensor> table = gpt_parameter_table(c);
  CHECK(int64_t(table_size(table)) == c.num_parameters());
  const auto named = [&](const std::string& name) {
    for (const ParamTensor& t : table)
      if (t.name == name) return &t;
    return static_cast<const ParamTensor*>(nullptr);
  };
  const ParamTensor* fc1 = named("decoder.layers.2.toy.linear_fc1.weight");
  REQUIRE(fc1);
  CHECK(fc1->layer == 3);
  CHECK(fc1->tp.split == TpSplit::column_parallel);
  CHECK(named("decoder.layers.2.toy.linear_fc2.weight")->init == ParamInit::normal_scaled);
  CHECK(named("decoder.layers.3.self_attention.linear_qkv.weight")->layer == 4);
  CHECK(named("decoder.layers.3.mlp.linear_fc2.bias")->layer == 5);
  const TensorIndex index(c, table);
  CHECK(index.at(3, TensorRole::fc1_weight) == fc1->offset);
  CHECK(index.at(3, TensorRole::qkv_weight) == kAbsentTensor);

  // The pattern's symbol is known now; the kinds' rules still hold around it.
  CHECK_THAT(input_error_of([&] { parse_layer_pattern("T-", "m.json"); }),
             ContainsSubstring("an MLP layer '-' without its attention layer '*' before it at position 2"));
  CHECK_THAT(input_error_of([&] { parse_layer_pattern("*T-", "m.json"); }), ContainsSubstring("position 2"));
}

TEST_CASE("layer kinds: a test's kind trains: gradients match finite differences", "[model]") {
  check_gradients_against_differences(toy::toy_config(), 0.0);
  check_gradients_against_differences(toy::toy_config(), 0.1);
}

TEST_CASE("layer kinds: generation over a cache gives the training model's logits", "[model][infer]") {
  // A test's kind, and the MoE kind (tiny-moe), whose routing of a token is the same alone.
  ModelConfig moe = ModelConfig::preset("tiny-moe");
  moe.vocab_size = 100;
  moe.pad_vocab();
  for (ModelConfig c : {toy::toy_config(), moe}) {
    INFO(c.layer_pattern());
    c.init_std = 0.2;
    const std::vector<float> params = init_params(c, 5);
    GptModel<float> whole(c);
    std::copy(params.begin(), params.end(), whole.params());
    whole.set_training(false);
    const int T = 8, V = int(c.vocab_size), Vp = int(c.padded_vocab_size);
    const std::vector<int32_t> tokens = random_tokens(T, V, 3);
    whole.forward(tokens.data(), nullptr, 1, T);

    // A prompt of 5 tokens, then one token at a time.
    CpuInferenceModel cached(c, params, 1, T);
    std::vector<float> logits(static_cast<size_t>(V));
    for (int at = 0; at < T;) {
      const int n = at == 0 ? 5 : 1;
      const AppendRequest r{0, std::span<const int32_t>(tokens.data() + at, size_t(n))};
      cached.append(std::span<const AppendRequest>(&r, 1), logits.data());
      at += n;
      INFO("position " << at - 1);
      CHECK(row_error(logits.data(), whole.logits() + size_t(at - 1) * Vp, V) < 1e-5);
    }
  }
}

TEST_CASE("layer kinds: what has no names or no implementation is refused", "[model]") {
  const ModelConfig c = toy::toy_config();
  CHECK_THAT(input_error_of([&] { hf_tensor_map(c); }),
             ContainsSubstring("Hugging Face GPT2LMHeadModel has no toy layer 'T'"));
  register_layer_kind({'U', "untrained", 0, toy::tensors});
  ModelConfig u = c;
  u.hybrid_layer_pattern = "U*-";
  u.num_layers = 2;
  CHECK_THAT(input_error_of([&] { GptModel<float> m(u); }),
             ContainsSubstring("the untrained layer 'U' has no CPU implementation"));
  CHECK_THROWS_AS(register_layer_kind({'U', "again", 0, toy::tensors}), std::logic_error);
}
