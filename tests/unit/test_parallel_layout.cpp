// The parallel layout's rank arithmetic against Megatron-LM's documented groups, and a world of one
// process (no launcher): the collectives are copies or nothing. The same code under mpirun is
// tests/mpi/.
#include <string>
#include <vector>

#include "catch.hpp"
#include "core/error.hpp"
#include "parallel/comm.hpp"
#include "parallel/layout.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr ParallelDim kDims[] = {ParallelDim::tp, ParallelDim::cp, ParallelDim::ep, ParallelDim::dp,
                                 ParallelDim::pp};

// Every group along D, each listed once, in order of its first rank.
std::vector<std::vector<int>> groups_along(const ParallelLayout& l, ParallelDim d) {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < l.world_size(); ++r) {
    auto g = l.group(r, d);
    if (g.front() == r) out.push_back(g);
  }
  return out;
}

}  // namespace

TEST_CASE("resolve derives dp and checks the sizes", "[parallel]") {
  const auto l = ParallelLayout::resolve(16, 2, 4);
  CHECK(l.tp == 2);
  CHECK(l.pp == 4);
  CHECK(l.dp == 2);
  CHECK(l.cp == 1);
  CHECK(l.ep == 1);
  CHECK(l.world_size() == 16);
  CHECK(ParallelLayout::resolve(24, 2, 3, 2, 1) == ParallelLayout{2, 3, 2, 2, 1});
  CHECK(ParallelLayout::resolve(8, 1, 1, 1, 2, 4).dp == 4);
  CHECK(ParallelLayout::resolve(1, 1, 1) == ParallelLayout{});
  CHECK(ParallelLayout::resolve(16, 2, 4).to_json().dump() == R"({"tp":2,"pp":4,"dp":2,"cp":1,"ep":1})");

  CHECK_THROWS_MATCHES(
      ParallelLayout::resolve(12, 5, 1), InputError,
      Catch::Matchers::Message("tp 5 x pp 1 x cp 1 x ep 1 = 5 does not divide the job's 12 processes"));
  CHECK_THROWS_MATCHES(ParallelLayout::resolve(8, 2, 2, 1, 1, 3), InputError,
                       Catch::Matchers::Message("tp 2 x pp 2 x cp 1 x ep 1 x dp 3 = 12 processes, but the job has 8"));
  // A job of one process was most likely started without its launcher: the line says how.
  CHECK_THROWS_WITH(ParallelLayout::resolve(1, 2, 2),
                    "tp 2 x pp 2 x cp 1 x ep 1 = 4 processes, but the job has 1: start it with mpirun -np 4");
  CHECK_THROWS_WITH(ParallelLayout::resolve(1, 1, 1, 1, 1, 2),
                    "tp 1 x pp 1 x cp 1 x ep 1 x dp 2 = 2 processes, but the job has 1: start it with mpirun -np 2");
  CHECK_THROWS_WITH(ParallelLayout::resolve(8, 0, 1), "--tp 0: a parallel size must be at least 1");
  CHECK_THROWS_WITH(ParallelLayout::resolve(8, 1, -2), "--pp -2: a parallel size must be at least 1");
  CHECK_THROWS_WITH(ParallelLayout::resolve(8, 1, 1, 0), "--cp 0: a parallel size must be at least 1");
  CHECK_THROWS_WITH(ParallelLayout::resolve(8, 1, 1, 1, 0), "--ep 0: a parallel size must be at least 1");
  CHECK_THROWS_WITH(ParallelLayout::resolve(8, 1, 1, 1, 1, 0), "--dp 0: a parallel size must be at least 1");
  CHECK_THROWS_WITH(ParallelLayout::resolve(0, 1, 1), "a job needs at least one process, not 0");
}

TEST_CASE("coords and rank_of are inverses, tp fastest and pp slowest", "[parallel]") {
  for (const ParallelLayout& l : {ParallelLayout{1, 1, 1, 1, 1}, ParallelLayout{2, 2, 2, 1, 1},
                                  ParallelLayout{2, 3, 2, 2, 1}, ParallelLayout{4, 1, 3, 1, 2},
                                  ParallelLayout{3, 2, 2, 2, 2}}) {
    INFO(l.to_json().dump());
    for (int r = 0; r < l.world_size(); ++r) {
      const RankCoords c = l.coords(r);
      CHECK(l.rank_of(c) == r);
      CHECK(r == c.tp + l.tp * (c.cp + l.cp * (c.ep + l.ep * (c.dp + l.dp * c.pp))));
      for (ParallelDim d : kDims) {
        CHECK(c[d] >= 0);
        CHECK(c[d] < l.size(d));
      }
    }
  }
  const ParallelLayout l{2, 2, 2, 1, 1};  // tp, pp, dp, cp, ep
  CHECK(l.coords(5).tp == 1);
  CHECK(l.coords(5).dp == 0);
  CHECK(l.coords(5).pp == 1);
  CHECK_THROWS_AS(l.coords(8), std::out_of_range);
  CHECK_THROWS_AS(l.coords(-1), std::out_of_range);
  RankCoords bad;
  bad.dp = 2;
  CHECK_THROWS_AS(l.rank_of(bad), std::out_of_range);
}

TEST_CASE("groups follow Megatron's order", "[parallel]") {
  SECTION("tp=2 pp=2 dp=2") {
    const ParallelLayout l = ParallelLayout::resolve(8, 2, 2);
    CHECK(l.group(0, ParallelDim::tp) == std::vector<int>{0, 1});
    CHECK(l.group(0, ParallelDim::dp) == std::vector<int>{0, 2});
    CHECK(l.group(0, ParallelDim::pp) == std::vector<int>{0, 4});
    CHECK(l.group(7, ParallelDim::tp) == std::vector<int>{6, 7});
    CHECK(l.group(7, ParallelDim::dp) == std::vector<int>{5, 7});
    CHECK(l.group(7, ParallelDim::pp) == std::vector<int>{3, 7});
    CHECK(l.group(5, ParallelDim::cp) == std::vector<int>{5});
    CHECK(l.group(5, ParallelDim::ep) == std::vector<int>{5});
  }
  SECTION("Megatron's example: 16 GPUs, tp=2, pp=4") {
    // megatron/core/parallel_state.py, initialize_model_parallel's docstring.
    const ParallelLayout l = ParallelLayout::resolve(16, 2, 4);
    CHECK(groups_along(l, ParallelDim::tp) ==
          std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}});
    CHECK(groups_along(l, ParallelDim::pp) ==
          std::vector<std::vector<int>>{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}});
    CHECK(groups_along(l, ParallelDim::dp) ==
          std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}});
  }
  SECTION("cp and ep sit between tp and dp") {
    const ParallelLayout l{2, 1, 2, 2, 2};  // tp, pp, dp, cp, ep: 16 ranks
    CHECK(l.group(0, ParallelDim::cp) == std::vector<int>{0, 2});
    CHECK(l.group(0, ParallelDim::ep) == std::vector<int>{0, 4});
    CHECK(l.group(0, ParallelDim::dp) == std::vector<int>{0, 8});
    CHECK(l.group(13, ParallelDim::cp) == std::vector<int>{13, 15});
  }
  SECTION("every rank is in exactly one group along each dimension, at its own coordinate") {
    const ParallelLayout l{3, 2, 2, 2, 1};
    for (ParallelDim d : kDims) {
      std::vector<int> seen(static_cast<size_t>(l.world_size()), 0);
      for (const auto& g : groups_along(l, d)) {
        CHECK(static_cast<int>(g.size()) == l.size(d));
        for (size_t i = 0; i < g.size(); ++i) {
          ++seen[static_cast<size_t>(g[i])];
          CHECK(l.coords(g[i])[d] == static_cast<int>(i));
          CHECK(l.group(g[i], d) == g);
        }
      }
      CHECK(seen == std::vector<int>(seen.size(), 1));
    }
  }
}

TEST_CASE("a process started on its own is a world of one", "[parallel]") {
  World& world = World::init();
  CHECK(World::initialized());
  CHECK(&World::get() == &world);
  CHECK(world.size() == 1);
  CHECK(world.rank() == 0);
  CHECK_FALSE(world.distributed());
  CHECK(world.world().handle() == 0);

  CHECK_THROWS_WITH(world.set_layout(ParallelLayout{2, 1, 1, 1, 1}),
                    "tp 2 x pp 1 x cp 1 x ep 1 x dp 1 = 2 processes, but the job has 1: start it with mpirun -np 2");
  world.set_layout(ParallelLayout{});
  CHECK(world.layout() == ParallelLayout{});
  for (ParallelDim d : kDims) {
    Comm& g = world.group(d);
    CHECK(g.size() == 1);
    CHECK(g.rank() == 0);
    CHECK(g.name() == to_string(d));
  }

  Comm& c = world.group(ParallelDim::dp);
  std::vector<float> v{1.5f, -2.25f, 3.0f};
  c.all_reduce_sum(v.data(), v.size());
  CHECK(v == std::vector<float>{1.5f, -2.25f, 3.0f});
  std::vector<double> w{0.1, 0.2};
  c.all_reduce_sum(w.data(), w.size());
  CHECK(w == std::vector<double>{0.1, 0.2});
  std::vector<int64_t> m{-7, 4};
  c.all_reduce_max(m.data(), m.size());
  CHECK(m == std::vector<int64_t>{-7, 4});
  std::vector<float> out(3, 0.0f);
  c.reduce_scatter_sum(out.data(), v.data(), v.size());
  CHECK(out == v);
  std::fill(out.begin(), out.end(), 0.0f);
  c.all_gather(out.data(), v.data(), v.size());
  CHECK(out == v);
  c.broadcast(v.data(), sizeof(float) * v.size(), 0);
  CHECK(v == std::vector<float>{1.5f, -2.25f, 3.0f});
  CHECK_THROWS_WITH(c.broadcast(v.data(), 4, 1), ContainsSubstring("no member 1 of 1"));
  CHECK_THROWS_WITH(c.send(v.data(), 1, 0), ContainsSubstring("cannot send to 0"));
  c.barrier();
}
