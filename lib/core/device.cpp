#include "core/device.hpp"

#include "core/error.hpp"

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

std::vector<DeviceInfo> require_cuda_devices() {
  if (!built_with_cuda()) input_error("--device cuda: this build of meg has no CUDA support; use --device cpu");
  auto devices = cuda_devices();
  if (devices.empty()) input_error("--device cuda: no CUDA device is visible; use --device cpu");
  return devices;
}

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  input_error("--device '{}': expected cpu or cuda", name);
}

DevicePrecision resolve_device_precision(std::string& device, std::string& precision) {
  if (device.empty()) device = default_device();
  const Device d = parse_device(device);
  if (precision.empty()) precision = d == Device::cuda ? "bf16" : "fp32";
  return {d, parse_precision(precision)};
}

Device checked_device(const std::string& name, Precision precision) {
  const Device device = parse_device(name);
  if (device == Device::cpu && precision != Precision::fp32)
    input_error("--precision {}: the CPU path computes in fp32 only; use --device cuda", precision_name(precision));
  if (device == Device::cuda) require_cuda_devices();
  return device;
}

}  // namespace meg
