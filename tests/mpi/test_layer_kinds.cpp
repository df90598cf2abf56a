// A layer kind defined in the test tree (toy_layer.hpp) trains split over tensor- and pipeline-
// parallel ranks (TP 2 x PP 2 under mpirun -np 4, with and without sequence parallelism, hidden
// dropout on) as in one process: the same losses and gradient norms step after step (within
// float rounding: the tensor-parallel sums add in another order), with nothing of lib/ but its
// registration.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "catch.hpp"
#include "split_training.hpp"
#include "test_util.hpp"
#include "toy_model.hpp"
#include "parallel/comm.hpp"
#include "parallel/layout.hpp"
#include "train/backend.hpp"

using namespace meg;

TEST_CASE("a test's layer kind trains under TP 2 x PP 2 as in one process", "[mpi][model]") {
  World& w = World::get();
  REQUIRE(w.size() == 4);
  ModelConfig c = toy::toy_config();
  c.hidden_dropout = 0.1;
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
    CHECK(split->tensors().size() == whole->tensors().size());

    test::check_trains_as_one(*split, *whole, c, 5);
  }
}
