// The counter-based initialisation (model/init.hpp): the documented construction, every rank's and
// stage's part equal to its slice of the whole model's, independent of the thread count, the
// distributions Megatron asks for, float against double, and tables that are not the model's.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.hpp"
#include "core/parallel.hpp"
#include "model/config.hpp"
#include "model/gpt.hpp"
#include "model/init.hpp"
#include "model/pipeline.hpp"
#include "model/tensor_parallel.hpp"

using namespace meg;

namespace {

// Restores the default pool size when a test ends, whatever it set.
struct ThreadsGuard {
  ~ThreadsGuard() { set_num_threads(0); }
};

// 4 blocks of width 64 and a vocabulary of 5000 (padded to 5120, so that the embedding spans
// several of the initialisation's tasks). Llama with grouped-query attention (8 heads, 4 KV
// heads) and SwiGLU; TIED gives it a tied embedding, which the last pipeline stage holds too.
ModelConfig config(const std::string& preset, bool tied = false) {
  ModelConfig c = ModelConfig::preset(preset);
  c.num_layers = 4;
  c.vocab_size = 5000;
  c.hidden_size = 64;
  if (c.family == ModelFamily::llama) {
    c.num_heads = 8;
    c.num_kv_heads = 4;
    c.ffn_hidden_size = 96;
    c.tie_embeddings = tied;
  }
  c.pad_vocab(4);
  c.validate();
  return c;
}

size_t size_of(const std::vector<ParamTensor>& table) { return table.back().offset + table.back().numel; }

template <typename F>
std::vector<F> init_full(const ModelConfig& c, uint64_t seed) {
  const auto table = gpt_parameter_table(c);
  std::vector<F> params(size_of(table));
  gpt_init_parameters(c, table, seed, params.data());
  return params;
}

template <typename F>
std::vector<F> init_local(const ModelConfig& c, const std::vector<ParamTensor>& table, int tp, int rank,
                          uint64_t seed) {
  std::vector<F> params(size_of(table));
  gpt_init_local(c, table, tp, rank, seed, params.data());
  return params;
}

const ParamTensor& find(const std::vector<ParamTensor>& table, const std::string& name) {
  for (const auto& t : table)
    if (t.name == name) return t;
  FAIL("no tensor " << name);
  return table.front();
}

struct Moments {
  double mean = 0, std = 0, kurtosis = 0, beyond_two_std = 0;
};

// The sample moments of TENSOR's values, and the fraction of them further than 2 sigma from 0.
Moments moments(const double* params, const ParamTensor& tensor, double sigma) {
  const double* w = params + tensor.offset;
  const double n = static_cast<double>(tensor.numel);
  Moments m;
  double m2 = 0, m4 = 0;
  for (size_t i = 0; i < tensor.numel; ++i) m.mean += w[i] / n;
  for (size_t i = 0; i < tensor.numel; ++i) {
    const double d = w[i] - m.mean;
    m2 += d * d / n;
    m4 += d * d * d * d / n;
    m.beyond_two_std += std::abs(w[i]) > 2 * sigma ? 1 / n : 0;
  }
  m.std = std::sqrt(m2);
  m.kurtosis = m4 / (m2 * m2);
  return m;
}

size_t equal_elements(const double* a, const double* b, size_t n) {
  size_t same = 0;
  for (size_t i = 0; i < n; ++i) same += a[i] == b[i];
  return same;
}

}  // namespace

TEST_CASE("init: the values of the construction documented in init.hpp", "[model]") {
  // Reference values from an independent implementation of init.hpp's description (Python, with
  // Random123's Philox known answers checked): 0.02 z(seed, 0, i) for the word embedding (tensor
  // 0) and 0.01 z(seed, 24, 7) for decoder.layers.1.mlp.linear_fc2.weight (tensor 24, scaled).
  ModelConfig c = ModelConfig::preset("tiny");
  c.set_vocab_from_tokenizer(100);
  const uint64_t seed = 0x0123456789abcdef;
  const auto table = gpt_parameter_table(c);
  REQUIRE(table[24].name == "decoder.layers.1.mlp.linear_fc2.weight");
  const auto params = init_full<double>(c, seed);
  CHECK_THAT(params[0], Catch::Matchers::WithinRel(-0.014269593017585385, 1e-14));
  CHECK_THAT(params[1], Catch::Matchers::WithinRel(0.0019310770435078098, 1e-14));
  CHECK_THAT(params[2], Catch::Matchers::WithinRel(-0.009734104123823785, 1e-14));
  CHECK_THAT(params[table[24].offset + 7], Catch::Matchers::WithinRel(-0.001243145311431022, 1e-14));
}

TEST_CASE("init: every tensor-parallel rank and pipeline stage gets its slice of the whole model", "[model]") {
  struct Case {
    std::string name;
    ModelConfig config;
  };
  for (const Case& k : {Case{"gpt2", config("tiny")}, Case{"llama GQA SwiGLU", config("tiny-llama")},
                        Case{"llama tied", config("tiny-llama", true)}}) {
    const ModelConfig& c = k.config;
    const uint64_t seed = 77;
    const auto full = init_full<float>(c, seed);
    for (const int tp : {1, 2, 4}) {
      const auto tp_table = gpt_parameter_table(c, tp);
      for (int rank = 0; rank < tp; ++rank) {
        std::vector<float> shard(size_of(tp_table));
        shard_parameters(c, tp, rank, full.data(), shard.data());
        CHECK(init_local<float>(c, tp_table, tp, rank, seed) == shard);
        for (const int stages : {2, 4}) {
          for (int s = 0; s < stages; ++s) {
            INFO(k.name << " tp " << tp << " rank " << rank << " stage " << s << " of " << stages);
            const PipelineStage stage{s, stages};
            const auto table = stage_table(c, stage, tp_table);
            std::vector<float> expected(size_of(table));
            copy_stage(tp_table, table, shard.data(), expected.data(), true);
            CHECK(init_local<float>(c, table, tp, rank, seed) == expected);
            if (tp == 1) {  // the model's init() takes the same path
              GptModel<float> model(c, nullptr, stage);
              model.init(seed);
              CHECK(std::vector<float>(model.params(), model.params() + model.num_parameters()) == expected);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("init: a table's tensors in any order, and repeated, get the same values", "[model]") {
  // As in a rank's model chunks, with the tied embedding held by its first and last chunks.
  const ModelConfig c = config("tiny-llama", true);
  const auto tp_table = gpt_parameter_table(c, 2);
  const auto in_order = init_local<float>(c, tp_table, 2, 1, 3);
  std::vector<ParamTensor> shuffled(tp_table.rbegin(), tp_table.rend());
  shuffled.push_back(tp_table.front());
  size_t offset = 0;
  for (auto& t : shuffled) {
    t.offset = offset;
    offset += t.numel;
  }
  const auto values = init_local<float>(c, shuffled, 2, 1, 3);
  for (const auto& t : shuffled) {
    INFO(t.name);
    const auto& original = find(tp_table, t.name);
    CHECK(std::equal(values.begin() + std::ptrdiff_t(t.offset), values.begin() + std::ptrdiff_t(t.offset + t.numel),
                     in_order.begin() + std::ptrdiff_t(original.offset)));
  }
}

TEST_CASE("init: the values do not depend on the number of threads", "[model]") {
  ThreadsGuard guard;
  const ModelConfig c = config("tiny-llama");
  const auto table = gpt_parameter_table(c, 2);
  set_num_threads(1);
  const auto one = init_local<float>(c, table, 2, 1, 5);
  for (const unsigned threads : {2u, 3u, 7u}) {
    INFO(threads << " threads");
    set_num_threads(threads);
    const auto many = init_local<float>(c, table, 2, 1, 5);
    REQUIRE(many.size() == one.size());
    CHECK(std::memcmp(many.data(), one.data(), one.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("init: normal(0, init_std), scaled projections, zeros and ones; seeds and tensors differ", "[model]") {
  ModelConfig c = ModelConfig::preset("tiny");
  c.set_vocab_from_tokenizer(50000);  // a word embedding of 50048 x 64 = 3.2M values
  const auto table = gpt_parameter_table(c);
  const auto a = init_full<double>(c, 1);

  // Within 5 standard errors of a normal sample's: mean sigma/sqrt(n), std sigma/sqrt(2n),
  // kurtosis (3) sqrt(24/n), the fraction beyond 2 sigma (0.0455) sqrt(p(1-p)/n).
  const auto check_normal = [&](const ParamTensor& t, double sigma) {
    INFO(t.name << ": " << t.numel << " values");
    const double n = static_cast<double>(t.numel);
    const Moments m = moments(a.data(), t, sigma);
    CHECK(std::abs(m.mean) < 5 * sigma / std::sqrt(n));
    CHECK(std::abs(m.std / sigma - 1) < 5 / std::sqrt(2 * n));
    CHECK(std::abs(m.kurtosis - 3) < 5 * std::sqrt(24 / n));
    const double p = std::erfc(2 / std::sqrt(2.0));
    CHECK(std::abs(m.beyond_two_std - p) < 5 * std::sqrt(p * (1 - p) / n));
  };
  check_normal(find(table, "embedding.word_embeddings.weight"), 0.02);
  check_normal(find(table, "decoder.layers.1.self_attention.linear_qkv.weight"), 0.02);
  // An output projection: std 0.02 / sqrt(2 L) = 0.01.
  const auto& fc2 = find(table, "decoder.layers.1.mlp.linear_fc2.weight");
  CHECK(fc2.init == ParamInit::normal_scaled);
  check_normal(fc2, 0.01);
  for (const auto& t : table) {
    INFO(t.name);
    const double* w = a.data() + t.offset;
    if (t.init == ParamInit::ones) CHECK(std::all_of(w, w + t.numel, [](double x) { return x == 1; }));
    if (t.init == ParamInit::zeros) CHECK(std::all_of(w, w + t.numel, [](double x) { return x == 0; }));
  }

  // Other seeds (the key's high half too) and other tensors of the same shape share no value.
  const auto& wte = find(table, "embedding.word_embeddings.weight");
  for (const uint64_t other : {uint64_t(2), uint64_t(1) + (uint64_t(1) << 32)}) {
    INFO("seed " << other);
    const auto b = init_full<double>(c, other);
    CHECK(equal_elements(a.data() + wte.offset, b.data() + wte.offset, wte.numel) == 0);
  }
  const auto& qkv0 = find(table, "decoder.layers.0.self_attention.linear_qkv.weight");
  const auto& qkv1 = find(table, "decoder.layers.1.self_attention.linear_qkv.weight");
  CHECK(equal_elements(a.data() + qkv0.offset, a.data() + qkv1.offset, qkv0.numel) == 0);
}

TEST_CASE("init: float is double rounded once", "[model]") {
  const ModelConfig c = config("tiny-llama");
  const auto f = init_full<float>(c, 9);
  const auto d = init_full<double>(c, 9);
  REQUIRE(f.size() == d.size());
  size_t differ = 0;
  for (size_t i = 0; i < f.size(); ++i) differ += f[i] != static_cast<float>(d[i]);
  CHECK(differ == 0);
}

TEST_CASE("init: tables that are not the model's are refused", "[model]") {
  const ModelConfig c = config("tiny-llama");
  const auto full_table = gpt_parameter_table(c);
  const auto tp_table = gpt_parameter_table(c, 2);
  std::vector<float> params(size_of(full_table));
  CHECK_THROWS_AS(gpt_init_local(c, full_table, 2, 0, 1, params.data()), std::invalid_argument);  // not split
  CHECK_THROWS_AS(gpt_init_local(c, tp_table, 2, 2, 1, params.data()), std::invalid_argument);    // no rank 2
  auto renamed = full_table;
  renamed[3].name = "decoder.layers.0.no_such_tensor";
  CHECK_THROWS_AS(gpt_init_parameters(c, renamed, 1, params.data()), std::invalid_argument);
}
