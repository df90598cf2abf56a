// Runs on a CUDA machine (make test-gpu): the build sees the GPU the way the tools will.
#include "catch.hpp"
#include "core/device.hpp"

TEST_CASE("A CUDA build on a CUDA machine sees its GPUs", "[gpu]") {
  REQUIRE(meg::built_with_cuda());
  const auto devices = meg::cuda_devices();
  REQUIRE_FALSE(devices.empty());
  for (const auto& d : devices) {
    INFO(d.name);
    CHECK(d.memory_bytes > (1ull << 30));
    CHECK(d.compute_major >= 7);
    CHECK(d.multiprocessors > 0);
  }
  CHECK(meg::default_device() == "cuda");
}
