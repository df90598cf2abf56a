// The multi-process tests' main: MPI starts (World::init) before Catch2 runs, every rank runs the
// same test cases in the same order, and each exits with the worst status of all ranks, after
// which the World finalizes MPI.
#if __has_include(<catch2/catch_session.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include <cstdint>

#include "parallel/comm.hpp"

int main(int argc, char** argv) {
  meg::World& world = meg::World::init();
  int64_t status = Catch::Session().run(argc, argv);
  world.world().all_reduce_max(&status, 1);
  return status == 0 ? 0 : 1;
}
