// The multi-GPU tests' preamble: one GPU per rank of WORLD (rank % device count) made current, or,
// where fewer GPUs than ranks are visible, a warning that the test checks nothing here and false.
#pragma once

#include <cuda_runtime.h>

#include "catch.hpp"
#include "ops/cuda/check.hpp"
#include "parallel/comm.hpp"

namespace meg::test {

inline bool use_gpu_per_rank(Comm& world) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (devices < world.size()) {
    WARN("skipped: " << world.size() << " ranks need as many GPUs, " << devices << " visible");
    return false;
  }
  MEG_CUDA_CHECK(cudaSetDevice(world.rank() % devices));
  return true;
}

}  // namespace meg::test
