#include "core/device.hpp"

#ifdef MEG_CUDA
#include <cuda_runtime.h>
#endif

namespace meg {

bool built_with_cuda() {
#ifdef MEG_CUDA
  return true;
#else
  return false;
#endif
}

std::vector<DeviceInfo> cuda_devices() {
  std::vector<DeviceInfo> devices;
#ifdef MEG_CUDA
  int count = 0;
  // No driver or no GPU is an ordinary situation here (CPU machines), not an error.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return devices;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    devices.push_back({i, prop.name, prop.totalGlobalMem, prop.major, prop.minor, prop.multiProcessorCount});
  }
#endif
  return devices;
}

std::string default_device() { return cuda_devices().empty() ? "cpu" : "cuda"; }

}  // namespace meg
