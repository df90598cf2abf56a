// The multi-GPU tests' preamble: one GPU per rank of WORLD (rank % device count) made current. The
// [nccl] tests run under --gpu-per-rank (main.cpp), which skips them all where fewer GPUs than
// ranks are visible; run without it on such a machine, a test fails here rather than pass
// without checking anything.
#pragma once

#include <cuda_runtime.h>

#include "catch.hpp"
#include "ops/cuda/check.hpp"
#include "parallel/comm.hpp"

namespace meg::test {

inline void use_gpu_per_rank(Comm& world) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  INFO(world.size() << " ranks need as many GPUs, " << devices << " visible");
  REQUIRE(devices >= world.size());
  MEG_CUDA_CHECK(cudaSetDevice(world.rank() % devices));
}

}  // namespace meg::test
