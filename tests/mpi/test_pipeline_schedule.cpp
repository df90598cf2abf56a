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

// The paired 1F1B with blocking links (as NCCL's on a device stream are: a send waits for its
// receive), messages past MPI's eager limit so that a send really waits: every forward gets the
// previous stage's output of its micro-batch and every backward the next stage's gradient, with
// fewer and more micro-batches than stages, and nothing deadlocks.
TEST_CASE("run_one_f_one_b_paired passes each micro-batch through the stages over blocking links", "[mpi]") {
  Comm& pp = World::get().world();
  REQUIRE(pp.size() == 4);
  const int S = 4, s = pp.rank();
  const size_t n = (size_t{1} << 20) + 3;
  for (const int M : {2, 8}) {
    INFO("micro-batches " << M);
    // Per micro-batch: the input received, the output sent, the output gradient received, the
    // input gradient sent. Each message is filled with (micro-batch, stage, direction) labels.
    std::vector<std::vector<float>> input(M, std::vector<float>(n)), output(M, std::vector<float>(n)),
        output_grad(M, std::vector<float>(n)), input_grad(M, std::vector<float>(n));
    int wrong = 0, forwards = 0, backwards = 0;
    const auto label = [](const std::vector<float>& m, int micro, int stage, int dir) {
      return m[0] == float(micro) && m[n / 2] == float(stage) && m[n - 1] == float(dir);
    };
    const auto fill = [](std::vector<float>& m, int micro, int stage, int dir) {
      m[0] = float(micro), m[n / 2] = float(stage), m[n - 1] = float(dir);
    };
    PairedLinks links;
    links.forward = [&](int i) {
      if (s > 0 && !label(input[size_t(i)], i, s - 1, 0)) ++wrong;
      fill(output[size_t(i)], i, s, 0);
      ++forwards;
    };
    links.backward = [&](int i) {
      if (s < S - 1 && !label(output_grad[size_t(i)], i, s + 1, 1)) ++wrong;
      fill(input_grad[size_t(i)], i, s, 1);
      ++backwards;
    };
    links.recv_input = [&](int i) { pp.recv(input[size_t(i)].data(), n, s - 1); };
    links.send_output = [&](int i) { pp.send(output[size_t(i)].data(), n, s + 1); };
    links.recv_output_grad = [&](int i) { pp.recv(output_grad[size_t(i)].data(), n, s + 1); };
    links.send_input_grad = [&](int i) { pp.send(input_grad[size_t(i)].data(), n, s - 1); };
    links.send_output_recv_grad = [&](int out, int in) {
      pp.send_recv(output[size_t(out)].data(), n, s + 1, 0, output_grad[size_t(in)].data(), n, s + 1, 0);
    };
    links.send_input_grad_recv_input = [&](int out, int in) {
      pp.send_recv(input_grad[size_t(out)].data(), n, s - 1, 0, input[size_t(in)].data(), n, s - 1, 0);
    };
    run_one_f_one_b_paired(s, S, M, links);
    CHECK(wrong == 0);
    CHECK(forwards == M);
    CHECK(backwards == M);
  }
}
