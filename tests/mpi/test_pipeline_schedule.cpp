// run_pipeline_schedule under mpirun -np 4 with stand-in model chunks that pass (micro-batch,
// virtual stage) labels: every forward gets the previous virtual stage's output of its
// micro-batch, every backward the next one's gradient, in 1F1B and interleaved orders.
#include <string>
#include <vector>

#include "catch.hpp"
#include "parallel/comm.hpp"
#include "train/pipeline_schedule.hpp"

using namespace meg;

TEST_CASE("run_pipeline_schedule passes each micro-batch through the virtual stages in order", "[mpi]") {
  Comm& pp = World::get().world();
  REQUIRE(pp.size() == 4);
  const int S = 4, s = pp.rank();
  for (const int V : {1, 2, 3}) {
    const int M = 8, last = S * V - 1;
    INFO("chunks " << V);
    std::vector<float> out(3);
    int wrong = 0, forwards = 0, backwards = 0;
    StageOps ops;
    ops.message_floats = out.size();
    ops.forward = [&](int chunk, int micro, const float* input) -> const float* {
      const int j = chunk * S + s;
      if (j == 0 ? input != nullptr : input == nullptr || input[0] != float(micro) || input[1] != float(j - 1))
        ++wrong;
      ++forwards;
      out = {float(micro), float(j), 0.0f};
      return out.data();
    };
    ops.backward = [&](int chunk, int micro, const float* grad) -> const float* {
      const int j = chunk * S + s;
      if (j == last ? grad != nullptr
                    : grad == nullptr || grad[0] != float(micro) || grad[1] != float(j + 1) || grad[2] != 1.0f)
        ++wrong;
      ++backwards;
      out = {float(micro), float(j), 1.0f};
      return out.data();
    };
    run_pipeline_schedule(pp, V, V == 1 ? one_f_one_b_order(s, S, M) : interleaved_order(s, S, V, M), ops);
    CHECK(wrong == 0);
    CHECK(forwards == M * V);
    CHECK(backwards == M * V);
  }
}

TEST_CASE("isend returns before the receiver takes the message; done and wait complete it", "[mpi]") {
  Comm& c = World::get().world();
  REQUIRE(c.size() == 4);
  const int next = (c.rank() + 1) % 4, prev = (c.rank() + 3) % 4;
  const size_t n = (size_t{1} << 21) + 3;  // several MPI calls: past any eager limit
  std::vector<float> big(n, float(c.rank())), small(5, float(-c.rank()));
  // Every rank sends both before receiving any, and takes them in the other order: blocking sends
  // of this size would deadlock.
  CommRequest a = c.isend(big.data(), n, next, 1);
  CommRequest b = c.isend(small.data(), small.size(), next, 2);
  std::vector<float> got_small(5), got_big(n);
  c.recv(got_small.data(), got_small.size(), prev, 2);
  c.recv(got_big.data(), n, prev, 1);
  c.wait(a);
  while (!c.done(b)) {
  }
  CHECK(c.done(a));
  size_t wrong = 0;
  for (float x : got_big) wrong += x != float(prev);
  for (float x : got_small) wrong += x != float(-prev);
  CHECK(wrong == 0);
  CHECK_THROWS_WITH(c.isend(big.data(), 1, c.rank()), Catch::Matchers::ContainsSubstring("cannot send to"));
}
