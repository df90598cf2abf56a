// bench_generate --timeline's arithmetic: a step's launches, given in any order, averaged at their
// places in a layer after the launch before them, with unstamped blocks and fields left out.
#include <cmath>
#include <cstdint>
#include <vector>

#include "bench/cuda/timeline_report.hpp"
#include "catch.hpp"

using meg::cuda::BlockStamps;
using meg::cuda::LaunchStamps;
using meg::cuda::TimelineKind;

namespace {

// LAYERS layers of a GPT-2 step's five launches, each launch's blocks stamped at fixed offsets (ns)
// from the end of the launch before it: it ends 5 us after, its median block 1 us before that.
std::vector<LaunchStamps> synthetic_step(int layers) {
  const TimelineKind places[] = {TimelineKind::linear_kv_append, TimelineKind::cached_attention,
                                 TimelineKind::linear_residual, TimelineKind::linear_gelu,
                                 TimelineKind::linear_residual};
  std::vector<LaunchStamps> launches;
  uint64_t previous_end = 1000000, key = 1;
  for (int l = 0; l < layers; ++l) {
    for (TimelineKind kind : places) {
      const uint64_t e = previous_end;
      LaunchStamps s{key++, int(kind), {}};
      s.blocks.push_back({e - 500, e + 900, e + 1500, e + 3000});
      s.blocks.push_back({e - 300, e + 800, e + 2000, e + 4000});
      s.blocks.push_back({e + 100, 0, 0, e + 5000});  // a block whose wait and staging went unstamped
      s.blocks.push_back({0, 0, 0, 0});               // a block past the table's, unstamped
      launches.push_back(s);
      previous_end = e + 5000;
    }
  }
  // In no order, as the tables are read.
  std::vector<LaunchStamps> shuffled;
  for (size_t i = 0; i < launches.size(); ++i) shuffled.push_back(launches[(i * 7) % launches.size()]);
  return shuffled;
}

}  // namespace

TEST_CASE("kernel timeline: each place's times averaged over the layers", "[bench]") {
  const auto stamps = synthetic_step(3);
  size_t layers = 0;
  const auto places = meg::bench::layer_places(stamps, layers);
  CHECK(layers == 3);
  REQUIRE(places.size() == 5);
  CHECK(places[0].kind == int(TimelineKind::linear_kv_append));
  CHECK(places[1].kind == int(TimelineKind::cached_attention));
  CHECK(places[3].kind == int(TimelineKind::linear_gelu));
  for (const auto& p : places) {
    CHECK(p.blocks == 3);
    CHECK(std::abs(p.started - -0.3) < 1e-9);
    CHECK(std::abs(p.waited - 0.8) < 1e-9);
    CHECK(std::abs(p.staged - 2.0) < 1e-9);
    CHECK(std::abs(p.ended - 5.0) < 1e-9);
    CHECK(std::abs(p.tail - 1.0) < 1e-9);
  }
  CHECK(meg::bench::timer_step(stamps) == 100);
}

TEST_CASE("kernel timeline: no places without two attention launches", "[bench]") {
  size_t layers = 7;
  CHECK(meg::bench::layer_places(synthetic_step(1), layers).empty());
  CHECK(layers == 0);
  CHECK(meg::bench::layer_places({}, layers).empty());
}
