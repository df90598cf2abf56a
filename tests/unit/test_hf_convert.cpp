// Hugging Face interchange (lib/convert/hf_*): export then import gives back every tensor, the
// files hold what transformers expects (names, shapes, Conv1D transposes, config.json, shards and
// index), and bad directories are refused with the file named. The real client's check, loading
// our files in PyTorch transformers, is scripts/check-hf-export.sh on a machine that has it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "ckpt/safetensors.hpp"
#include "ckpt/safetensors_floats.hpp"
#include "convert/hf_config.hpp"
#include "convert/hf_export.hpp"
#include "convert/hf_import.hpp"
#include "convert/hf_names.hpp"
#include "core/float16.hpp"
#include "model/gpt.hpp"
#include "ops/cpu/ops.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kVocab = 100;  // padded to 128: the padding rows are dropped on export

ModelConfig tiny_gpt2() {
  ModelConfig c = ModelConfig::preset("tiny");
  c.vocab_size = kVocab;
  c.pad_vocab();
  return c;
}

ModelConfig tiny_llama() {
  ModelConfig c = ModelConfig::preset("tiny-llama");  // GQA (4 heads, 2 KV heads), SwiGLU, untied
  c.vocab_size = kVocab;
  c.pad_vocab();
  return c;
}

// A model's parameters by meg name: the model's initialisation, with the biases and norm weights
// (zeros and ones there) made distinct so that a misplaced one shows.
struct Params {
  ModelConfig config;
  std::vector<ParamTensor> table;
  std::vector<float> flat;

  explicit Params(const ModelConfig& c) : config(c), table(gpt_parameter_table(c)), flat(table_size(table)) {
    gpt_init_parameters(c, table, 1234, flat.data());
    for (const auto& t : table)
      if (t.init == ParamInit::zeros || t.init == ParamInit::ones)
        for (size_t i = 0; i < t.numel; ++i) flat[t.offset + i] += 0.001f * float((i * 7 + t.offset) % 97);
  }
  const ParamTensor& find(const std::string& name) const {
    for (const auto& t : table)
      if (t.name == name) return t;
    FAIL("no tensor " << name);
    return table.front();
  }
  std::vector<float> tensor(const std::string& name) const {
    const ParamTensor& t = find(name);
    return {flat.begin() + long(t.offset), flat.begin() + long(t.offset + t.numel)};
  }
  MegTensorSource source() const {
    return [this](const std::string& name, std::vector<float>& values) { values = tensor(name); };
  }
  float at(const std::string& name, size_t row, size_t col) const {
    const ParamTensor& t = find(name);
    return flat[t.offset + row * size_t(t.shape[1]) + col];
  }
};

bool is_vocab_tensor(const std::string& name) {
  return name == "embedding.word_embeddings.weight" || name == "output_layer.weight";
}

// Every tensor READER gives equals ROUND(original) on the real vocabulary rows; padding rows are 0.
template <typename Round>
void check_round_trip(const Params& p, const HfReader& reader, Round round) {
  REQUIRE(reader.tensors().size() == p.table.size());
  for (const auto& t : p.table) {
    INFO(t.name);
    const std::vector<float> got = reader.tensor(t.name), want = p.tensor(t.name);
    REQUIRE(got.size() == want.size());
    const size_t real = is_vocab_tensor(t.name) ? size_t(kVocab) * size_t(t.shape[1]) : want.size();
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const float expect = i < real ? round(want[i]) : 0.0f;
      if (std::memcmp(&got[i], &expect, sizeof(float)) != 0) ++bad;
    }
    CHECK(bad == 0);
  }
}

float identity(float x) { return x; }

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }

// Rewrites the safetensors file PATH with tensor NAME replaced by one of SHAPE (zeros), or dropped
// when SHAPE is empty.
void rewrite_tensor(const std::string& path, const std::string& name, const std::vector<uint64_t>& shape) {
  std::vector<std::vector<uint8_t>> keep;
  std::vector<SafetensorsInput> inputs;
  {
    SafetensorsFile f(path);
    for (const auto& t : f.tensors()) {
      if (t.name == name && shape.empty()) continue;
      const bool replace = t.name == name;
      uint64_t n = dtype_size(t.dtype);
      for (uint64_t d : replace ? shape : t.shape) n *= d;
      keep.emplace_back(replace ? std::vector<uint8_t>(n) : std::vector<uint8_t>(t.bytes.begin(), t.bytes.end()));
      inputs.push_back({t.name, t.dtype, replace ? shape : t.shape, nullptr});
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) inputs[i].data = keep[i].data();
  write_safetensors(path, inputs, {{"format", "pt"}});
}

}  // namespace

TEST_CASE("bf16 and fp16 conversions round to nearest even and widen exactly", "[hf]") {
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(bits_float(0x3f808000u)) == 0x3f80);  // tie, to even
  CHECK(float_to_bf16(bits_float(0x3f818000u)) == 0x3f82);  // tie, to even (up)
  CHECK(float_to_bf16(bits_float(0x3f808001u)) == 0x3f81);
  CHECK(float_to_fp16(1.0f) == 0x3c00);
  CHECK(float_to_fp16(65504.0f) == 0x7bff);
  CHECK(float_to_fp16(65519.0f) == 0x7bff);
  CHECK(float_to_fp16(65520.0f) == 0x7c00);               // rounds past the largest: infinity
  CHECK(float_to_fp16(-0x1p-24f) == 0x8001);               // smallest subnormal
  CHECK(float_to_fp16(0x1p-25f) == 0x0000);                // tie between 0 and it: to even
  CHECK(float_to_fp16(0x1.8p-25f) == 0x0001);
  CHECK(float_to_fp16(0x1.8p-24f) == 0x0002);              // tie between 1 and 2 units: to even
  CHECK(float_to_fp16(1.0f / 3) == 0x3555);
  CHECK(std::isnan(fp16_to_float(float_to_fp16(NAN))));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  // Every 16-bit pattern but NaN survives widening and narrowing again.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    if ((h & 0x7fff) <= 0x7c00) REQUIRE(float_to_fp16(fp16_to_float(bits)) == bits);
    if ((h & 0x7fff) <= 0x7f80) REQUIRE(float_to_bf16(bf16_to_float(bits)) == bits);
  }
}

TEST_CASE("meg's RoPE is transformers' rotate_half: q and k rows need no permutation", "[hf]") {
  // transformers' Llama, literally: inv_freq = 1 / theta^(arange(0, HS, 2) / HS);
  // emb = cat(freqs, freqs); q_embed = q * cos(emb) + rotate_half(q) * sin(emb) with
  // rotate_half(x) = cat(-x[HS/2:], x[:HS/2]).
  const int T = 5, NH = 2, HS = 8;
  const double theta = 10000;
  std::vector<double> x(size_t(T) * NH * HS), ours(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * double(i) + 1.0);
  cpu::rope_forward(ours.data(), x.data(), 1, T, NH, HS, theta);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < NH; ++h) {
      const double* q = &x[(size_t(t) * NH + h) * HS];
      for (int d = 0; d < HS; ++d) {
        const int i = d % (HS / 2);
        const double freq = double(t) / std::pow(theta, double(2 * i) / HS);
        const double rotated = d < HS / 2 ? -q[d + HS / 2] : q[d - HS / 2];
        const double want = q[d] * std::cos(freq) + rotated * std::sin(freq);
        CHECK(std::abs(ours[(size_t(t) * NH + h) * HS + d] - want) < 1e-12);
      }
    }
}

TEST_CASE("GPT-2 exports as GPT2LMHeadModel and imports back bit-identical", "[hf]") {
  TempDir tmp;
  const Params p(tiny_gpt2());
  const std::string dir = tmp.path("gpt2-hf");
  const HfExportSummary summary = export_hf(p.config, p.source(), dir);
  CHECK(summary.files == std::vector<std::string>{"config.json", "generation_config.json", "model.safetensors"});
  CHECK(!fs::exists(dir + "/model.safetensors.index.json"));

  const auto config = read_json(dir + "/config.json");
  CHECK(config["architectures"] == nlohmann::json{"GPT2LMHeadModel"});
  CHECK(config["model_type"] == "gpt2");
  CHECK(config["n_embd"] == 64);
  CHECK(config["n_layer"] == 2);
  CHECK(config["n_head"] == 4);
  CHECK(config["n_positions"] == 64);
  CHECK(config["n_ctx"] == 64);
  CHECK(config["n_inner"].is_null());  // 4 * n_embd
  CHECK(config["vocab_size"] == kVocab);  // the real vocabulary, not the padded 128
  CHECK(config["layer_norm_epsilon"] == 1e-5);
  CHECK(config["activation_function"] == "gelu_new");
  CHECK(config["tie_word_embeddings"] == true);
  CHECK(config["torch_dtype"] == "float32");

  SafetensorsFile f(dir + "/model.safetensors");
  CHECK(f.metadata() == SafetensorsMetadata{{"format", "pt"}});
  CHECK(!f.contains("lm_head.weight"));  // tied: transformers does not store it
  CHECK(f.tensor("transformer.wte.weight").shape == std::vector<uint64_t>{kVocab, 64});
  CHECK(f.tensor("transformer.wpe.weight").shape == std::vector<uint64_t>{64, 64});
  // Conv1D weights are [in, out]: c_attn[i][j] is meg's linear_qkv[j][i].
  const SafetensorsTensor& c_attn = f.tensor("transformer.h.1.attn.c_attn.weight");
  REQUIRE(c_attn.shape == std::vector<uint64_t>{64, 192});
  const std::vector<float> c_attn_values = decode_floats(c_attn, f.path());
  CHECK(c_attn_values[5 * 192 + 130] == p.at("decoder.layers.1.self_attention.linear_qkv.weight", 130, 5));
  const SafetensorsTensor& c_fc = f.tensor("transformer.h.0.mlp.c_fc.weight");
  CHECK(c_fc.shape == std::vector<uint64_t>{64, 256});
  CHECK(decode_floats(c_fc, f.path())[3 * 256 + 200] == p.at("decoder.layers.0.mlp.linear_fc1.weight", 200, 3));
  CHECK(f.tensor("transformer.h.0.mlp.c_proj.weight").shape == std::vector<uint64_t>{256, 64});
  CHECK(f.tensor("transformer.h.0.attn.c_attn.bias").shape == std::vector<uint64_t>{192});
  CHECK(f.tensors().size() == 2 + 2 * 12 + 2);

  const HfReader reader(dir);
  CHECK(reader.config() == p.config);
  CHECK(reader.stored_dtype() == SafetensorsDtype::kF32);
  check_round_trip(p, reader, identity);
}

TEST_CASE("Llama exports as LlamaForCausalLM and imports back bit-identical", "[hf]") {
  TempDir tmp;
  const Params p(tiny_llama());
  const std::string dir = tmp.path("llama-hf");
  export_hf(p.config, p.source(), dir);

  const auto config = read_json(dir + "/config.json");
  CHECK(config["architectures"] == nlohmann::json{"LlamaForCausalLM"});
  CHECK(config["model_type"] == "llama");
  CHECK(config["hidden_size"] == 64);
  CHECK(config["intermediate_size"] == 176);
  CHECK(config["num_hidden_layers"] == 2);
  CHECK(config["num_attention_heads"] == 4);
  CHECK(config["num_key_value_heads"] == 2);
  CHECK(config["max_position_embeddings"] == 64);
  CHECK(config["rms_norm_eps"] == 1e-5);
  CHECK(config["rope_theta"] == 500000.0);
  CHECK(config["vocab_size"] == kVocab);
  CHECK(config["tie_word_embeddings"] == false);
  CHECK(config["hidden_act"] == "silu");

  SafetensorsFile f(dir + "/model.safetensors");
  CHECK(f.tensor("lm_head.weight").shape == std::vector<uint64_t>{kVocab, 64});
  CHECK(f.tensor("model.embed_tokens.weight").shape == std::vector<uint64_t>{kVocab, 64});
  // q, k, v are linear_qkv's rows in order (64 query rows, then 32 key and 32 value rows).
  CHECK(f.tensor("model.layers.0.self_attn.q_proj.weight").shape == std::vector<uint64_t>{64, 64});
  const SafetensorsTensor& k = f.tensor("model.layers.0.self_attn.k_proj.weight");
  REQUIRE(k.shape == std::vector<uint64_t>{32, 64});
  CHECK(decode_floats(k, f.path())[7 * 64 + 9] == p.at("decoder.layers.0.self_attention.linear_qkv.weight", 64 + 7, 9));
  const SafetensorsTensor& v = f.tensor("model.layers.0.self_attn.v_proj.weight");
  CHECK(decode_floats(v, f.path())[31 * 64 + 63] == p.at("decoder.layers.0.self_attention.linear_qkv.weight", 127, 63));
  // gate_proj and up_proj are linear_fc1's two halves.
  const SafetensorsTensor& up = f.tensor("model.layers.1.mlp.up_proj.weight");
  REQUIRE(up.shape == std::vector<uint64_t>{176, 64});
  CHECK(decode_floats(up, f.path())[2 * 64 + 1] == p.at("decoder.layers.1.mlp.linear_fc1.weight", 176 + 2, 1));
  CHECK(f.tensor("model.layers.1.mlp.down_proj.weight").shape == std::vector<uint64_t>{64, 176});
  CHECK(f.tensors().size() == 1 + 2 * 9 + 2);

  const HfReader reader(dir);
  CHECK(reader.config() == p.config);
  check_round_trip(p, reader, identity);
}

TEST_CASE("BF16 and F16 exports hold the rounded values, which import widens exactly", "[hf]") {
  TempDir tmp;
  const Params p(tiny_llama());
  HfExportOptions o;
  o.dtype = SafetensorsDtype::kBF16;
  export_hf(p.config, p.source(), tmp.path("bf16"), o);
  CHECK(read_json(tmp.path("bf16/config.json"))["torch_dtype"] == "bfloat16");
  const HfReader bf16(tmp.path("bf16"));
  CHECK(bf16.stored_dtype() == SafetensorsDtype::kBF16);
  check_round_trip(p, bf16, [](float x) { return bf16_to_float(float_to_bf16(x)); });

  o.dtype = SafetensorsDtype::kF16;
  export_hf(p.config, p.source(), tmp.path("f16"), o);
  check_round_trip(p, HfReader(tmp.path("f16")), [](float x) { return fp16_to_float(float_to_fp16(x)); });
}

TEST_CASE("past the shard size, exports are sharded with an index as transformers writes them", "[hf]") {
  TempDir tmp;
  const Params p(tiny_gpt2());
  HfExportOptions o;
  o.max_shard_bytes = 70000;  // a c_fc weight (65536 bytes) fits, two do not
  const std::string dir = tmp.path("sharded");
  const HfExportSummary summary = export_hf(p.config, p.source(), dir, o);

  const auto index = read_json(dir + "/model.safetensors.index.json");
  const auto& weight_map = index["weight_map"];
  std::map<std::string, uint64_t> shard_bytes;
  uint64_t total = 0;
  for (const auto& m : hf_tensor_map(p.config)) {
    INFO(m.hf_name);
    REQUIRE(weight_map.contains(m.hf_name));
    shard_bytes[weight_map[m.hf_name].get<std::string>()] += m.numel() * 4;
    total += m.numel() * 4;
  }
  CHECK(weight_map.size() == hf_tensor_map(p.config).size());
  CHECK(index["metadata"]["total_size"] == total);
  CHECK(summary.tensor_bytes == total);
  REQUIRE(shard_bytes.size() > 2);
  const size_t n = shard_bytes.size();
  size_t i = 0;
  for (const auto& [file, bytes] : shard_bytes) {
    CHECK(file == fmt::format("model-{:05d}-of-{:05d}.safetensors", ++i, n));
    CHECK(bytes <= o.max_shard_bytes);
    CHECK(SafetensorsFile(dir + "/" + file).metadata() == SafetensorsMetadata{{"format", "pt"}});
  }
  // State-dict order fills the shards: the embeddings open the first one.
  CHECK(weight_map["transformer.wte.weight"] == fmt::format("model-00001-of-{:05d}.safetensors", n));
  CHECK(weight_map["transformer.ln_f.bias"] == fmt::format("model-{:05d}-of-{:05d}.safetensors", n, n));
  CHECK(!fs::exists(dir + "/model.safetensors"));

  check_round_trip(p, HfReader(dir), identity);
}

TEST_CASE("a tensor larger than the shard size gets a shard of its own", "[hf]") {
  TempDir tmp;
  const Params p(tiny_gpt2());
  HfExportOptions o;
  o.max_shard_bytes = 20000;  // smaller than the embedding (102400 bytes)
  export_hf(p.config, p.source(), tmp.path("out"), o);
  const auto index = read_json(tmp.path("out/model.safetensors.index.json"));
  const std::string wte_file = index["weight_map"]["transformer.wte.weight"];
  CHECK(SafetensorsFile(tmp.path("out/" + wte_file)).tensors().size() == 1);
  check_round_trip(p, HfReader(tmp.path("out")), identity);
}

TEST_CASE("tokenizer files are copied under transformers' names", "[hf]") {
  TempDir tmp;
  SECTION("SentencePiece") {
    ModelConfig c = tiny_llama();
    c.vocab_size = 4000;  // at least the fixture tokenizer's vocabulary
    c.pad_vocab();
    const Params p(c);
    HfExportOptions o;
    o.tokenizer = std::string(MEG_TEST_DATA) + "/megatron/fortunes_spm.model";
    const auto summary = export_hf(c, p.source(), tmp.path("spm"), o);
    CHECK(read_file(tmp.path("spm/tokenizer.model")) == read_file(o.tokenizer));
    CHECK(std::count(summary.files.begin(), summary.files.end(), "tokenizer.model") == 1);
    CHECK(read_json(tmp.path("spm/generation_config.json")).contains("eos_token_id"));
  }
  SECTION("GPT-2 byte-level BPE") {
    ModelConfig c = tiny_gpt2();
    c.num_layers = 1;
    c.vocab_size = 50257;
    c.pad_vocab();
    const Params p(c);
    HfExportOptions o;
    o.tokenizer = std::string(MEG_TEST_DATA) + "/gpt2/vocab.json";
    o.merges = std::string(MEG_TEST_DATA) + "/gpt2/merges.txt";
    export_hf(c, p.source(), tmp.path("bpe"), o);
    CHECK(read_file(tmp.path("bpe/vocab.json")) == read_file(o.tokenizer));
    CHECK(read_file(tmp.path("bpe/merges.txt")) == read_file(o.merges));
    const auto config = read_json(tmp.path("bpe/config.json"));
    CHECK(config["eos_token_id"] == 50256);
    CHECK(config["bos_token_id"] == 50256);
  }
  SECTION("more tokens than the model's vocabulary") {
    const Params p(tiny_llama());
    HfExportOptions o;
    o.tokenizer = std::string(MEG_TEST_DATA) + "/megatron/fortunes_spm.model";
    CHECK_THAT(input_error_of([&] { export_hf(p.config, p.source(), tmp.path("small"), o); }),
               ContainsSubstring("fortunes_spm.model") && ContainsSubstring("more than the model's vocabulary"));
    CHECK(!fs::exists(tmp.path("small")));
  }
}

TEST_CASE("export refuses what transformers cannot hold, and a directory in use", "[hf]") {
  TempDir tmp;
  ModelConfig c = tiny_gpt2();
  c.use_bias = false;
  const Params p(c);
  CHECK_THAT(input_error_of([&] { export_hf(c, p.source(), tmp.path("x")); }), ContainsSubstring("use-bias false"));
  CHECK(!fs::exists(tmp.path("x")));

  const Params q(tiny_gpt2());
  fs::create_directories(tmp.path("busy"));
  write_file(tmp.path("busy/README"), "mine\n");
  CHECK_THAT(input_error_of([&] { export_hf(q.config, q.source(), tmp.path("busy")); }), ContainsSubstring("not empty"));
  fs::create_directories(tmp.path("empty"));
  export_hf(q.config, q.source(), tmp.path("empty"));  // an empty directory is taken
  CHECK(fs::exists(tmp.path("empty/model.safetensors")));
}

TEST_CASE("import accepts OpenAI's unprefixed GPT-2 names and old buffers", "[hf]") {
  TempDir tmp;
  const Params p(tiny_gpt2());
  const std::string dir = tmp.path("gpt2");
  export_hf(p.config, p.source(), dir);
  // Rename every tensor without "transformer." and add the attention-mask buffer old files held.
  std::vector<std::vector<uint8_t>> keep;
  std::vector<SafetensorsInput> inputs;
  {
    SafetensorsFile f(dir + "/model.safetensors");
    for (const auto& t : f.tensors()) {
      keep.emplace_back(t.bytes.begin(), t.bytes.end());
      inputs.push_back({t.name.substr(t.name.starts_with("transformer.") ? 12 : 0), t.dtype, t.shape, nullptr});
    }
    keep.emplace_back(64 * 64 * 4);
    inputs.push_back({"h.0.attn.bias", SafetensorsDtype::kF32, {1, 1, 64, 64}, nullptr});
  }
  for (size_t i = 0; i < inputs.size(); ++i) inputs[i].data = keep[i].data();
  write_safetensors(dir + "/model.safetensors", inputs, {{"format", "pt"}});
  check_round_trip(p, HfReader(dir), identity);
}

TEST_CASE("bad Hugging Face directories are refused naming the file", "[hf]") {
  TempDir tmp;
  const Params p(tiny_llama());
  const std::string dir = tmp.path("m");
  export_hf(p.config, p.source(), dir);
  const std::string file = dir + "/model.safetensors";

  SECTION("truncated safetensors") {
    const std::string bytes = read_file(file);
    write_file(file, bytes.substr(0, bytes.size() - 100));
    CHECK_THAT(input_error_of([&] { HfReader r(dir); }), ContainsSubstring("model.safetensors"));
  }
  SECTION("a tensor of the wrong shape") {
    rewrite_tensor(file, "model.layers.1.self_attn.k_proj.weight", {16, 64});
    CHECK_THAT(input_error_of([&] { HfReader r(dir); }),
               ContainsSubstring("model.safetensors") && ContainsSubstring("model.layers.1.self_attn.k_proj.weight") &&
                   ContainsSubstring("[16, 64]") && ContainsSubstring("[32, 64]"));
  }
  SECTION("a missing tensor") {
    rewrite_tensor(file, "model.norm.weight", {});
    CHECK_THAT(input_error_of([&] { HfReader r(dir); }),
               ContainsSubstring("model.safetensors") && ContainsSubstring("model.norm.weight is missing"));
  }
  SECTION("an unexpected tensor (config and weights disagree)") {
    rewrite_tensor(file, "lm_head.weight", {});
    auto config = read_json(dir + "/config.json");
    config["tie_word_embeddings"] = true;
    config["num_hidden_layers"] = 1;
    write_file(dir + "/config.json", config.dump());
    CHECK_THAT(input_error_of([&] { HfReader r(dir); }),
               ContainsSubstring("model.safetensors") && ContainsSubstring("unexpected tensor model.layers.1."));
  }
  SECTION("an integer tensor") {
    rewrite_tensor(file, "model.norm.weight", {});
    SafetensorsFile f(file);
    std::vector<SafetensorsInput> inputs;
    for (const auto& t : f.tensors()) inputs.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
    const std::vector<int32_t> ints(64);
    inputs.push_back({"model.norm.weight", SafetensorsDtype::kI32, {64}, ints.data()});
    write_safetensors(dir + "/other.safetensors", inputs);
    fs::rename(dir + "/other.safetensors", file);
    CHECK_THAT(input_error_of([&] { HfReader r(dir); }),
               ContainsSubstring("model.safetensors") && ContainsSubstring("dtype I32"));
  }
  SECTION("unknown architecture") {
    auto config = read_json(dir + "/config.json");
    config["model_type"] = "falcon";
    write_file(dir + "/config.json", config.dump());
    CHECK_THAT(input_error_of([&] { HfReader r(dir); }),
               ContainsSubstring("config.json") && ContainsSubstring("model_type") && ContainsSubstring("falcon"));
  }
  SECTION("RoPE scaling meg does not model") {
    auto config = read_json(dir + "/config.json");
    config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0}};
    write_file(dir + "/config.json", config.dump());
    CHECK_THAT(input_error_of([&] { HfReader r(dir); }),
               ContainsSubstring("config.json") && ContainsSubstring("rope_scaling"));
  }
  SECTION("a missing size field") {
    auto config = read_json(dir + "/config.json");
    config.erase("hidden_size");
    write_file(dir + "/config.json", config.dump());
    CHECK_THAT(input_error_of([&] { HfReader r(dir); }),
               ContainsSubstring("config.json") && ContainsSubstring("key 'hidden_size' is missing"));
  }
  SECTION("no weights") {
    fs::remove(file);
    CHECK_THAT(input_error_of([&] { HfReader r(dir); }), ContainsSubstring("model.safetensors.index.json"));
  }
}

TEST_CASE("bad indexes of sharded checkpoints are refused naming the index", "[hf]") {
  TempDir tmp;
  const Params p(tiny_gpt2());
  HfExportOptions o;
  o.max_shard_bytes = 70000;
  const std::string dir = tmp.path("s");
  export_hf(p.config, p.source(), dir, o);
  const std::string index_path = dir + "/model.safetensors.index.json";
  auto index = read_json(index_path);

  SECTION("a missing shard file") {
    index["weight_map"]["transformer.ln_f.weight"] = "model-00099-of-00099.safetensors";
    write_file(index_path, index.dump());
    CHECK_THAT(input_error_of([&] { HfReader r(dir); }),
               ContainsSubstring("model.safetensors.index.json") && ContainsSubstring("model-00099-of-00099") &&
                   ContainsSubstring("does not exist"));
  }
  SECTION("a tensor placed in the wrong shard") {
    index["weight_map"]["transformer.ln_f.weight"] = index["weight_map"]["transformer.wte.weight"];
    write_file(index_path, index.dump());
    CHECK_THAT(input_error_of([&] { HfReader r(dir); }),
               ContainsSubstring("has no tensor transformer.ln_f.weight") && ContainsSubstring("index.json"));
  }
  SECTION("a tensor the index lacks") {
    index["weight_map"].erase("transformer.h.1.ln_2.bias");
    write_file(index_path, index.dump());
    CHECK_THAT(input_error_of([&] { HfReader r(dir); }),
               ContainsSubstring("index.json") && ContainsSubstring("transformer.h.1.ln_2.bias is missing"));
  }
  SECTION("not JSON") {
    write_file(index_path, "{\"weight_map\": ");
    CHECK_THAT(input_error_of([&] { HfReader r(dir); }), ContainsSubstring("index.json:1:16: not valid JSON"));
  }
  SECTION("a truncated shard") {
    const std::string shard = dir + "/" + index["weight_map"]["transformer.h.0.ln_1.weight"].get<std::string>();
    const std::string bytes = read_file(shard);
    write_file(shard, bytes.substr(0, bytes.size() / 2));
    CHECK_THAT(input_error_of([&] { HfReader r(dir); }), ContainsSubstring(fs::path(shard).filename().string()));
  }
}

TEST_CASE("import pads the vocabulary for the tensor-parallel size asked for", "[hf]") {
  TempDir tmp;
  const Params p(tiny_gpt2());
  export_hf(p.config, p.source(), tmp.path("m"));
  HfImportOptions o;
  o.tp = 4;
  const HfReader reader(tmp.path("m"), o);
  CHECK(reader.config().padded_vocab_size == 512);
  const std::vector<float> wte = reader.tensor("embedding.word_embeddings.weight");
  REQUIRE(wte.size() == 512 * 64);
  const std::vector<float> want = p.tensor("embedding.word_embeddings.weight");
  CHECK(std::equal(wte.begin(), wte.begin() + kVocab * 64, want.begin()));
  CHECK(std::all_of(wte.begin() + kVocab * 64, wte.end(), [](float x) { return x == 0.0f; }));
}
