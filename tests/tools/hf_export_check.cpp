// Produces what scripts/check-hf-export.py compares: for a small GPT-2 and a small Llama, meg's
// own logits on fixed tokens and the model exported as a Hugging Face directory.
//
//   hf_export_check OUT
// writes, for FAMILY in gpt2, llama, llama-sharded (the Llama again, in shards of at most
// 200 kB with model.safetensors.index.json), llama3, qwen2 and qwen3 (small_config below):
//   OUT/FAMILY/hf/            export_hf's directory (fp32)
//   OUT/FAMILY/logits.bin     float32 little-endian [batch, seq, vocab]: the real vocabulary only
//   OUT/FAMILY/meta.json      {"batch": B, "seq": T, "vocab": V, "tokens": [B*T ids]}
// The models have Megatron's initialisation plus distinct biases and norm weights (zeros and ones
// there would hide a misplaced one), and vocabularies that are not multiples of 128, so the
// export drops padding rows.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "convert/hf_export.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "model/gpt.hpp"

using namespace meg;

namespace {

constexpr int kBatch = 2, kSeq = 32;

// FAMILY's model: gpt2 and llama are the presets'; llama3 adds Llama 3.1's RoPE scaling (16
// original positions, below the 32 run), qwen2 q/k/v biases, qwen3 q/k norms and heads of 32 on a
// stream of 64 (Qwen2ForCausalLM and Qwen3ForCausalLM on export).
ModelConfig small_config(const std::string& family) {
  ModelConfig c = ModelConfig::preset(family == "gpt2" ? "tiny" : "tiny-llama");
  c.num_layers = 3;
  c.vocab_size = 1000;
  if (family != "gpt2") c.rope_theta = 10000.0;  // angles that vary over 32 positions
  if (family == "llama3") {
    c.use_rope_scaling = true;
    c.rope_scaling_original_max_position_embeddings = 16;
  }
  if (family == "qwen2") c.add_qkv_bias = true;
  if (family == "qwen3") {
    c.qk_layernorm = true;
    c.kv_channels = 32;
  }
  c.pad_vocab();
  c.validate();
  return c;
}

void check_family(const std::string& name, const std::string& out) {
  const bool sharded = name.ends_with("-sharded");
  const std::string family = sharded ? name.substr(0, name.size() - 8) : name;
  const ModelConfig c = small_config(family);
  GptModel<float> model(c);
  model.init(42);
  for (const auto& t : model.tensors())
    if (t.init == ParamInit::zeros || t.init == ParamInit::ones)
      for (size_t i = 0; i < t.numel; ++i) model.params()[t.offset + i] += 0.01f * float(int(i % 13) - 6);
  model.set_training(false);

  std::vector<int32_t> tokens(kBatch * kSeq);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 17) % size_t(c.vocab_size));
  model.forward(tokens.data(), nullptr, kBatch, kSeq);

  const std::string dir = out + "/" + name;
  std::filesystem::create_directories(dir);
  const size_t V = size_t(c.vocab_size), Vp = size_t(c.padded_vocab_size);
  std::ofstream logits(dir + "/logits.bin", std::ios::binary);
  for (size_t row = 0; row < tokens.size(); ++row)
    logits.write(reinterpret_cast<const char*>(model.logits() + row * Vp), std::streamsize(V * sizeof(float)));
  if (!logits.flush()) system_error(dir + "/logits.bin", "cannot write");
  const nlohmann::json meta = {{"batch", kBatch}, {"seq", kSeq}, {"vocab", c.vocab_size}, {"tokens", tokens}};
  std::ofstream(dir + "/meta.json") << meta.dump() << "\n";

  HfExportOptions options;
  if (sharded) options.max_shard_bytes = 200'000;
  const auto source = [&](const std::string& tensor, std::vector<float>& values) {
    const ParamTensor& t = model.tensor(tensor);
    values.assign(model.params() + t.offset, model.params() + t.offset + t.numel);
  };
  const HfExportSummary summary = export_hf(c, source, dir + "/hf", options);
  std::fprintf(stderr, "hf_export_check: %s: logits and %s/hf written (%zu files)\n", name.c_str(), dir.c_str(),
               summary.files.size());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hf_export_check: meg's logits and Hugging Face exports of a small GPT-2 and Llama", "hf_export_check"};
  std::string out;
  app.add_option("out", out, "Output folder")->required();
  return cli::run_tool(app, argc, argv, [&] {
    for (const char* name : {"gpt2", "llama", "llama-sharded", "llama3", "qwen2", "qwen3"}) check_family(name, out);
    return 0;
  });
}
