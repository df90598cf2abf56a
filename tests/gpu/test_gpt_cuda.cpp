// The CUDA model against the CPU model: same parameters, same batch, then the loss, the logits and
// every parameter gradient compared.
//
// Bounds. In fp32 both sides compute the same function with different summation orders (cuBLAS
// blocks its dot products, the kernels reduce in trees), so results agree to a few ulps of the
// terms' magnitude, amplified through the layers: a relative L2 error of 1e-4 leaves a wide
// margin over what fp32 rounding gives (~1e-6) while any wrong index, missing term or wrong
// scale (errors of order 1) fails. In bf16, every activation and weight is rounded to 8 bits of
// mantissa (unit roundoff 2^-8 = 3.9e-3) and the roundings compound through ~10 ops per block,
// so the gradients' relative L2 error against fp32 is a few percent: the bound is 5e-2 for the
// gradients and 2e-2 for the loss, still far below the error of order 1 of a real bug.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "gpu_test_util.hpp"
#include "model/config.hpp"
#include "model/gpt.hpp"
#include "model/gpt_cuda.hpp"

namespace {

using meg::GptCudaModel;
using meg::GptModel;
using meg::ModelConfig;
using meg::test::relative_l2;

ModelConfig small_config(const std::string& preset, int64_t vocab, int64_t heads, int64_t kv_heads, int64_t hidden) {
  ModelConfig c = ModelConfig::preset(preset);
  c.vocab_size = vocab;
  c.pad_vocab();
  c.hidden_size = hidden;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.ffn_hidden_size = c.activation == meg::Activation::swiglu ? 3 * hidden : 4 * hidden;
  c.seq_length = 64;
  c.rope_theta = 10000.0;
  c.validate();
  return c;
}

struct Batch {
  int B, T;
  std::vector<int32_t> tokens, targets;
};

Batch random_batch(int B, int T, int V, std::mt19937& rng) {
  Batch b{B, T, {}, {}};
  std::uniform_int_distribution<int> tok(0, V - 1);
  for (int i = 0; i < B * T; ++i) {
    b.tokens.push_back(tok(rng));
    b.targets.push_back(i % 7 == 3 ? -1 : tok(rng));  // some ignored positions
  }
  return b;
}

// Relative L2 error of a's tensor NAME against the reference's.
double tensor_error(const std::vector<float>& got, const std::vector<double>& want, const meg::ParamTensor& t) {
  std::vector<float> g(got.begin() + t.offset, got.begin() + t.offset + t.numel);
  std::vector<double> w(want.begin() + t.offset, want.begin() + t.offset + t.numel);
  return relative_l2(g, w);
}

// Runs the config on both sides and compares; X is the GPU's activation type.
template <typename X>
void compare_with_cpu(const ModelConfig& config, double hidden_dropout, double loss_tol, double grad_tol,
                      double attention_dropout = 0) {
  ModelConfig c = config;
  c.hidden_dropout = hidden_dropout;
  c.attention_dropout = attention_dropout;
  std::mt19937 rng(42);
  const Batch batch = random_batch(2, 48, int(c.vocab_size), rng);

  GptModel<double> cpu(c);
  cpu.init(7);
  // Make every parameter non-trivial: Megatron's init has zero biases and unit norm weights, which
  // would hide a gradient or a bias applied to the wrong place.
  std::uniform_real_distribution<double> jitter(-0.05, 0.05);
  for (size_t i = 0; i < cpu.num_parameters(); ++i) cpu.params()[i] += jitter(rng);
  std::vector<float> params(cpu.params(), cpu.params() + cpu.num_parameters());
  for (size_t i = 0; i < params.size(); ++i) cpu.params()[i] = params[i];  // the values the GPU sees
  cpu.set_dropout_key(5, 3, 1);
  const double want_loss = cpu.forward(batch.tokens.data(), batch.targets.data(), batch.B, batch.T);
  cpu.zero_grad();
  cpu.backward();
  std::vector<double> want_grads(cpu.grads(), cpu.grads() + cpu.num_parameters());

  meg::cuda::DeviceAllocator alloc;
  GptCudaModel<X> gpu(c, alloc, nullptr);
  gpu.set_params(params.data());
  gpu.set_dropout_key(5, 3, 1);
  gpu.zero_grad();
  gpu.forward_backward(batch.tokens.data(), batch.targets.data(), batch.B, batch.T, 1.0f);
  const double got_loss = gpu.take_loss();
  std::vector<float> grads(gpu.num_parameters());
  gpu.get_grads(grads.data());

  INFO(meg::test::type_name<X>() << " loss: gpu " << got_loss << " cpu " << want_loss);
  CHECK(std::abs(got_loss - want_loss) <= loss_tol * std::abs(want_loss));
  for (const auto& t : gpu.tensors()) {
    const double err = tensor_error(grads, want_grads, t);
    INFO("gradient of " << t.name << ": relative L2 error " << err);
    CHECK(err <= grad_tol);
  }

  // Forward only: logits and loss without dropout.
  cpu.set_training(false);
  gpu.set_training(false);
  const double want_eval = cpu.forward(batch.tokens.data(), batch.targets.data(), batch.B, batch.T);
  const double got_eval = gpu.forward(batch.tokens.data(), batch.targets.data(), batch.B, batch.T);
  CHECK(std::abs(got_eval - want_eval) <= loss_tol * std::abs(want_eval));
  const size_t n = size_t(batch.B) * batch.T * size_t(c.padded_vocab_size);
  std::vector<double> want_logits(cpu.logits(), cpu.logits() + n);
  const double logit_err = relative_l2(gpu.logits(), want_logits);
  INFO("logits: relative L2 error " << logit_err);
  CHECK(logit_err <= grad_tol);
}

}  // namespace

TEST_CASE("CUDA GPT-2 model matches the CPU model in fp32", "[gpu][model]") {
  SECTION("fallback attention, head size 16") { compare_with_cpu<float>(small_config("tiny", 300, 4, 4, 64), 0, 1e-5, 1e-4); }
  SECTION("head size 64") { compare_with_cpu<float>(small_config("tiny", 300, 2, 2, 128), 0, 1e-5, 1e-4); }
  SECTION("hidden and attention dropout") {
    compare_with_cpu<float>(small_config("tiny", 300, 4, 4, 64), 0.1, 1e-5, 1e-4, 0.1);
  }
}

TEST_CASE("CUDA Llama model matches the CPU model in fp32", "[gpu][model]") {
  SECTION("grouped-query attention, head size 16") {
    compare_with_cpu<float>(small_config("tiny-llama", 300, 4, 2, 64), 0, 1e-5, 1e-4);
  }
  SECTION("head size 64") { compare_with_cpu<float>(small_config("tiny-llama", 300, 4, 2, 256), 0, 1e-5, 1e-4); }
}

TEST_CASE("CUDA model with Qwen2, Qwen3 and Llama 3.1 features matches the CPU model in fp32", "[gpu][model]") {
  SECTION("add-qkv-bias") {
    ModelConfig c = small_config("tiny-llama", 300, 4, 2, 64);
    c.add_qkv_bias = true;
    compare_with_cpu<float>(c, 0, 1e-5, 1e-4);
  }
  SECTION("qk-layernorm, kv-channels 64 on a stream of 128 (fallback and fast attention)") {
    for (const int64_t hs : {16, 64}) {
      ModelConfig c = small_config("tiny-llama", 300, 4, 2, 128);
      c.qk_layernorm = true;
      c.kv_channels = hs;
      c.validate();
      compare_with_cpu<float>(c, 0, 1e-5, 1e-4);
    }
  }
  SECTION("qk-layernorm with dropout") {
    ModelConfig c = small_config("tiny-llama", 300, 4, 2, 64);
    c.qk_layernorm = true;
    compare_with_cpu<float>(c, 0.1, 1e-5, 1e-4, 0.1);
  }
  SECTION("llama3 and linear RoPE scaling") {
    ModelConfig c = small_config("tiny-llama", 300, 4, 2, 256);
    c.use_rope_scaling = true;
    c.rope_scaling_original_max_position_embeddings = 32;
    compare_with_cpu<float>(c, 0, 1e-5, 1e-4);
    c.use_rope_scaling = false;
    c.rotary_seq_len_interpolation_factor = 4;
    compare_with_cpu<float>(c, 0, 1e-5, 1e-4);
  }
  SECTION("qk-layernorm in bf16") {
    ModelConfig c = small_config("tiny-llama", 300, 4, 2, 256);
    c.qk_layernorm = true;
    compare_with_cpu<__nv_bfloat16>(c, 0, 2e-2, 5e-2);
  }
  SECTION("window-size, fp32 (the fallback) and bf16 (fast attention), with dropout") {
    ModelConfig c = small_config("tiny-llama", 300, 4, 2, 256);
    for (const int64_t window : {0, 1, 9, 1000}) {
      c.window_size = window;
      compare_with_cpu<float>(c, 0, 1e-5, 1e-4);
      compare_with_cpu<__nv_bfloat16>(c, 0, 2e-2, 5e-2);
    }
    c.window_size = 9;
    compare_with_cpu<float>(c, 0.1, 1e-5, 1e-4, 0.1);
  }
}

TEST_CASE("CUDA model in bf16 and fp16 tracks the CPU model", "[gpu][model]") {
  SECTION("gpt2 bf16, head size 64") {
    compare_with_cpu<__nv_bfloat16>(small_config("tiny", 300, 2, 2, 128), 0, 2e-2, 5e-2);
  }
  SECTION("llama bf16, head size 64") {
    compare_with_cpu<__nv_bfloat16>(small_config("tiny-llama", 300, 4, 2, 256), 0, 2e-2, 5e-2);
  }
  SECTION("gpt2 bf16, head size 64, hidden and attention dropout") {
    compare_with_cpu<__nv_bfloat16>(small_config("tiny", 300, 2, 2, 128), 0.1, 2e-2, 5e-2, 0.1);
  }
  SECTION("gpt2 fp16, head size 64") {
    compare_with_cpu<__half>(small_config("tiny", 300, 2, 2, 128), 0, 1e-2, 2e-2);
  }
}

TEST_CASE("CUDA model gradients are the same bits on every run", "[gpu][model]") {
  const ModelConfig c = small_config("tiny-llama", 300, 4, 2, 256);
  std::mt19937 rng(3);
  const Batch batch = random_batch(2, 64, int(c.vocab_size), rng);
  std::vector<float> params(c.num_parameters());
  meg::gpt_init_parameters(c, meg::gpt_parameter_table(c), 11, params.data());
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    meg::cuda::DeviceAllocator alloc;
    GptCudaModel<__nv_bfloat16> gpu(c, alloc, nullptr);
    gpu.set_params(params.data());
    gpu.zero_grad();
    for (int micro = 0; micro < 2; ++micro)
      gpu.forward_backward(batch.tokens.data(), batch.targets.data(), batch.B, batch.T, 0.5f);
    gpu.take_loss();
    std::vector<float> grads(gpu.num_parameters());
    gpu.get_grads(grads.data());
    if (run == 0) first = grads;
    else CHECK(std::memcmp(first.data(), grads.data(), grads.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("CUDA model refuses bad tokens like the CPU model", "[gpu][model]") {
  const ModelConfig c = small_config("tiny", 300, 4, 4, 64);
  meg::cuda::DeviceAllocator alloc;
  GptCudaModel<float> gpu(c, alloc, nullptr);
  std::vector<int32_t> tokens(8, 1), targets(8, 2);
  tokens[5] = 300;
  CHECK_THROWS_AS(gpu.forward(tokens.data(), targets.data(), 1, 8), meg::InputError);
  tokens[5] = 1;
  targets[2] = -2;
  CHECK_THROWS_AS(gpu.forward_backward(tokens.data(), targets.data(), 1, 8, 1.0f), meg::InputError);
}

// Selective recomputation runs the GELU kernel again, so it forgoes the fused GELU epilogue of the
// forward; it is compared with the unfused model, full recomputation with both.
TEST_CASE("CUDA model recomputation gives the same gradients bit for bit", "[gpu][model]") {
  ModelConfig c = small_config("tiny", 300, 2, 2, 128);
  c.num_layers = 3;
  c.hidden_dropout = 0.1;  // recomputed blocks must drop the same elements
  c.attention_dropout = 0.1;
  std::mt19937 rng(9);
  const Batch batch = random_batch(2, 64, int(c.vocab_size), rng);
  std::vector<float> params(c.num_parameters());
  meg::gpt_init_parameters(c, meg::gpt_parameter_table(c), 5, params.data());
  auto run = [&](meg::Recompute mode, bool fused, std::vector<float>& grads) {
    meg::cuda::DeviceAllocator alloc;
    GptCudaModel<__nv_bfloat16> gpu(c, alloc, nullptr);
    gpu.set_recompute(mode);
    gpu.set_fused_epilogues(fused);
    gpu.set_params(params.data());
    gpu.set_dropout_key(1, 2, 0);
    gpu.zero_grad();
    gpu.forward_backward(batch.tokens.data(), batch.targets.data(), batch.B, batch.T, 1.0f);
    const double loss = gpu.take_loss();
    grads.resize(gpu.num_parameters());
    gpu.get_grads(grads.data());
    return loss;
  };
  const struct {
    meg::Recompute mode;
    bool fused;
  } cases[] = {{meg::Recompute::selective, false}, {meg::Recompute::full, false}, {meg::Recompute::full, true}};
  for (const auto& k : cases) {
    INFO("recompute mode " << int(k.mode) << ", fused epilogues " << k.fused);
    std::vector<float> want, got;
    const double want_loss = run(meg::Recompute::none, k.fused, want);
    const double got_loss = run(k.mode, k.fused, got);
    CHECK(got_loss == want_loss);
    CHECK(std::memcmp(want.data(), got.data(), got.size() * sizeof(float)) == 0);
  }
}
