// The pipeline schedules' orders: Megatron's interleaved order worked out by hand for a small case,
// every forward and backward exactly once with the backward after its forward, the warm-up counts,
// and for many shapes a simulation of the ranks running their orders as run_pipeline_schedule does
// (sends never wait; a step waits for its input or gradient), which must finish: no deadlock.
#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "train/pipeline_schedule.hpp"

using namespace meg;

namespace {

PipelineStep F(int chunk, int micro) { return {true, chunk, micro}; }
PipelineStep B(int chunk, int micro) { return {false, chunk, micro}; }

std::vector<PipelineStep> order_of(int stage, int stages, int chunks, int micro_batches) {
  return chunks == 1 ? one_f_one_b_order(stage, stages, micro_batches)
                     : interleaved_order(stage, stages, chunks, micro_batches);
}

// Runs every rank's order, one step at a time wherever a step's message has arrived: true when all
// finish. A forward on virtual stage j > 0 needs the forward of j - 1 (same micro-batch) done; a
// backward on j < last needs the backward of j + 1.
bool all_finish(int stages, int chunks, int micro_batches) {
  const int S = stages, last = S * chunks - 1;
  std::vector<std::vector<PipelineStep>> orders;
  for (int s = 0; s < S; ++s) orders.push_back(order_of(s, S, chunks, micro_batches));
  std::set<std::tuple<bool, int, int>> done;  // (forward, virtual stage, micro)
  std::vector<size_t> next(size_t(S), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < S; ++s) {
      if (next[size_t(s)] == orders[size_t(s)].size()) continue;
      const PipelineStep& step = orders[size_t(s)][next[size_t(s)]];
      const int j = step.chunk * S + s;
      const bool ready = step.forward ? j == 0 || done.count({true, j - 1, step.micro})
                                      : j == last || done.count({false, j + 1, step.micro});
      if (!ready) continue;
      done.insert({step.forward, j, step.micro});
      ++next[size_t(s)];
      progress = true;
    }
  }
  for (int s = 0; s < S; ++s)
    if (next[size_t(s)] != orders[size_t(s)].size()) return false;
  return true;
}

}  // namespace

TEST_CASE("interleaved order: Megatron's for 2 stages, 2 chunks, 4 micro-batches", "[pipeline]") {
  // Forward k: chunk (k / 2) % 2, micro-batch (k / 4) 2 + k % 2; backwards with the chunks reversed.
  // Rank 0 warms up with (2 - 0 - 1) 2 + (2 - 1) 2 = 4 forwards, rank 1 with 2.
  CHECK(interleaved_order(0, 2, 2, 4) == std::vector<PipelineStep>{F(0, 0), F(0, 1), F(1, 0), F(1, 1),
                                                                   F(0, 2), B(1, 0), F(0, 3), B(1, 1),
                                                                   F(1, 2), B(0, 0), F(1, 3), B(0, 1),
                                                                   B(1, 2), B(1, 3), B(0, 2), B(0, 3)});
  CHECK(interleaved_order(1, 2, 2, 4) == std::vector<PipelineStep>{F(0, 0), F(0, 1), F(1, 0), B(1, 0),
                                                                   F(1, 1), B(1, 1), F(0, 2), B(0, 0),
                                                                   F(0, 3), B(0, 1), F(1, 2), B(1, 2),
                                                                   F(1, 3), B(1, 3), B(0, 2), B(0, 3)});
  // As many micro-batches as stages: every forward first.
  CHECK(interleaved_order(1, 2, 2, 2) == std::vector<PipelineStep>{F(0, 0), F(0, 1), F(1, 0), F(1, 1),
                                                                   B(1, 0), B(1, 1), B(0, 0), B(0, 1)});
  CHECK(one_f_one_b_order(0, 2, 3) == std::vector<PipelineStep>{F(0, 0), F(0, 1), B(0, 0), F(0, 2), B(0, 1),
                                                                 B(0, 2)});
}

TEST_CASE("pipeline orders: each forward and backward once, the backward after its forward", "[pipeline]") {
  for (int S : {2, 3, 4})
    for (int V : {1, 2, 3})
      for (int M = S; M <= 4 * S; M += V == 1 ? 1 : S)
        for (int s = 0; s < S; ++s) {
          INFO("stages " << S << " chunks " << V << " micro-batches " << M << " rank " << s);
          const auto order = order_of(s, S, V, M);
          REQUIRE(order.size() == size_t(2 * M * V));
          std::map<std::pair<int, int>, int> forwards, backwards;  // (chunk, micro) -> position
          int leading = 0;
          for (size_t i = 0; i < order.size(); ++i) {
            auto& seen = order[i].forward ? forwards : backwards;
            CHECK(seen.emplace(std::pair{order[i].chunk, order[i].micro}, int(i)).second);
            if (order[i].forward && leading == int(i)) ++leading;
          }
          for (const auto& [key, at] : backwards) CHECK(forwards.at(key) < at);
          CHECK(forwards.size() == size_t(M * V));
          CHECK(backwards.size() == size_t(M * V));
          // The leading forwards: the warm-up's, and the steady state's first when there is one.
          const int total = M * V;
          const int w = V == 1   ? std::min(S - s - 1, M)
                        : M == S ? total
                                 : std::min((S - s - 1) * 2 + (V - 1) * S, total);
          CHECK(leading == (w < total ? w + 1 : total));
        }
}

TEST_CASE("pipeline orders run to the end on every rank: no deadlock", "[pipeline]") {
  for (int S : {2, 3, 4, 5})
    for (int V : {1, 2, 3, 4})
      for (int M = S; M <= 5 * S; M += V == 1 ? 1 : S) {
        INFO("stages " << S << " chunks " << V << " micro-batches " << M);
        CHECK(all_finish(S, V, M));
      }
  CHECK(all_finish(4, 1, 2));  // 1F1B with fewer micro-batches than stages
}

TEST_CASE("interleaved order: the micro-batches must be a multiple of the stages", "[pipeline]") {
  CHECK_THROWS_AS(interleaved_order(0, 2, 2, 3), std::invalid_argument);
  CHECK_THROWS_AS(interleaved_order(1, 4, 2, 6), std::invalid_argument);
}
