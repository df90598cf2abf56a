// The GPU tests' main: where no CUDA device is visible it says so and exits 77 before any test
// runs, which ctest reports as skipped (SKIP_RETURN_CODE, tests/CMakeLists.txt), rather than pass
// or fail every case; otherwise Catch2 runs them. Every case needs one GPU, no more.
#if __has_include(<catch2/catch_session.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include <cstdio>

#include "core/device.hpp"

int main(int argc, char** argv) {
  if (meg::cuda_devices().empty()) {
    std::printf("skipped: no CUDA device visible\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
