// The repetition penalty on the device (penalise_rows, behind the CUDA inference model's choosing
// calls) against the host sampler's, for the tiny GPT-2 in fp32 and the tiny Llama in bf16. A twin
// model given the same appends hands back its unpenalised rows (append); then, for every request:
//   - the rows append_sample hands back with its tokens are the twin's rows penalised on the host
//     (penalised_logit over the distinct tokens the slot holds), bit for bit in every column; a
//     request with penalty 1 gets its rows as they are;
//   - append_greedy's token is the host sampler's greedy choice under the penalty;
//   - append_top_k's K largest are those of the host-penalised row, in order, with their logits;
//   - append_sample's draws at temperature 0 are the greedy choice, and its draws at a temperature
//     are sample_rows' over the host-penalised rows (the same kernel on the same values).
// The schedule: prompts with repeated tokens, decode steps of the same size (the graph path, after
// the first), a slot emptied and refilled with a shorter prompt (its old tokens no longer count),
// penalties above and below 1, and passes of 8 rows, which cut the longer prompts into pieces.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <span>
#include <vector>

#include "infer/cuda_inference_model.hpp"
#include "infer/inference_model.hpp"
#include "infer/sampler.hpp"
#include "model/gpt.hpp"
#include "gpu_test_util.hpp"
#include "infer_test_models.hpp"
#include "ops/cuda/ops.hpp"
#include "test_util.hpp"

namespace {

using namespace meg;
using meg::test::DeviceBuffer;

constexpr int kSlots = 3, kTopK = 7;

CheckpointModel tiny_checkpoint(const char* preset, uint64_t seed) {
  CheckpointModel ck;
  ck.config = ModelConfig::preset(preset);
  ck.config.set_vocab_from_tokenizer(300);
  ck.config.init_std = 0.2;  // far from uniform: few near-ties for the greedy comparisons
  ck.config.validate();
  ck.params.resize(size_t(ck.config.num_parameters()));
  gpt_init_parameters(ck.config, gpt_parameter_table(ck.config), seed, ck.params.data());
  return ck;
}

// sample_rows over ROWS [R, V] (fp32, host) with DRAWS, on the device.
std::vector<int32_t> device_draws(const std::vector<float>& rows, const std::vector<cuda::RowDraw>& draws, int V) {
  const DeviceBuffer<float> d_rows(rows);
  DeviceBuffer<cuda::RowDraw> d_draws(draws.size());
  d_draws.upload_raw(draws);
  const DeviceBuffer<int32_t> out(draws.size());
  cuda::sample_rows(out.get(), d_rows.get(), d_draws.get(), int(draws.size()), V, V, nullptr);
  return out.download_raw();
}

void check_penalty(const CheckpointModel& ck, Precision precision) {
  const int V = int(ck.config.vocab_size);
  const CudaInferenceOptions options{.cuda_graphs = true, .pass_tokens = 8};
  auto model = make_cuda_inference_model(ck, precision, kSlots, 0, options);
  auto twin = make_cuda_inference_model(ck, precision, kSlots, 0, options);
  REQUIRE(model->penalises());
  std::vector<std::vector<int32_t>> held(kSlots);  // each slot's tokens, as the model holds them
  std::mt19937 rng(7);
  // A prompt of N tokens drawn from a few, so that most repeat.
  const auto prompt = [&](int n) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(int32_t(rng() % 12) * 23);
    return p;
  };
  const double penalties[kSlots] = {1.3, 1.0, 0.7};
  std::vector<std::vector<int32_t>> next(kSlots);  // what each slot takes at the next step
  for (int s = 0; s < kSlots; ++s) next[size_t(s)] = prompt(5 + 9 * s);
  std::vector<float> raw(size_t(kSlots) * V), got(size_t(kSlots) * V);
  for (int step = 0; step < 12; ++step) {
    if (step == 7) {  // slot 2 refilled with a shorter prompt: only its new tokens count
      model->reset(2);
      twin->reset(2);
      held[2].clear();
      next[2] = prompt(4);
    }
    std::vector<AppendRequest> reqs;
    for (int s = 0; s < kSlots; ++s) {
      reqs.push_back({s, next[size_t(s)], penalties[s]});
      held[size_t(s)].insert(held[size_t(s)].end(), next[size_t(s)].begin(), next[size_t(s)].end());
    }
    INFO("step " << step);
    twin->append(reqs, raw.data());
    std::vector<float> want;
    for (int s = 0; s < kSlots; ++s) {
      const std::vector<float> row = penalised_row(raw.data() + size_t(s) * V, V, held[size_t(s)], penalties[s]);
      want.insert(want.end(), row.begin(), row.end());
    }
    // Each call appends the same tokens to the model as the twin's did, so the calls rotate over
    // the steps, and the model's rows are compared in every step's call.
    std::vector<int32_t> tokens(size_t(kSlots) * kTopK);
    std::vector<float> top(size_t(kSlots) * kTopK);
    Sampler sampler(V);
    SamplingParams greedy;
    switch (step % 3) {
      case 0: {  // draws, the rows handed back too
        const bool hot = step % 2 == 0;
        std::vector<SoftmaxDraw> draws;
        std::vector<cuda::RowDraw> row_draws;
        for (int s = 0; s < kSlots; ++s) {
          const double u = (s + 0.5) / kSlots;
          draws.push_back(hot ? SoftmaxDraw{0.8, 0.9, u} : SoftmaxDraw{0, 1, 0});
          row_draws.push_back({draws.back().temperature, draws.back().top_p, u});
        }
        model->append_sample(reqs, V, draws, tokens.data(), got.data());
        for (size_t i = 0; i < got.size(); ++i) {
          INFO("row " << i / size_t(V) << " column " << i % size_t(V));
          REQUIRE(std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i]));
        }
        const std::vector<int32_t> expected = device_draws(want, row_draws, V);
        for (int s = 0; s < kSlots; ++s) {
          CHECK(tokens[size_t(s)] == expected[size_t(s)]);
          if (!hot) CHECK(tokens[size_t(s)] == sampler.sample(want.data() + size_t(s) * V, {}, greedy, 0));
        }
        break;
      }
      case 1:  // greedy: the host sampler's choice with the penalty, from the unpenalised rows
        model->append_greedy(reqs, V, tokens.data());
        for (int s = 0; s < kSlots; ++s) {
          SamplingParams p;
          p.repetition_penalty = penalties[s];
          CHECK(tokens[size_t(s)] == sampler.sample(raw.data() + size_t(s) * V, held[size_t(s)], p, 0));
        }
        break;
      default:  // the K largest of the penalised rows, in order
        model->append_top_k(reqs, V, kTopK, tokens.data(), top.data());
        for (int s = 0; s < kSlots; ++s) {
          const float* row = want.data() + size_t(s) * V;
          std::vector<int32_t> ids(static_cast<size_t>(V));
          for (int t = 0; t < V; ++t) ids[size_t(t)] = t;
          std::partial_sort(ids.begin(), ids.begin() + kTopK, ids.end(),
                            [&](int32_t a, int32_t b) { return Sampler::before({row[a], a}, {row[b], b}); });
          for (int j = 0; j < kTopK; ++j) {
            CHECK(tokens[size_t(s) * kTopK + size_t(j)] == ids[size_t(j)]);
            CHECK(top[size_t(s) * kTopK + size_t(j)] == row[ids[size_t(j)]]);
          }
        }
    }
    // The next step: the greedy token of the penalised row (any token would do; this one keeps
    // the sequences like a generator's).
    for (int s = 0; s < kSlots; ++s)
      next[size_t(s)] = {sampler.sample(want.data() + size_t(s) * V, {}, greedy, 0)};
  }
}

}  // namespace

TEST_CASE("CUDA inference model: the repetition penalty on the device is the host sampler's", "[gpu][infer]") {
  SECTION("gpt2 fp32") { check_penalty(tiny_checkpoint("tiny", 3), Precision::fp32); }
  SECTION("llama bf16") { check_penalty(tiny_checkpoint("tiny-llama", 4), Precision::bf16); }
}

TEST_CASE("CUDA inference model refuses a repetition penalty out of its range before any work", "[gpu][infer]") {
  const CheckpointModel ck = tiny_checkpoint("tiny", 5);
  const std::vector<int32_t> prompt = {1, 2, 3};
  int32_t token = 0;
  auto model = make_cuda_inference_model(ck, Precision::fp32, 1, 0);
  for (const double penalty : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    const AppendRequest bad{0, prompt, penalty};
    CHECK_THROWS_AS(model->append_greedy({&bad, 1}, int(ck.config.vocab_size), &token), std::invalid_argument);
  }
  CHECK(model->length(0) == 0);
}
