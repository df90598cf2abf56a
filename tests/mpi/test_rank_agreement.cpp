// rank_disagreement and check_ranks_agree under mpirun -np 4: settings held alike pass, and a
// setting that differs is reported on every rank in the same words, naming the ranks and values.
#include <string>
#include <vector>

#include "catch.hpp"
#include "parallel/comm.hpp"
#include "parallel/rank_agreement.hpp"

using namespace meg;

namespace {

Comm& world_of_four() {
  Comm& c = World::get().world();
  REQUIRE(c.size() == 4);
  return c;
}

}  // namespace

TEST_CASE("rank_disagreement: nothing when every rank holds the same", "[mpi]") {
  Comm& c = world_of_four();
  const std::vector<RankSetting> same{{"--iters", "300", {}}, {"--data", "0123", "a.blend"}};
  CHECK(rank_disagreement(c, same).empty());
  CHECK_NOTHROW(check_ranks_agree(c, same));
  // The note is shown, not compared: each rank may reach the same file by another path.
  CHECK(rank_disagreement(c, {{"--data", "0123", "path-" + std::to_string(c.rank())}}).empty());
  CHECK(rank_disagreement(c, {}).empty());
}

TEST_CASE("rank_disagreement names each setting that differs, with the ranks and their values", "[mpi]") {
  Comm& c = world_of_four();
  const std::string r = std::to_string(c.rank());
  // Rank 3 alone differs on --iters; every rank differs on --seed (three values shown, then "...").
  const std::vector<RankSetting> settings{{"--iters", c.rank() == 3 ? "301" : "300", {}},
                                          {"--lr", "0.001", {}},
                                          {"--seed", r, {}},
                                          {"--data", c.rank() == 1 ? "bbbb" : "aaaa", "d" + r + ".blend"},
                                          {"--save", c.rank() == 2 ? "ck" : "", {}}};
  CHECK(rank_disagreement(c, settings) ==
        "--iters (rank 0: 300, rank 3: 301), --seed (rank 0: 0, rank 1: 1, rank 2: 2, ...), "
        "--data (rank 0: aaaa (d0.blend), rank 1: bbbb (d1.blend)), --save (rank 0: \"\", rank 2: ck)");
}

TEST_CASE("rank_disagreement cuts long values to keep the report one short line", "[mpi]") {
  Comm& c = world_of_four();
  const std::string value = c.rank() == 0 ? "short" : std::string(500, 'x');
  const std::string report = rank_disagreement(c, {{"--model-config", value, {}}});
  CHECK(report == "--model-config (rank 0: short, rank 1: " + std::string(92, 'x') + "...)");
}

TEST_CASE("rank_disagreement: ranks that compare different settings are told so", "[mpi]") {
  Comm& c = world_of_four();
  std::vector<RankSetting> settings{{"--iters", "300", {}}};
  if (c.rank() == 2) settings.push_back({"--new-option", "1", {}});
  CHECK(rank_disagreement(c, settings) ==
        "the settings to compare (rank 0 has 1, rank 2 has 2 or names them otherwise): not the same build of the "
        "tool?");
}
