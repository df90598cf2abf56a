// The CUDA training backend's step logic: fp16 dynamic loss scaling skips a step whose gradients
// overflow (parameters and moments untouched, the scale halved), and steps normally otherwise.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "model/config.hpp"
#include "train/backend.hpp"

namespace {

meg::ModelConfig tiny_config() {
  meg::ModelConfig c = meg::ModelConfig::preset("tiny");
  c.vocab_size = 500;
  c.pad_vocab();
  c.validate();
  return c;
}

}  // namespace

TEST_CASE("fp16 loss scaling skips overflowing steps and lowers the scale", "[gpu][backend]") {
  const meg::ModelConfig c = tiny_config();
  auto backend = meg::make_cuda_backend(c, {}, 3, meg::Precision::fp16);
  std::mt19937 rng(1);
  const int B = 2, T = 64;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = rng() % 500, targets[i] = rng() % 500;
  auto step = [&] {
    backend->begin_step();
    backend->micro_batch(tokens.data(), targets.data(), B, T, 1, 0, 0, 1);
    return backend->end_step(1e-3, 1.0);
  };
  std::vector<float> p0, m0, v0, p1, m1, v1;

  // A scale near fp16's limit makes the loss gradient itself overflow.
  backend->restore_extra_state(R"({"loss_scale": 3.0e38, "good_steps": 7})");
  backend->get_state(p0, m0, v0);
  const meg::StepStats overflow = step();
  CHECK(overflow.skipped);
  CHECK(std::isfinite(overflow.loss));
  backend->get_state(p1, m1, v1);
  CHECK(std::memcmp(p0.data(), p1.data(), p0.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(m0.data(), m1.data(), m0.size() * sizeof(float)) == 0);
  CHECK(backend->optimizer_step() == 0);
  const auto state = nlohmann::json::parse(backend->extra_state());
  CHECK(state["loss_scale"].get<double>() == 1.5e38);
  CHECK(state["good_steps"].get<int64_t>() == 0);

  // A sane scale steps: the parameters move and the count of good steps grows.
  backend->restore_extra_state(R"({"loss_scale": 65536.0, "good_steps": 0})");
  const meg::StepStats ok = step();
  CHECK_FALSE(ok.skipped);
  CHECK(std::isfinite(ok.grad_norm));
  CHECK(ok.grad_norm > 0);
  backend->get_state(p1, m1, v1);
  CHECK(std::memcmp(p0.data(), p1.data(), p0.size() * sizeof(float)) != 0);
  CHECK(backend->optimizer_step() == 1);
  CHECK(nlohmann::json::parse(backend->extra_state())["good_steps"].get<int64_t>() == 1);
}

TEST_CASE("fp16 and bf16 training steps agree with fp32 on the gradient norm", "[gpu][backend]") {
  const meg::ModelConfig c = tiny_config();
  std::mt19937 rng(2);
  const int B = 4, T = 64;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = rng() % 500, targets[i] = rng() % 500;
  double norms[3], losses[3];
  const meg::Precision kinds[] = {meg::Precision::fp32, meg::Precision::bf16, meg::Precision::fp16};
  for (int k = 0; k < 3; ++k) {
    auto backend = meg::make_cuda_backend(c, {}, 3, kinds[k]);
    backend->begin_step();
    backend->micro_batch(tokens.data(), targets.data(), B, T, 1, 0, 0, 1);
    const meg::StepStats s = backend->end_step(1e-3, 1.0);
    norms[k] = s.grad_norm;
    losses[k] = s.loss;
  }
  // The loss scale must be divided out of the fp16 norm; bf16/fp16 rounding leaves a few percent.
  CHECK(std::abs(norms[1] - norms[0]) < 0.05 * norms[0]);
  CHECK(std::abs(norms[2] - norms[0]) < 0.02 * norms[0]);
  CHECK(std::abs(losses[1] - losses[0]) < 0.01 * losses[0]);
  CHECK(std::abs(losses[2] - losses[0]) < 0.005 * losses[0]);
}
