// Tensor-parallel sharding of the GPT parameters: what each rank holds, round trips, bad splits.
#include <numeric>
#include <string>
#include <vector>

#include "catch.hpp"
#include "core/error.hpp"
#include "model/config.hpp"
#include "model/gpt.hpp"
#include "model/tensor_parallel.hpp"

using namespace meg;

namespace {

ModelConfig config(const std::string& preset, int64_t heads, int64_t kv_heads) {
  ModelConfig c = ModelConfig::preset(preset);
  c.vocab_size = 300;
  c.hidden_size = 64;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.ffn_hidden_size = c.activation == Activation::swiglu ? 96 : 256;
  c.pad_vocab(2);
  c.validate();
  return c;
}

// Every element numbered by its index in the full flat array.
std::vector<float> numbered(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

const ParamTensor& find(const std::vector<ParamTensor>& table, const std::string& name) {
  for (const auto& t : table)
    if (t.name == name) return t;
  FAIL("no tensor " << name);
  return table.front();
}

}  // namespace

TEST_CASE("tensor-parallel shards hold Megatron's slices", "[parallel][model]") {
  const ModelConfig c = config("tiny-llama", 4, 2);  // HS 16: q 64 rows, k and v 32 rows each
  const auto full_table = gpt_parameter_table(c);
  const auto local_table = gpt_parameter_table(c, 2);
  const auto full = numbered(full_table.back().offset + full_table.back().numel);
  std::vector<float> local(local_table.back().offset + local_table.back().numel);
  shard_parameters(c, 2, 1, full.data(), local.data());

  const auto& fq = find(full_table, "decoder.layers.0.self_attention.linear_qkv.weight");
  const auto& lq = find(local_table, "decoder.layers.0.self_attention.linear_qkv.weight");
  REQUIRE(lq.shape == std::vector<int64_t>{64, 64});  // (64 + 32 + 32) / 2 rows
  const int64_t C = 64;
  // Rank 1's rows: q rows 32..63, then k rows 64 + 16..31, then v rows 96 + 16..31.
  CHECK(local[lq.offset] == full[fq.offset + 32 * C]);
  CHECK(local[lq.offset + 32 * C] == full[fq.offset + (64 + 16) * C]);
  CHECK(local[lq.offset + 48 * C] == full[fq.offset + (96 + 16) * C]);

  const auto& fp = find(full_table, "decoder.layers.1.self_attention.linear_proj.weight");
  const auto& lp = find(local_table, "decoder.layers.1.self_attention.linear_proj.weight");
  REQUIRE(lp.shape == std::vector<int64_t>{64, 32});  // its input columns: heads 2 and 3
  CHECK(local[lp.offset + 5 * 32 + 3] == full[fp.offset + 5 * 64 + 32 + 3]);

  const auto& ff = find(full_table, "decoder.layers.0.mlp.linear_fc1.weight");  // [gate 96; up 96]
  const auto& lf = find(local_table, "decoder.layers.0.mlp.linear_fc1.weight");
  REQUIRE(lf.shape == std::vector<int64_t>{96, 64});
  CHECK(local[lf.offset] == full[ff.offset + 48 * C]);            // gate rows 48..95
  CHECK(local[lf.offset + 48 * C] == full[ff.offset + 144 * C]);  // up rows 96 + 48..95

  const auto& fe = find(full_table, "embedding.word_embeddings.weight");  // vocabulary rows
  const auto& le = find(local_table, "embedding.word_embeddings.weight");
  CHECK(le.shape[0] * 2 == fe.shape[0]);
  CHECK(local[le.offset] == full[fe.offset + le.shape[0] * C]);

  const auto& fn = find(full_table, "decoder.final_layernorm.weight");  // replicated
  const auto& ln = find(local_table, "decoder.final_layernorm.weight");
  CHECK(ln.numel == fn.numel);
  CHECK(local[ln.offset + 7] == full[fn.offset + 7]);
}

TEST_CASE("tensor-parallel shards put back together give the full parameters", "[parallel][model]") {
  for (const std::string preset : {"tiny", "tiny-llama"}) {
    for (const int tp : {1, 2, 4}) {
      INFO(preset << " tp=" << tp);
      const ModelConfig c = config(preset, 4, 4);
      const auto full_table = gpt_parameter_table(c);
      const auto full = numbered(full_table.back().offset + full_table.back().numel);
      const auto local_table = gpt_parameter_table(c, tp);
      const size_t n = local_table.back().offset + local_table.back().numel;
      std::vector<std::vector<float>> shards(static_cast<size_t>(tp), std::vector<float>(n));
      std::vector<const float*> ptrs;
      for (int r = 0; r < tp; ++r) {
        shard_parameters(c, tp, r, full.data(), shards[size_t(r)].data());
        ptrs.push_back(shards[size_t(r)].data());
      }
      std::vector<float> back(full.size(), -1.0f);
      unshard_parameters(c, tp, ptrs, back.data());
      CHECK(back == full);
    }
  }
}

TEST_CASE("tensor parallelism refuses models that do not split", "[parallel][model]") {
  const ModelConfig c = config("tiny-llama", 4, 2);
  CHECK_THROWS_WITH(check_tensor_parallel(c, 4),
                    Catch::Matchers::ContainsSubstring("key/value heads (2) do not divide over 4 ranks"));
  CHECK_THROWS_AS(gpt_parameter_table(c, 3), InputError);
  CHECK_NOTHROW(check_tensor_parallel(c, 2));
}
