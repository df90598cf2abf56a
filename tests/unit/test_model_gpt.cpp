// The CPU decoder model: parameter table, gradients against finite differences (GPT-2 and Llama,
// with and without dropout), dropout keys and modes, float vs double, overfitting one batch,
// causality, loss at initialisation.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "test_util.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "model/config.hpp"
#include "model/gpt.hpp"
#include "ops/cpu/ops.hpp"
#include "gradient_check.hpp"
#include "micro_model.hpp"

using namespace meg;

namespace {

// |a - b| <= rel * |b|.
bool close(double a, double b, double rel) { return std::abs(a - b) <= rel * std::abs(b); }

const char* family_name(ModelFamily f) { return f == ModelFamily::gpt2 ? "gpt2" : "llama"; }

}  // namespace

TEST_CASE("gpt model: the parameter table matches the config's count", "[model]") {
  for (const std::string name : {"tiny", "tiny-llama", "gpt2-124m", "llama-1b"}) {
    INFO(name);
    ModelConfig c = ModelConfig::preset(name);
    if (c.vocab_size == 0) c.set_vocab_from_tokenizer(1000);
    c.validate();
    const auto table = gpt_parameter_table(c);
    size_t offset = 0;
    std::set<std::string> names;
    for (const auto& t : table) {
      CHECK(t.offset == offset);
      size_t n = 1;
      for (int64_t d : t.shape) n *= static_cast<size_t>(d);
      CHECK(t.numel == n);
      offset += t.numel;
      CHECK(names.insert(t.name).second);
      // No weight decay on norms and biases (the 1-D tensors); decay on every matrix.
      CHECK(t.weight_decay == (t.shape.size() == 2));
    }
    CHECK(static_cast<int64_t>(offset) == c.num_parameters());
    CHECK(names.count("embedding.word_embeddings.weight") == 1);
    CHECK(names.count("decoder.layers.0.self_attention.linear_qkv.weight") == 1);
    CHECK(names.count("embedding.position_embeddings.weight") == (c.learned_positions() ? 1 : 0));
    CHECK(names.count("output_layer.weight") == (c.tie_embeddings ? 0 : 1));
  }
  CHECK(gpt_parameter_table(ModelConfig::preset("gpt2-124m")).size() == 2 + 12 * 12 + 2);

  for (const std::string name : {"tiny", "tiny-llama"}) {
    ModelConfig c = ModelConfig::preset(name);
    c.set_vocab_from_tokenizer(1000);
    GptModel<float> m(c);
    CHECK(static_cast<int64_t>(m.num_parameters()) == c.num_parameters());
  }
}

TEST_CASE("gpt model: init follows Megatron and is deterministic", "[model]") {
  const ModelConfig c = micro_config(ModelFamily::gpt2);
  GptModel<double> a(c), b(c);
  a.init(7);
  b.init(7);
  CHECK(std::vector<double>(a.params(), a.params() + a.num_parameters()) ==
        std::vector<double>(b.params(), b.params() + b.num_parameters()));
  b.init(8);
  CHECK(a.params()[0] != b.params()[0]);

  auto stddev = [&](const ParamTensor& t) {
    double s = 0;
    for (size_t i = 0; i < t.numel; ++i) s += a.params()[t.offset + i] * a.params()[t.offset + i];
    return std::sqrt(s / static_cast<double>(t.numel));
  };
  for (const auto& t : a.tensors()) {
    INFO(t.name);
    const double* w = a.params() + t.offset;
    if (t.init == ParamInit::ones) {
      CHECK(w[0] == 1.0);
      CHECK(w[t.numel - 1] == 1.0);
    } else if (t.init == ParamInit::zeros) {
      CHECK(w[0] == 0.0);
      CHECK(w[t.numel - 1] == 0.0);
    }
  }
  // Weights have std init_std = 0.02; the output projections 0.02 / sqrt(2 L) = 0.01.
  CHECK(close(stddev(a.tensor("embedding.word_embeddings.weight")), 0.02, 0.1));
  CHECK(a.tensor("decoder.layers.1.mlp.linear_fc2.weight").init == ParamInit::normal_scaled);
  CHECK(close(stddev(a.tensor("decoder.layers.0.self_attention.linear_qkv.weight")), 0.02, 0.1));
  CHECK(close(stddev(a.tensor("decoder.layers.0.self_attention.linear_proj.weight")), 0.01, 0.15));

  GptModel<float> f(c);
  f.init(7);
  CHECK(f.params()[5] == static_cast<float>(a.params()[5]));
}

namespace {

// The gradients of both families' micro models against finite differences (gradient_check.hpp).
void check_gradients(double p) {
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    INFO(family_name(family) << ", dropout " << p);
    check_gradients_against_differences(micro_config(family), p);
  }
}

}  // namespace

TEST_CASE("gpt model: gradients match finite differences", "[model]") { check_gradients(0.0); }

TEST_CASE("gpt model: gradients with dropout match finite differences", "[model]") {
  check_gradients(0.1);
}

TEST_CASE("gpt model: dropout is keyed, off in eval mode, and a no-op at p = 0", "[model]") {
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    INFO(family_name(family));
    const ModelConfig plain = micro_config(family);
    ModelConfig drop = plain;
    drop.hidden_dropout = 0.1;
    drop.attention_dropout = 0.1;
    const int B = 2, T = 8;
    const auto tokens = random_tokens(B * T, 50, 21);
    const auto targets = random_tokens(B * T, 50, 22);
    // Loss and gradient of one forward/backward with the given config, mode and key.
    auto run = [&](const ModelConfig& c, bool training, uint64_t step) {
      GptModel<double> m(c);
      m.init(3);
      m.set_training(training);
      m.set_dropout_key(99, step, 0);
      m.zero_grad();
      const double loss = m.forward(tokens.data(), targets.data(), B, T);
      m.backward();
      return std::make_pair(loss, std::vector<double>(m.grads(), m.grads() + m.num_parameters()));
    };
    const auto base = run(plain, false, 0);
    // p = 0: training mode changes nothing, whatever the key.
    CHECK(run(plain, true, 0) == base);
    CHECK(run(plain, true, 5) == base);
    // Eval mode: the dropout config gives the no-dropout result.
    CHECK(run(drop, false, 5) == base);
    // Training mode: dropout changes the loss; the same key repeats it exactly, another differs.
    const auto d5 = run(drop, true, 5);
    CHECK(d5.first != base.first);
    CHECK(run(drop, true, 5) == d5);
    const auto d6 = run(drop, true, 6);
    CHECK(d6.first != d5.first);
    CHECK(std::abs(d5.first - base.first) < 0.5);
    // A mode switch on one model, as the trainer does between training and evaluation.
    GptModel<double> m(drop);
    m.init(3);
    m.set_dropout_key(99, 5, 0);
    CHECK(m.forward(tokens.data(), targets.data(), B, T) == d5.first);
    m.set_training(false);
    CHECK(m.forward(tokens.data(), targets.data(), B, T) == base.first);
    m.set_training(true);
    CHECK(m.forward(tokens.data(), targets.data(), B, T) == d5.first);
  }
}

TEST_CASE("gpt model: dropout results are bit-identical with 1 and 4 threads", "[model]") {
  ModelConfig c = micro_config(ModelFamily::gpt2);
  c.seq_length = 64;
  c.hidden_dropout = 0.1;
  c.attention_dropout = 0.1;
  c.validate();
  const int B = 4, T = 64;
  const auto tokens = random_tokens(B * T, 50, 31);
  const auto targets = random_tokens(B * T, 50, 32);
  auto run = [&](unsigned threads) {
    set_num_threads(threads);
    GptModel<float> m(c);
    m.init(4);
    m.set_dropout_key(1, 2, 3);
    m.zero_grad();
    const double loss = m.forward(tokens.data(), targets.data(), B, T);
    m.backward();
    return std::make_pair(loss, std::vector<float>(m.grads(), m.grads() + m.num_parameters()));
  };
  const auto one = run(1);
  const auto four = run(4);
  set_num_threads(0);
  CHECK(one.first == four.first);
  CHECK(one.second == four.second);
}

TEST_CASE("gpt model: float and double forward agree", "[model]") {
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    INFO(family_name(family));
    const ModelConfig c = micro_config(family);
    GptModel<float> mf(c);
    GptModel<double> md(c);
    mf.init(5);
    md.init(5);
    const auto tokens = random_tokens(16, 50, 1);
    const auto targets = random_tokens(16, 50, 2);
    const double lf = mf.forward(tokens.data(), targets.data(), 2, 8);
    const double ld = md.forward(tokens.data(), targets.data(), 2, 8);
    CHECK(close(lf, ld, 1e-4));
  }
}

TEST_CASE("gpt model: loss at initialisation is close to log(vocab)", "[model]") {
  for (const std::string name : {"tiny", "tiny-llama"}) {
    INFO(name);
    ModelConfig c = ModelConfig::preset(name);
    c.set_vocab_from_tokenizer(1000);
    GptModel<float> m(c);
    m.init(42);
    const int B = 2, T = 16;
    const auto tokens = random_tokens(B * T, 1000, 3);
    const auto targets = random_tokens(B * T, 1000, 4);
    const double loss = m.forward(tokens.data(), targets.data(), B, T);
    CHECK(std::abs(loss - std::log(1000.0)) < 0.3);
  }
}

TEST_CASE("gpt model: causal: a later token never changes earlier positions", "[model]") {
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    INFO(family_name(family));
    const ModelConfig c = micro_config(family);
    GptModel<double> m(c);
    m.init(9);
    const int B = 2, T = 8;
    const size_t Vp = static_cast<size_t>(c.padded_vocab_size);
    auto tokens = random_tokens(B * T, 50, 5);
    const auto targets = random_tokens(B * T, 50, 6);
    m.forward(tokens.data(), targets.data(), B, T);
    const std::vector<double> logits(m.logits(), m.logits() + B * T * Vp);
    const std::vector<double> losses(m.losses(), m.losses() + B * T);
    for (int b = 0; b < B; ++b) tokens[b * T + T - 1] = (tokens[b * T + T - 1] + 17) % 50;
    m.forward(tokens.data(), targets.data(), B, T);
    double diff_early = 0, diff_last = 0;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        const size_t row = static_cast<size_t>(b * T + t);
        double d = std::abs(m.losses()[row] - losses[row]);
        for (size_t v = 0; v < Vp; ++v)
          d = std::max(d, std::abs(m.logits()[row * Vp + v] - logits[row * Vp + v]));
        (t == T - 1 ? diff_last : diff_early) = std::max(t == T - 1 ? diff_last : diff_early, d);
      }
    CHECK(diff_early < 1e-12);
    CHECK(diff_last > 1e-6);
  }
}

TEST_CASE("gpt model: a tiny model overfits one batch", "[model]") {
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    INFO(family_name(family));
    ModelConfig c = micro_config(family);
    c.hidden_size = 32;
    c.num_layers = 1;
    c.seq_length = 16;
    c.validate();
    GptModel<float> m(c);
    m.init(1234);
    const int B = 2, T = 16;
    const auto tokens = random_tokens(B * T, 50, 7);
    std::vector<int32_t> targets(tokens.begin() + 1, tokens.end());
    targets.push_back(-1);
    std::vector<float> mom(m.num_parameters(), 0.0f), vel(m.num_parameters(), 0.0f);
    double first = 0, loss = 0;
    int step = 0;
    for (step = 1; step <= 400; ++step) {
      m.zero_grad();
      loss = m.forward(tokens.data(), targets.data(), B, T);
      if (step == 1) first = loss;
      if (loss < 0.1) break;
      m.backward();
      for (const auto& t : m.tensors())
        cpu::adamw_step(m.params() + t.offset, m.grads() + t.offset, mom.data() + t.offset,
                        vel.data() + t.offset, t.numel, 1e-2f, 0.9f, 0.95f, 1e-8f,
                        t.weight_decay ? 0.01f : 0.0f, step);
    }
    INFO("loss " << first << " -> " << loss << " after " << step << " steps");
    CHECK(loss < 0.1);
  }
}

TEST_CASE("gpt model: activations follow the batch shape; bad input is refused", "[model]") {
  const ModelConfig c = micro_config(ModelFamily::gpt2);
  GptModel<double> m(c);
  m.init(2);
  const auto tokens = random_tokens(3 * 8, 50, 8);
  const auto targets = random_tokens(3 * 8, 50, 9);
  // Batch 1 then 3 (buffer grows) then back to 1: the same rows give the same loss.
  const double l1 = m.forward(tokens.data(), targets.data(), 1, 8);
  m.forward(tokens.data(), targets.data(), 3, 8);
  m.backward();
  CHECK(close(m.forward(tokens.data(), targets.data(), 1, 8), l1, 1e-12));
  // A shorter sequence without targets gives logits only.
  m.forward(tokens.data(), nullptr, 1, 4);
  CHECK_THROWS_AS(m.backward(), std::logic_error);

  CHECK_THROWS_AS(m.forward(tokens.data(), targets.data(), 1, 9), InputError);  // > seq_length
  std::vector<int32_t> bad = tokens;
  bad[2] = 50;  // outside the real vocabulary
  CHECK_THROWS_AS(m.forward(bad.data(), targets.data(), 1, 8), InputError);
  CHECK_THROWS_AS(m.backward(), std::logic_error);  // no successful forward with targets
  CHECK_THROWS_AS(m.tensor("no.such.tensor"), std::out_of_range);
}
