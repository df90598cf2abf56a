// Tensor-parallel inference on the CPU under mpirun -np 4: the CPU inference model split over 2
// and 4 ranks gives the logits of the whole model in one process (within 1e-5, the sums of the
// row-parallel layers being added in another order), the same bits on every rank of a group,
// through prompts and decode steps of several slots interleaved, for GPT-2 and for Llama with
// grouped key/value heads, with the vocabulary padding grown or cut for the group; a model that
// does not split is refused; the requests rank 0 reads reach every rank whole.
#include <cstdint>
#include <vector>

#include "catch.hpp"
#include "infer_test_models.hpp"
#include "test_util.hpp"
#include "infer/cpu_inference_model.hpp"
#include "infer/generator.hpp"
#include "infer/prompts.hpp"
#include "parallel/comm.hpp"

using namespace meg;

namespace {

// 8 heads (Llama: 4 key/value heads, so 2 query heads each), vocab 70 padded to 80: its padding
// for 2 and 4 ranks (96 and 128 rows) grows.
ModelConfig small_config(ModelFamily family) { return small_inference_config(family, 8, 4, 70); }

// The tensor-parallel group of TP ranks this rank belongs to (the world holds 4 / TP of them).
Comm& tp_group(int tp) {
  World& w = World::get();
  REQUIRE(w.size() == 4);
  w.set_layout(ParallelLayout::resolve(4, tp, 1));
  return w.group(ParallelDim::tp);
}

}  // namespace

TEST_CASE("tensor-parallel CPU inference gives one process's logits, the same bits on every rank", "[mpi][infer]") {
  for (const ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    const ModelConfig padded_for_1 = small_config(family);  // 80 vocabulary rows: grown for 2 and 4
    ModelConfig padded_for_4 = padded_for_1;                // 128 rows: cut for 2
    padded_for_4.pad_vocab(4);
    for (const ModelConfig& c : {padded_for_1, padded_for_4}) {
      const std::vector<float> params = init_params(c, 7);
      CpuInferenceModel whole(c, params, 3, 0);
      const auto expected = run_schedule(whole);
      const int V = int(c.vocab_size);
      for (const int tp : {2, 4}) {
        INFO(family_name(family) << ", " << c.padded_vocab_size << " vocabulary rows, tp " << tp);
        Comm& group = tp_group(tp);
        CpuInferenceModel split(c, params, 3, 0, &group);
        CHECK(split.config().vocab_size == c.vocab_size);
        CHECK(split.config().padded_vocab_size % (16 * tp) == 0);
        const auto got = run_schedule(split);
        check_logits_close(got, expected, V, 1e-5);
        check_same_on_every_member(got, group);
      }
    }
  }
}

TEST_CASE("tensor-parallel CPU inference refuses a model that does not split", "[mpi][infer]") {
  ModelConfig c = small_config(ModelFamily::llama);
  c.num_kv_heads = 2;
  const std::vector<float> params = init_params(c, 1);
  Comm& group = tp_group(4);
  CHECK(input_error_of([&] { CpuInferenceModel(c, params, 1, 0, &group); }) ==
        "--tp 4: the model's key/value heads (2) do not divide over 4 ranks");
  CheckpointModel ck{"ckpt", c, params, "", ""};
  CHECK(make_inference_model(ck, "cpu", Precision::fp32, 2, 0, &tp_group(2))->slots() == 2);
}

TEST_CASE("a shared request source hands rank 0's requests to every rank", "[mpi][infer]") {
  Comm& world = World::get().world();
  std::vector<GenerationRequest> requests(2);
  requests[0].prompt = {5, 1, 4};
  requests[0].max_tokens = 7;
  requests[0].sampling = {0.1, 40, 0.3, 1.3, 99};
  requests[0].stop = {"\n", "日本"};
  requests[1].prompt = random_tokens(3000, 50000, 4);
  ListSource list(requests);
  SharedRequestSource shared(world.rank() == 0 ? &list : nullptr, world);
  for (const GenerationRequest& want : requests) {
    const std::optional<GenerationRequest> got = shared.next(true);
    REQUIRE(got);
    CHECK(got->prompt == want.prompt);
    CHECK(got->max_tokens == want.max_tokens);
    CHECK(got->sampling.temperature == want.sampling.temperature);
    CHECK(got->sampling.top_k == want.sampling.top_k);
    CHECK(got->sampling.top_p == want.sampling.top_p);
    CHECK(got->sampling.repetition_penalty == want.sampling.repetition_penalty);
    CHECK(got->sampling.seed == want.sampling.seed);
    CHECK(got->stop == want.stop);
  }
  CHECK_FALSE(shared.next(false));
}
