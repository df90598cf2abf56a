// The chunk embedder: the mean of the final norm's output over a chunk's real tokens, the same
// whatever pads the chunk and whatever else shares its batch; GptModel::forward_hidden gives the
// final norm of a full forward and leaves forward() as it was; the factory's devices and
// precisions. (The CUDA embedder: tests/gpu/test_retro_cuda.cpp.)
#include <cmath>

#include "catch.hpp"
#include "model/config.hpp"
#include "model/gpt.hpp"
#include "retro/embedder.hpp"
#include "test_util.hpp"
#include "micro_model.hpp"

using namespace meg;

namespace {

// |a - b| <= 1e-5 |b| + 1e-6.
bool near(double a, double b) { return std::abs(a - b) <= 1e-5 * std::abs(b) + 1e-6; }

CheckpointModel micro_model(ModelFamily family) {
  const ModelConfig c = micro_config(family);
  GptModel<float> model(c);
  model.init(7);
  return {"micro", c, std::vector<float>(model.params(), model.params() + model.num_parameters()), "", ""};
}

}  // namespace

TEST_CASE("retro: forward_hidden gives the final norm of a full forward and changes nothing else", "[retro]") {
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    CheckpointModel m = micro_model(family);
    GptModel<float> model(m.config, nullptr, {}, false, m.params.data());
    model.set_training(false);
    const std::vector<int32_t> tokens = random_tokens(2 * 8, 50, 3), targets = random_tokens(2 * 8, 50, 4);
    const double loss = model.forward(tokens.data(), targets.data(), 2, 8);
    const std::vector<float> logits(model.logits(), model.logits() + 2 * 8 * m.config.padded_vocab_size);
    const std::vector<float> hidden(model.final_hidden(), model.final_hidden() + 2 * 8 * 16);
    model.forward_hidden(tokens.data(), 2, 8);
    CHECK(std::vector<float>(model.final_hidden(), model.final_hidden() + hidden.size()) == hidden);
    CHECK_THROWS_AS(model.backward(), std::logic_error);
    CHECK(model.forward(tokens.data(), targets.data(), 2, 8) == loss);
    CHECK(std::vector<float>(model.logits(), model.logits() + logits.size()) == logits);
  }
}

TEST_CASE("retro: a chunk's embedding is the mean over its tokens, whatever pads or accompanies it", "[retro]") {
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    CheckpointModel m = micro_model(family);
    GptModel<float> reference(m.config, nullptr, {}, false, m.params.data());
    reference.set_training(false);
    CpuEmbedder embedder(m, 3);
    REQUIRE(embedder.dim() == 16);

    // Three chunks of 8 positions with 8, 5 and 1 real tokens.
    std::vector<int32_t> tokens = random_tokens(3 * 8, 50, 11);
    const uint32_t lengths[3] = {8, 5, 1};
    std::vector<float> together(3 * 16);
    embedder.embed(tokens.data(), lengths, 3, 8, together.data());
    for (size_t i = 0; i < 3; ++i) {
      INFO("chunk " << i);
      reference.forward_hidden(tokens.data() + i * 8, 1, 8);
      for (size_t c = 0; c < 16; ++c) {
        double mean = 0;
        for (size_t t = 0; t < lengths[i]; ++t) mean += reference.final_hidden()[t * 16 + c];
        CHECK(near(together[i * 16 + c], mean / lengths[i]));
      }
      // Alone, and with other padding.
      std::vector<int32_t> alone(tokens.begin() + ptrdiff_t(i * 8), tokens.begin() + ptrdiff_t(i * 8 + 8));
      for (size_t t = lengths[i]; t < 8; ++t) alone[t] = 49;
      std::vector<float> single(16);
      embedder.embed(alone.data(), &lengths[i], 1, 8, single.data());
      for (size_t c = 0; c < 16; ++c) CHECK(near(single[c], together[i * 16 + c]));
    }
  }
}

TEST_CASE("retro: make_chunk_embedder gives the CPU embedder and refuses what it cannot run", "[retro]") {
  const CheckpointModel m = micro_model(ModelFamily::llama);
  CpuEmbedder direct(m, 2);
  const auto embedder = make_chunk_embedder(m, "cpu", Precision::fp32, 2, 8);
  REQUIRE(embedder->batch() == 2);
  REQUIRE(embedder->dim() == 16);
  const std::vector<int32_t> tokens = random_tokens(2 * 8, 50, 5);
  const uint32_t lengths[2] = {8, 3};
  std::vector<float> want(2 * 16), got(2 * 16);
  direct.embed(tokens.data(), lengths, 2, 8, want.data());
  embedder->embed(tokens.data(), lengths, 2, 8, got.data());
  CHECK(got == want);

  CHECK(input_error_of([&] { make_chunk_embedder(m, "cpu", Precision::bf16, 2, 8); }) ==
        "--precision bf16: the CPU path computes in fp32 only; use --device cuda");
  CHECK(input_error_of([&] { make_chunk_embedder(m, "tpu", Precision::fp32, 2, 8); }) ==
        "--device 'tpu': expected cpu or cuda");
#if !MEG_CUDA
  CHECK(input_error_of([&] { make_chunk_embedder(m, "cuda", Precision::bf16, 2, 8); }).find("no CUDA") !=
        std::string::npos);
#endif
}
