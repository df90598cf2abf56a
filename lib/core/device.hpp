// The CUDA devices this process can see. Built without CUDA (MEG_CUDA off), there are none, and
// every tool still works on the CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/precision.hpp"

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

// What --device names: "cpu" or "cuda" (InputError otherwise).
enum class Device { cpu, cuda };
Device parse_device(const std::string& name);

// --device and --precision as every tool resolves them. DEVICE "" becomes default_device();
// PRECISION "" becomes the device's default: bf16 on cuda (the tensor cores' format, with fp32
// accumulation; training keeps fp32 master weights), fp32 on the CPU (the only one it computes
// in). Both strings are filled in, as the resolved settings the tools print and record; InputError
// on an unknown name, the device's first. Whether the device can run it is checked_device's.
struct DevicePrecision {
  Device device;
  Precision precision;
};
DevicePrecision resolve_device_precision(std::string& device, std::string& precision);

// The device of a path that computes in PRECISION, checked before it is built: the CPU computes in
// fp32 only, and CUDA needs a CUDA build and a visible GPU (require_cuda_devices). InputError
// otherwise, with the same message in every tool.
Device checked_device(const std::string& name, Precision precision);

}  // namespace meg
