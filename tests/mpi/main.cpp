// The multi-process tests' main: MPI starts (World::init) before Catch2 runs, every rank runs the
// same test cases in the same order, and each exits with the worst status of all ranks, after
// which the World finalizes MPI.
//
// --gpu-per-rank (the [nccl] tests, tests/CMakeLists.txt): every rank needs a GPU of its own
// (gpu_per_rank.hpp). Where some rank sees fewer GPUs than there are ranks, rank 0 says so and
// every rank exits 77 before any test runs, which ctest reports as skipped (SKIP_RETURN_CODE).
#if __has_include(<catch2/catch_session.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/device.hpp"
#include "parallel/comm.hpp"

int main(int argc, char** argv) {
  meg::World& world = meg::World::init();
  std::vector<char*> args(argv, argv + argc);
  const auto flag =
      std::find_if(args.begin() + 1, args.end(), [](const char* a) { return std::strcmp(a, "--gpu-per-rank") == 0; });
  if (flag != args.end()) {
    args.erase(flag);
    int64_t fewest = int64_t(meg::cuda_devices().size());
    fewest = -fewest;  // the fewest GPUs any rank sees, through the one reduction there is
    world.world().all_reduce_max(&fewest, 1);
    fewest = -fewest;
    if (fewest < world.size()) {
      if (world.rank() == 0)
        std::printf("skipped: %d ranks need a GPU each, %lld visible\n", world.size(), static_cast<long long>(fewest));
      return 77;
    }
  }
  int64_t status = Catch::Session().run(int(args.size()), args.data());
  world.world().all_reduce_max(&status, 1);
  return status == 0 ? 0 : 1;
}
