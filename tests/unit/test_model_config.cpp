// Model configuration: presets, vocabulary padding, JSON files and round trips, overrides,
// validation messages, parameter and FLOP counts.
#include <cstdint>
#include <string>

#include "catch.hpp"
#include "core/error.hpp"
#include "model/config.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {

ModelConfig tiny_with_vocab(const std::string& name, int64_t vocab) {
  ModelConfig c = ModelConfig::preset(name);
  c.set_vocab_from_tokenizer(vocab);
  return c;
}

}  // namespace

TEST_CASE("model config: vocabulary padding follows Megatron's rule", "[model]") {
  CHECK(pad_vocab_size(50257) == 50304);
  CHECK(pad_vocab_size(50257, 128, 2) == 50432);  // multiple of 256
  CHECK(pad_vocab_size(50257, 128, 8) == 51200);  // multiple of 1024
  CHECK(pad_vocab_size(128256) == 128256);        // already a multiple of 128
  CHECK(pad_vocab_size(128256, 128, 8) == 129024);
  CHECK(pad_vocab_size(32000, 64, 1) == 32000);
  CHECK(pad_vocab_size(1, 128, 1) == 128);
  CHECK(pad_vocab_size(0) == 0);
  CHECK_THROWS_AS(pad_vocab_size(100, 0, 1), InputError);
  CHECK_THROWS_AS(pad_vocab_size(100, 128, 0), InputError);

  ModelConfig c = ModelConfig::preset("gpt2-124m");
  CHECK(c.padded_vocab_size == 50304);
  c.pad_vocab(4);
  CHECK(c.padded_vocab_size == 50688);
  CHECK(c.padded_vocab_size % 512 == 0);
  c.validate();
}

TEST_CASE("model config: presets have the published shapes", "[model]") {
  for (const auto& name : ModelConfig::preset_names()) {
    ModelConfig c = ModelConfig::preset(name);
    if (c.vocab_size == 0) c.set_vocab_from_tokenizer(1000);
    INFO(name);
    CHECK_NOTHROW(c.validate());
  }

  const ModelConfig g = ModelConfig::preset("gpt2-124m");
  CHECK(g.family == ModelFamily::gpt2);
  CHECK(g.num_layers == 12);
  CHECK(g.hidden_size == 768);
  CHECK(g.num_heads == 12);
  CHECK(g.num_kv_heads == 12);
  CHECK(g.ffn_hidden_size == 3072);
  CHECK(g.seq_length == 1024);
  CHECK(g.vocab_size == 50257);
  CHECK(g.tie_embeddings);
  CHECK(g.use_bias);
  CHECK(g.activation == Activation::gelu_tanh);
  CHECK(g.norm == NormKind::layernorm);
  CHECK(g.norm_eps == 1e-5);
  CHECK(g.init_std == 0.02);
  CHECK(g.hidden_dropout == 0.0);
  CHECK(g.attention_dropout == 0.0);
  CHECK(g.head_size() == 64);

  struct Shape {
    const char* name;
    int64_t layers, hidden, heads;
  };
  for (const Shape& s : {Shape{"gpt2-355m", 24, 1024, 16}, Shape{"gpt2-774m", 36, 1280, 20},
                         Shape{"gpt2-1.5b", 48, 1600, 25}}) {
    const ModelConfig c = ModelConfig::preset(s.name);
    INFO(s.name);
    CHECK(c.num_layers == s.layers);
    CHECK(c.hidden_size == s.hidden);
    CHECK(c.num_heads == s.heads);
    CHECK(c.num_kv_heads == s.heads);
    CHECK(c.ffn_hidden_size == 4 * s.hidden);
    CHECK(c.head_size() == 64);
    CHECK(c.padded_vocab_size == 50304);
  }

  const ModelConfig l1 = ModelConfig::preset("llama-1b");
  CHECK(l1.family == ModelFamily::llama);
  CHECK(l1.num_layers == 16);
  CHECK(l1.hidden_size == 2048);
  CHECK(l1.num_heads == 32);
  CHECK(l1.num_kv_heads == 8);
  CHECK(l1.ffn_hidden_size == 8192);
  CHECK(l1.vocab_size == 128256);
  CHECK(l1.padded_vocab_size == 128256);
  CHECK(l1.rope_theta == 500000.0);
  CHECK(l1.norm_eps == 1e-5);
  CHECK(l1.seq_length == 2048);
  CHECK(l1.tie_embeddings);  // as the released Llama 3.2 1B
  CHECK_FALSE(l1.use_bias);
  CHECK(l1.activation == Activation::swiglu);
  CHECK(l1.norm == NormKind::rmsnorm);

  const ModelConfig l8 = ModelConfig::preset("llama-8b");
  CHECK(l8.num_layers == 32);
  CHECK(l8.hidden_size == 4096);
  CHECK(l8.num_heads == 32);
  CHECK(l8.num_kv_heads == 8);
  CHECK(l8.ffn_hidden_size == 14336);
  CHECK(l8.vocab_size == 128256);
  CHECK(l8.rope_theta == 500000.0);
  CHECK(l8.seq_length == 2048);
  CHECK_FALSE(l8.tie_embeddings);

  const ModelConfig t = ModelConfig::preset("tiny");
  CHECK(t.family == ModelFamily::gpt2);
  CHECK(t.num_layers == 2);
  CHECK(t.hidden_size == 64);
  CHECK(t.num_heads == 4);
  CHECK(t.ffn_hidden_size == 256);
  CHECK(t.seq_length == 64);
  CHECK(t.vocab_size == 0);  // from the tokenizer
  CHECK_THAT(input_error_of([&] { t.validate(); }), ContainsSubstring("vocab-size is not set"));

  const ModelConfig tl = ModelConfig::preset("tiny-llama");
  CHECK(tl.family == ModelFamily::llama);
  CHECK(tl.num_kv_heads == 2);
  CHECK(tl.head_size() == 16);
  CHECK(tl.seq_length == 64);

  const std::string msg = input_error_of([] { ModelConfig::preset("gpt3"); });
  CHECK_THAT(msg, ContainsSubstring("gpt3"));
  CHECK_THAT(msg, ContainsSubstring("gpt2-124m"));
  CHECK_THAT(msg, ContainsSubstring("tiny-llama"));
}

TEST_CASE("model config: vocabulary from the tokenizer", "[model]") {
  ModelConfig c = ModelConfig::preset("tiny");
  c.set_vocab_from_tokenizer(1000);
  CHECK(c.vocab_size == 1000);
  CHECK(c.padded_vocab_size == 1024);
  c.validate();
  c.set_vocab_from_tokenizer(900);  // a smaller tokenizer fits a larger vocabulary
  CHECK(c.vocab_size == 1000);
  CHECK_THAT(input_error_of([&] { c.set_vocab_from_tokenizer(1001); }),
             ContainsSubstring("smaller than the tokenizer"));
  CHECK_THROWS_AS(c.set_vocab_from_tokenizer(0), InputError);
}

TEST_CASE("model config: exact parameter counts", "[model]") {
  // GPT-2 124M: the well-known llm.c figure with the vocabulary padded to 50304.
  {
    const ModelConfig c = ModelConfig::preset("gpt2-124m");
    const int64_t V = 50304, T = 1024, C = 768, L = 12;
    const int64_t per_layer = 2 * C                // ln1
                              + 3 * C * C + 3 * C  // qkv
                              + C * C + C          // attention projection
                              + 2 * C              // ln2
                              + 4 * C * C + 4 * C  // fc
                              + 4 * C * C + C;     // fc_proj
    const int64_t expected = V * C + T * C + L * per_layer + 2 * C;
    CHECK(expected == 124475904);
    CHECK(c.num_parameters() == expected);
  }
  // Llama 3.2 1B: 1,235,814,400 with the tied embedding of the released model; the untied variant
  // adds a [128256, 2048] output layer.
  {
    ModelConfig c = ModelConfig::preset("llama-1b");
    const int64_t V = 128256, C = 2048, L = 16, kv = 8, hs = 64, F = 8192;
    const int64_t per_layer = C                        // rms1
                              + (C + 2 * kv * hs) * C  // qkv
                              + C * C                  // attention projection
                              + C                      // rms2
                              + 2 * F * C              // gate and up
                              + C * F;                 // down
    const int64_t tied = V * C + L * per_layer + C;
    CHECK(tied == 1235814400);
    CHECK(c.num_parameters() == tied);
    c.tie_embeddings = false;
    CHECK(c.num_parameters() == tied + V * C);
    CHECK(tied + V * C == 1498482688);
  }
  // Llama 3 8B (untied): 8,030,261,248 as published.
  {
    const ModelConfig c = ModelConfig::preset("llama-8b");
    const int64_t V = 128256, C = 4096, L = 32, kv = 8, hs = 128, F = 14336;
    const int64_t per_layer = 2 * C + (C + 2 * kv * hs) * C + C * C + 3 * F * C;
    const int64_t expected = 2 * V * C + L * per_layer + C;
    CHECK(expected == 8030261248);
    CHECK(c.num_parameters() == expected);
  }
  // The padded vocabulary is what counts, and tensor-parallel padding changes it.
  {
    ModelConfig c = tiny_with_vocab("tiny", 1000);
    const int64_t C = 64, T = 64, L = 2;
    const int64_t per_layer = 12 * C * C + 13 * C;
    CHECK(c.num_parameters() == 1024 * C + T * C + L * per_layer + 2 * C);
    c.pad_vocab(2);
    CHECK(c.padded_vocab_size == 1024);
    c.pad_vocab(16);
    CHECK(c.padded_vocab_size == 2048);
    CHECK(c.num_parameters() == 2048 * C + T * C + L * per_layer + 2 * C);
  }
  // tiny-llama, grouped-query: qkv is [C + 2 * 2 * 16, C], untied.
  {
    const ModelConfig c = tiny_with_vocab("tiny-llama", 1000);
    const int64_t V = 1024, C = 64, L = 2, F = 176;
    const int64_t per_layer = 2 * C + (C + 64) * C + C * C + 3 * F * C;
    CHECK(c.num_parameters() == 2 * V * C + L * per_layer + C);
  }
}

TEST_CASE("model config: FLOPs per token", "[model]") {
  const ModelConfig c = ModelConfig::preset("gpt2-124m");
  const int64_t N = 124475904;
  CHECK(c.flops_per_token(1024) == 6 * N + 12 * 12 * 768 * 1024);
  CHECK(c.flops_per_token(512) == 6 * N + 12 * 12 * 768 * 512);
  const ModelConfig l = ModelConfig::preset("llama-1b");
  CHECK(l.flops_per_token(2048) == 6 * int64_t{1235814400} + 12 * int64_t{16} * 2048 * 2048);
}

TEST_CASE("model config: JSON round trip", "[model]") {
  for (const auto& name : ModelConfig::preset_names()) {
    ModelConfig c = ModelConfig::preset(name);
    if (c.vocab_size == 0) c.set_vocab_from_tokenizer(777);
    INFO(name);
    const auto j = c.to_json();
    CHECK(j["num-layers"] == c.num_layers);
    CHECK(ModelConfig::from_json(j) == c);
    // And through text, as a checkpoint stores it.
    CHECK(ModelConfig::from_json(nlohmann::json::parse(j.dump(2))) == c);
  }
  // Every field survives, including non-default ones and a TP-padded vocabulary.
  ModelConfig c = ModelConfig::preset("llama-8b");
  c.pad_vocab(8);
  c.norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.tie_embeddings = true;
  c.use_bias = true;
  c.init_std = 0.008;
  c.hidden_dropout = 0.1;
  c.attention_dropout = 0.05;
  c.make_vocab_size_divisible_by = 64;
  const ModelConfig back = ModelConfig::from_json(nlohmann::json::parse(c.to_json().dump()));
  CHECK(back == c);
  CHECK(back.padded_vocab_size == 129024);
  CHECK(c.to_json()["family"] == "llama");
  CHECK(c.to_json()["activation"] == "swiglu");
  CHECK(c.to_json()["norm"] == "rmsnorm");
}

TEST_CASE("model config: window-size, Megatron's (L, R), in JSON and on the command line", "[model][window]") {
  ModelConfig c = tiny_with_vocab("tiny-llama", 500);
  CHECK(c.to_json()["window-size"].is_null());
  CHECK(c.attention_window() == -1);
  c.window_size = 15;
  const auto j = c.to_json();
  CHECK(j["window-size"].dump() == "[15,0]");
  CHECK(ModelConfig::from_json(nlohmann::json::parse(j.dump())) == c);
  // A record written before the key existed: full attention.
  nlohmann::json old = nlohmann::json::parse(j.dump());
  old.erase("window-size");
  CHECK_FALSE(ModelConfig::from_json(old).windowed());
  old["window-size"] = {-1, 0};  // Megatron's infinite window
  CHECK_FALSE(ModelConfig::from_json(old).windowed());
  for (const auto& bad : {nlohmann::json::array({4, 1}), nlohmann::json::array({-2, 0}), nlohmann::json(4),
                          nlohmann::json::array({4})})
    CHECK_THAT(input_error_of([&] {
                 nlohmann::json b = old;
                 b["window-size"] = bad;
                 ModelConfig::from_json(b, "m.json");
               }),
               ContainsSubstring("m.json") && ContainsSubstring("window-size"));

  CHECK(parse_window_size("4095,0", "--window-size") == 4095);
  CHECK(parse_window_size("(7, 0)", "--window-size") == 7);
  CHECK(parse_window_size("3", "--window-size") == 3);
  CHECK(parse_window_size("0", "--window-size") == 0);  // each query sees itself alone
  CHECK(parse_window_size("-1,0", "--window-size") == -1);
  CHECK_THAT(input_error_of([] { parse_window_size("8,8", "--window-size"); }),
             ContainsSubstring("--window-size") && ContainsSubstring("causal"));
  CHECK_THAT(input_error_of([] { parse_window_size("-5", "--window-size"); }),
             ContainsSubstring("--window-size") && ContainsSubstring("at least 0"));
  CHECK_THAT(input_error_of([] { parse_window_size("wide", "--window-size"); }),
             ContainsSubstring("--window-size 'wide'"));
  ModelOverrides o;
  o.window_size = "7,0";
  apply_overrides(c, o);
  CHECK(c.window_size == 7);
}

TEST_CASE("model config: JSON files", "[model]") {
  TempDir dir;
  const std::string path = dir.path("model.json");

  // A whole Llama model from our own keys; family defaults fill the rest.
  write_file(path, R"({"family": "llama", "num-layers": 2, "hidden-size": 128, "num-heads": 8,
                       "num-kv-heads": 2, "ffn-hidden-size": 352, "seq-length": 256,
                       "vocab-size": 32000, "rope-theta": 10000})");
  ModelConfig c = load_model_config(path);
  c.validate();
  CHECK(c.family == ModelFamily::llama);
  CHECK(c.num_layers == 2);
  CHECK(c.num_kv_heads == 2);
  CHECK(c.padded_vocab_size == 32000);
  CHECK(c.rope_theta == 10000.0);
  CHECK_FALSE(c.tie_embeddings);
  CHECK_FALSE(c.use_bias);
  CHECK(c.activation == Activation::swiglu);
  CHECK(c.norm == NormKind::rmsnorm);

  // GPT-2 defaults: NKV = NH, ffn = 4C.
  write_file(path, R"({"family": "gpt2", "num-layers": 3, "hidden-size": 96, "num-heads": 6,
                       "seq-length": 128, "vocab-size": 500})");
  c = load_model_config(path);
  c.validate();
  CHECK(c.num_kv_heads == 6);
  CHECK(c.ffn_hidden_size == 384);
  CHECK(c.padded_vocab_size == 512);
  CHECK(c.tie_embeddings);

  // Starting from a preset.
  write_file(path, R"({"preset": "gpt2-124m", "num-layers": 6})");
  c = load_model_config(path);
  CHECK(c.num_layers == 6);
  CHECK(c.hidden_size == 768);
  CHECK(c.padded_vocab_size == 50304);

  // Bad files: one line naming the file and the problem.
  write_file(path, R"({"num-layers": 2, "num-layer": 3})");
  std::string msg = input_error_of([&] { load_model_config(path); });
  CHECK_THAT(msg, ContainsSubstring(path));
  CHECK_THAT(msg, ContainsSubstring("unknown key 'num-layer'"));
  CHECK_THAT(msg, ContainsSubstring("num-kv-heads"));

  write_file(path, R"({"num-layers": "two"})");
  msg = input_error_of([&] { load_model_config(path); });
  CHECK_THAT(msg, ContainsSubstring(path + ": key 'num-layers' must be an integer"));

  write_file(path, R"({"num-layers": 2.5})");
  CHECK_THAT(input_error_of([&] { load_model_config(path); }),
             ContainsSubstring("must be an integer"));

  write_file(path, R"({"tie-embeddings": 1})");
  CHECK_THAT(input_error_of([&] { load_model_config(path); }),
             ContainsSubstring("must be true or false, not number"));

  write_file(path, R"({"family": "bert"})");
  msg = input_error_of([&] { load_model_config(path); });
  CHECK_THAT(msg, ContainsSubstring("unknown model family 'bert'"));
  CHECK_THAT(msg, ContainsSubstring("gpt2, llama"));

  write_file(path, R"({"activation": "relu"})");
  msg = input_error_of([&] { load_model_config(path); });
  CHECK_THAT(msg, ContainsSubstring("unknown activation 'relu'"));
  CHECK_THAT(msg, ContainsSubstring("gelu_tanh, swiglu"));

  write_file(path, R"({"norm": "batchnorm"})");
  CHECK_THAT(input_error_of([&] { load_model_config(path); }),
             ContainsSubstring("layernorm, rmsnorm"));

  write_file(path, R"({"preset": "gpt5"})");
  CHECK_THAT(input_error_of([&] { load_model_config(path); }), ContainsSubstring("gpt2-1.5b"));

  write_file(path, R"({"num-layers": 2,)");
  msg = input_error_of([&] { load_model_config(path); });
  CHECK_THAT(msg, ContainsSubstring(path + ":1:18: not valid JSON"));
  CHECK(msg.find('\n') == std::string::npos);

  write_file(path, "[1, 2]");
  CHECK_THAT(input_error_of([&] { load_model_config(path); }),
             ContainsSubstring("expected a JSON object"));

  CHECK_THAT(input_error_of([&] { load_model_config(dir.path("missing.json")); }),
             ContainsSubstring("missing.json"));
}

TEST_CASE("model config: command-line overrides", "[model]") {
  ModelConfig c = ModelConfig::preset("gpt2-124m");
  ModelOverrides o;
  o.num_layers = 4;
  o.seq_length = 256;
  apply_overrides(c, o);
  CHECK(c.num_layers == 4);
  CHECK(c.seq_length == 256);
  CHECK(c.hidden_size == 768);

  // Derived sizes follow: GPT-2's NKV = NH and ffn = 4C.
  o = {};
  o.hidden_size = 512;
  o.num_heads = 8;
  apply_overrides(c, o);
  CHECK(c.num_kv_heads == 8);
  CHECK(c.ffn_hidden_size == 2048);
  c.validate();

  // ... unless given, or the preset had its own (grouped-query heads, SwiGLU width).
  ModelConfig l = ModelConfig::preset("llama-1b");
  o = {};
  o.num_heads = 16;
  o.hidden_size = 1024;
  apply_overrides(l, o);
  CHECK(l.num_kv_heads == 8);
  CHECK(l.ffn_hidden_size == 8192);
  l.validate();

  o = {};
  o.vocab_size = 1000;
  apply_overrides(l, o);
  CHECK(l.vocab_size == 1000);
  CHECK(l.padded_vocab_size == 1024);

  // Whole resolution: preset, then file, then overrides, then validation.
  TempDir dir;
  const std::string path = dir.path("m.json");
  write_file(path, R"({"num-layers": 3, "seq-length": 32})");
  o = {};
  o.vocab_size = 300;
  ModelConfig r = resolve_model_config("tiny", path, o);
  CHECK(r.num_layers == 3);
  CHECK(r.seq_length == 32);
  CHECK(r.hidden_size == 64);
  CHECK(r.padded_vocab_size == 384);

  r = resolve_model_config("gpt2-355m", "", {});
  CHECK(r.num_layers == 24);

  write_file(path, R"({"preset": "tiny-llama"})");
  CHECK_THAT(input_error_of([&] { resolve_model_config("tiny", path, o); }),
             ContainsSubstring("differs from the preset 'tiny'"));
  CHECK_THROWS_AS(resolve_model_config("", "", {}), InputError);

  o = {};
  o.num_heads = 5;
  const std::string msg = input_error_of([&] { resolve_model_config("gpt2-124m", "", o); });
  CHECK_THAT(msg, ContainsSubstring("hidden-size 768 is not divisible by num-heads 5"));
}

TEST_CASE("model config: --init-std overrides, --max-position-embeddings is checked", "[model]") {
  ModelConfig c = ModelConfig::preset("tiny");  // learned positions, seq 64
  ModelOverrides o;
  o.init_std = 0.006;
  o.max_position_embeddings = 64;
  apply_overrides(c, o);
  CHECK(c.init_std == 0.006);
  CHECK(c.seq_length == 64);  // sets no field
  CHECK(o.to_json().dump() ==
        R"({"num-layers":null,"hidden-size":null,"num-heads":null,"num-kv-heads":null,"ffn-hidden-size":null,)"
        R"("seq-length":null,"vocab-size":null,"init-std":0.006,"window-size":null,)"
        R"("max-position-embeddings":64})");

  // Megatron asserts at least the sequence length; learned positions have exactly its rows here.
  o = {};
  o.max_position_embeddings = 32;
  CHECK(input_error_of([&] { apply_overrides(c, o); }) ==
        "--max-position-embeddings 32 is below the sequence length 64");
  o.max_position_embeddings = 128;
  CHECK_THAT(input_error_of([&] { apply_overrides(c, o); }),
             ContainsSubstring("learned position embeddings have one row per position of the sequence length, 64"));
  ModelConfig rope = ModelConfig::preset("tiny-llama");
  apply_overrides(rope, o);  // RoPE has no rows: more positions than the training length are fine
  CHECK(rope.seq_length == 64);
}

TEST_CASE("model config: validation names the problem", "[model]") {
  const ModelConfig good = tiny_with_vocab("tiny", 1000);
  const ModelConfig good_llama = tiny_with_vocab("tiny-llama", 1000);
  good.validate();
  good_llama.validate();

  auto fails = [](ModelConfig c, const std::string& what) {
    INFO(what);
    CHECK_THAT(input_error_of([&] { c.validate("cfg.json"); }), ContainsSubstring("cfg.json: "));
    CHECK_THAT(input_error_of([&] { c.validate("cfg.json"); }), ContainsSubstring(what));
  };

  ModelConfig c = good;
  c.num_layers = 0;
  fails(c, "num-layers must be positive, got 0");
  c = good;
  c.hidden_size = -64;
  fails(c, "hidden-size must be positive");
  c = good;
  c.num_heads = 0;
  fails(c, "num-heads must be positive");
  c = good;
  c.ffn_hidden_size = 0;
  fails(c, "ffn-hidden-size must be positive");
  c = good;
  c.seq_length = -1;
  fails(c, "seq-length must be positive");
  c = good;
  c.num_layers = int64_t{1} << 40;
  fails(c, "num-layers 1099511627776 is too large");
  c = good;
  c.vocab_size = -5;
  fails(c, "vocab-size must be positive");
  c = good;
  c.padded_vocab_size = 1000;
  fails(c, "padded-vocab-size 1000 must be a multiple of make-vocab-size-divisible-by 128");
  c = good;
  c.padded_vocab_size = 896;
  fails(c, "no smaller than vocab-size 1000");
  c = good;
  c.num_heads = 3;
  c.num_kv_heads = 3;
  fails(c, "hidden-size 64 is not divisible by num-heads 3");
  c = good;
  c.num_kv_heads = 2;
  fails(c, "gpt2 family has no grouped-query attention");
  c = good_llama;
  c.num_kv_heads = 3;
  fails(c, "num-heads 4 is not divisible by num-kv-heads 3");
  c = good_llama;
  c.hidden_size = 60;  // head size 15
  fails(c, "head size 15");
  c = good_llama;
  c.rope_theta = 0;
  fails(c, "rope-theta must be positive");
  c = good;
  c.norm_eps = 0;
  fails(c, "norm-eps must be positive");
  c = good;
  c.init_std = -0.02;
  fails(c, "init-std must be positive");
  c = good;
  c.hidden_dropout = 1.0;
  fails(c, "hidden-dropout must be in [0, 1)");
  c = good;
  c.attention_dropout = -0.1;
  fails(c, "attention-dropout must be in [0, 1)");

  // GPT-2 has an odd head size in no preset, but it needs no RoPE, so it is allowed.
  c = good;
  c.hidden_size = 60;
  c.num_heads = 4;
  c.num_kv_heads = 4;
  CHECK_NOTHROW(c.validate());
}
