#include "parallel/rank_device.hpp"

#include <cuda_runtime.h>

#include "core/device.hpp"
#include "ops/cuda/check.hpp"
#include "parallel/comm.hpp"

namespace meg {

void use_rank_cuda_device() {
  const auto devices = require_cuda_devices();
  if (World::initialized()) MEG_CUDA_CHECK(cudaSetDevice(World::get().local_rank() % int(devices.size())));
}

}  // namespace meg
