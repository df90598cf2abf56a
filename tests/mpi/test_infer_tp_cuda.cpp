// Tensor-parallel inference on GPUs under mpirun (2 ranks in ctest, any count that divides the heads
// run by hand), one GPU per rank (through NCCL): the CUDA inference model split over the ranks gives one GPU's logits in fp32 (within 1e-4: the
// row-parallel sums and the GEMMs of other shapes add in another order), the same bits on both
// ranks, through prompts and decode steps of several slots interleaved (decode steps of one size
// repeat, so that the captured graphs, with the collectives in them, are checked too), for GPT-2
// and for Llama with 2 query heads per key/value head, as many key/value heads as ranks (at least 2). Needs as many GPUs as ranks; with fewer it
// says so and checks nothing.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "catch.hpp"
#include "gpu_per_rank.hpp"
#include "infer/cuda_inference_model.hpp"
#include "infer_test_models.hpp"
#include "parallel/comm.hpp"

using namespace meg;

TEST_CASE("tensor-parallel CUDA inference gives one GPU's logits, the same bits on every rank", "[nccl][infer]") {
  Comm& world = World::get().world();
  if (!test::use_gpu_per_rank(world)) return;
  for (const ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    INFO(family_name(family));
    // Head size 16, which every attention path takes; Llama's key/value heads split over the ranks.
    const int kv_heads = std::max(2, world.size());
    CheckpointModel ck;
    ck.config = small_inference_config(family, 2 * kv_heads, kv_heads, 300);
    ck.config.hidden_size = 16 * 2 * kv_heads;
    ck.config.validate();
    ck.params = init_params(ck.config, 3);
    const auto expected = run_schedule(*make_cuda_inference_model(ck, Precision::fp32, 3, 0));
    const auto got = run_schedule(*make_cuda_inference_model(ck, Precision::fp32, 3, 0, &world));
    check_logits_close(got, expected, int(ck.config.vocab_size), 1e-4);
    check_same_on_every_member(got, world);
  }
}
