// The features of today's open architectures train split over tensor- and pipeline-parallel ranks
// (TP 2 x PP 2 under mpirun -np 4, with and without sequence parallelism) as in one process: q/k/v
// biases (split with the q/k/v rows), qk-layernorm with a head size of its own (its weights
// replicated, their gradients summed over the ranks' heads), Llama 3.1's RoPE scaling and a
// sliding window (each rank's heads attend within it); the same losses and gradient norms step
// after step, within float rounding.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "catch.hpp"
#include "split_training.hpp"
#include "micro_model.hpp"
#include "test_util.hpp"
#include "parallel/comm.hpp"
#include "parallel/layout.hpp"
#include "train/backend.hpp"

using namespace meg;

TEST_CASE("add-qkv-bias, qk-layernorm, kv-channels, RoPE scaling and window-size train under TP 2 x PP 2 as in one "
          "process",
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
  c.window_size = 2;
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
    test::check_trains_as_one(*split, *whole, c, 4);
  }
}
