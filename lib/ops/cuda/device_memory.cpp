#include "ops/cuda/device_memory.hpp"

#include <cuda_runtime.h>

#include <fmt/format.h>

#include <stdexcept>

#include "core/error.hpp"
#include "ops/cuda/check.hpp"

namespace meg::cuda {

namespace {
constexpr size_t kSmall = size_t(1) << 20;
constexpr size_t kSmallStep = 512;
constexpr size_t kLargeStep = size_t(2) << 20;

size_t round_up(size_t n, size_t step) { return (n + step - 1) / step * step; }
double gib(size_t bytes) { return static_cast<double>(bytes) / double(1 << 30); }
}  // namespace

size_t DeviceAllocator::round_size(size_t bytes) {
  if (bytes == 0) return kSmallStep;
  return bytes < kSmall ? round_up(bytes, kSmallStep) : round_up(bytes, kLargeStep);
}

DeviceAllocator::~DeviceAllocator() {
  release_cached();
  // Blocks still live belong to owners that outlive the allocator: a bug, but freeing them here
  // would only turn it into a use after free.
}

void* DeviceAllocator::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  void* ptr = nullptr;
  // Best fit among cached blocks, but never a block more than twice the size: a small buffer
  // must not pin a huge one.
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= 2 * size) {
    ptr = it->second;
    const size_t got = it->first;
    free_.erase(it);
    cached_ -= got;
    live_[ptr] = got;
    in_use_ += got;
  } else {
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky-free error state of this failure
      release_cached();
      err = cudaMalloc(&ptr, size);
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      // The user can fix this (a smaller batch, recomputation, a smaller model): an InputError.
      input_error("out of GPU memory: cannot allocate {:.2f} GiB with {:.2f} GiB in use (peak {:.2f} GiB): {}; "
                  "try a smaller --micro-batch or --recompute selective|full",
                  gib(size), gib(in_use_), gib(peak_), cudaGetErrorString(err));
    }
    live_[ptr] = size;
    in_use_ += size;
  }
  peak_ = std::max(peak_, in_use_);
  return ptr;
}

void DeviceAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  auto it = live_.find(ptr);
  if (it == live_.end()) throw std::logic_error("DeviceAllocator: freeing a block it did not allocate");
  free_.emplace(it->second, ptr);
  cached_ += it->second;
  in_use_ -= it->second;
  live_.erase(it);
}

void DeviceAllocator::release_cached() {
  // Work queued on the device may still use a block freed to the cache; wait for it first.
  if (!free_.empty()) cudaDeviceSynchronize();
  for (const auto& [size, ptr] : free_) cudaFree(ptr);
  free_.clear();
  cached_ = 0;
}

}  // namespace meg::cuda
