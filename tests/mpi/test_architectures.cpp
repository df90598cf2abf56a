// The features of today's open architectures train split over tensor- and pipeline-parallel ranks
// (TP 2 x PP 2 under mpirun -np 4, with and without sequence parallelism) as in one process: q/k/v
// biases (split with the q/k/v rows), qk-layernorm with a head size of its own (its weights
// replicated, their gradients summed over the ranks' heads) and Llama 3.1's RoPE scaling; the same
// losses and gradient norms step after step, within float rounding.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "catch.hpp"
#include "micro_model.hpp"
#include "test_util.hpp"
#include "parallel/comm.hpp"
#include "parallel/layout.hpp"
#include "train/backend.hpp"

using namespace meg;

TEST_CASE("add-qkv-bias, qk-layernorm, kv-channels and RoPE scaling train under TP 2 x PP 2 as in one process",
          "[mpi][model]") {
  World& w = World::get();
  REQUIRE(w.size() == 4);
  ModelConfig c = micro_config(ModelFamily::llama);
  c.num_layers = 4;
  c.add_qkv_bias = true;
  c.qk_layernorm = true;
  c.kv_channels = 6;
  c.use_rope_scaling = true;
  c.rope_scaling_original_max_position_embeddings = 4;
  c.validate();
  w.set_layout(ParallelLayout::resolve(4, 2, 2));
  for (const bool sequence_parallel : {false, true}) {
    INFO("sequence parallel " << sequence_parallel);
    ParallelGroups groups;
    groups.tp = &w.group(ParallelDim::tp);
    groups.pp = &w.group(ParallelDim::pp);
    groups.dp = &w.group(ParallelDim::dp);
    groups.sequence_parallel = sequence_parallel;
    const AdamWOptions adam;
    const auto split = make_cpu_backend(c, adam, 9, groups);
    const auto whole = make_cpu_backend(c, adam, 9);
    const int B = 2, T = 8, micro_batches = 2;
    for (uint64_t step = 0; step < 4; ++step) {
      for (TrainBackend* b : {split.get(), whole.get()}) b->begin_step();
      for (uint64_t micro = 0; micro < uint64_t(micro_batches); ++micro) {
        const auto tokens = random_tokens(B * T, int(c.vocab_size), uint32_t(10 * step + micro));
        const auto targets = random_tokens(B * T, int(c.vocab_size), uint32_t(10 * step + micro + 5));
        for (TrainBackend* b : {split.get(), whole.get()})
          b->micro_batch(tokens.data(), targets.data(), B, T, 3, step, micro, micro_batches);
      }
      const StepStats s = split->end_step(1e-2, 1.0), o = whole->end_step(1e-2, 1.0);
      INFO("step " << step << ": loss " << s.loss << " vs " << o.loss << ", norm " << s.grad_norm << " vs "
                   << o.grad_norm);
      CHECK(std::abs(s.loss - o.loss) <= 1e-5 * o.loss);
      CHECK(std::abs(s.grad_norm - o.grad_norm) <= 1e-4 * o.grad_norm);
    }
  }
}
