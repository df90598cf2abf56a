// Tensor-parallel inference on GPUs under mpirun (2 ranks in ctest, 4 by hand), one GPU per rank
// (through NCCL), for GPT-2 and for Llama with 2 query heads per key/value head:
//   - the CUDA inference model split over the ranks gives one GPU's logits in fp32 (within 1e-4:
//     the row-parallel sums and the GEMMs of other shapes add in another order), the same bits on
//     every rank, through prompts and decode steps of several slots interleaved (decode steps of
//     one size repeat, so that the captured graphs, with the collectives in them, are checked too);
//   - its argmax and top-k readouts, which gather candidates rather than logits, choose what the
//     host sampler chooses from the logits it gathers whole.
// Needs as many GPUs as ranks: with fewer, main.cpp skips them.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "catch.hpp"
#include "gpu_per_rank.hpp"
#include "infer/cuda_inference_model.hpp"
#include "infer/sampler.hpp"
#include "infer_test_models.hpp"
#include "parallel/comm.hpp"

using namespace meg;

namespace {

// Llama with as many key/value heads as ranks (at least 2), 2 query heads each; GPT-2 with as many
// heads. Head size 16, which every attention path takes; a vocabulary of 300, split over the ranks.
CheckpointModel split_test_model(ModelFamily family, int ranks) {
  const int kv_heads = std::max(2, ranks);
  CheckpointModel ck;
  ck.config = small_inference_config(family, 2 * kv_heads, kv_heads, 300);
  ck.config.hidden_size = 16 * 2 * kv_heads;
  ck.config.validate();
  ck.params = init_params(ck.config, 3);
  return ck;
}

// The candidates of row LOGITS [V] over its first CHOICES tokens, under the repetition penalty
// PENALTY over HISTORY, in the host sampler's order: the larger logit first, the lower token among
// equal ones (infer/sampler.hpp).
std::vector<Sampler::Candidate> ranked(const float* logits, int V, int choices, const std::vector<int32_t>& history,
                                       double penalty) {
  const std::vector<float> row = penalised_row(logits, V, history, penalty);
  std::vector<Sampler::Candidate> c;
  for (int t = 0; t < choices; ++t) c.push_back({row[size_t(t)], t});
  std::sort(c.begin(), c.end(), Sampler::before);
  return c;
}

}  // namespace

TEST_CASE("tensor-parallel CUDA inference gives one GPU's logits, the same bits on every rank", "[nccl][infer]") {
  Comm& world = World::get().world();
  test::use_gpu_per_rank(world);
  for (const ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    INFO(family_name(family));
    const CheckpointModel ck = split_test_model(family, world.size());
    const auto expected = run_schedule(*make_cuda_inference_model(ck, Precision::fp32, 3, 0));
    const auto got = run_schedule(*make_cuda_inference_model(ck, Precision::fp32, 3, 0, &world));
    check_logits_close(got, expected, int(ck.config.vocab_size), 1e-4);
    check_same_on_every_member(got, world);
  }
}

// A split model's argmax and top-k readouts take their candidates from each member's shard of the
// vocabulary and gather only those: they must choose what the host sampler chooses from the
// logits the same split model gathers whole (append), the same bits, with and without a
// repetition penalty, and with CHOICES short of the vocabulary, down to members with no column
// to offer (150 tokens over 2 ranks: the second member's shard starts at 160).
TEST_CASE("tensor-parallel CUDA inference chooses as from its gathered logits", "[nccl][infer]") {
  Comm& world = World::get().world();
  test::use_gpu_per_rank(world);
  for (const ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    const CheckpointModel ck = split_test_model(family, world.size());
    const int V = int(ck.config.vocab_size);
    for (const int choices : {V, 150}) {
      for (const int k : {1, 7}) {
        INFO(family_name(family) << ", choices " << choices << ", k " << k);
        const auto logits_model = make_cuda_inference_model(ck, Precision::fp32, 3, 0, &world);
        const auto chooser = make_cuda_inference_model(ck, Precision::fp32, 3, 0, &world);
        // Slot 1's rows penalised (it is reset and prompted again at the end), the others not.
        const auto penalty = [](int slot) { return slot == 1 ? 1.3 : 1.0; };
        std::vector<std::vector<int32_t>> history(3);
        std::vector<std::vector<float>> logits;
        drive_schedule(*logits_model, [&](std::span<AppendRequest> reqs) {
          logits.emplace_back(reqs.size() * size_t(V));
          logits_model->append(reqs, logits.back().data());
        });
        size_t call = 0;
        drive_schedule(*chooser, [&](std::span<AppendRequest> reqs) {
          for (AppendRequest& r : reqs) {
            r.repetition_penalty = penalty(r.slot);
            if (chooser->length(r.slot) == 0) history[size_t(r.slot)].clear();
            history[size_t(r.slot)].insert(history[size_t(r.slot)].end(), r.tokens.begin(), r.tokens.end());
          }
          std::vector<int32_t> tokens(reqs.size() * size_t(k));
          std::vector<float> values(tokens.size());
          if (k == 1)
            chooser->append_greedy(reqs, choices, tokens.data());
          else
            chooser->append_top_k(reqs, choices, k, tokens.data(), values.data());
          REQUIRE(call < logits.size());
          for (size_t i = 0; i < reqs.size(); ++i) {
            const auto want = ranked(logits[call].data() + i * size_t(V), V, choices, history[size_t(reqs[i].slot)],
                                     penalty(reqs[i].slot));
            INFO("call " << call << ", slot " << reqs[i].slot);
            for (int j = 0; j < k; ++j) {
              CHECK(tokens[i * size_t(k) + size_t(j)] == want[size_t(j)].id);
              if (k > 1) CHECK(values[i * size_t(k) + size_t(j)] == float(want[size_t(j)].logit));
            }
          }
          ++call;
        });
        CHECK(call == logits.size());
      }
    }
  }
}
