// The CUDA devices this process can see. Built without CUDA (MEG_CUDA off), there are none, and
// every tool still works on the CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meg {

struct DeviceInfo {
  int index = 0;
  std::string name;
  uint64_t memory_bytes = 0;
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
};

bool built_with_cuda();
// Devices visible now; empty without CUDA, without a driver, or without a GPU.
std::vector<DeviceInfo> cuda_devices();
// "cuda" when a GPU is present, else "cpu": the default of --device.
std::string default_device();
// The visible devices for --device cuda; InputError saying so when there are none (or no CUDA in
// this build).
std::vector<DeviceInfo> require_cuda_devices();

}  // namespace meg
