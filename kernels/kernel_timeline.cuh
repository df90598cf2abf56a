// Where a decode step's time goes, launch by launch, on machines without a timeline profiler (and
// with one that would serialize the overlapped kernels, as Nsight Compute does). Built with the
// CMake option MEG_KERNEL_TIMELINE, a kernel that holds a KernelStamps stamps, for each of its
// blocks, the global time (%globaltimer, nanoseconds on every multiprocessor alike) at its start,
// when its wait for the previous kernel returned, when its staging ended (a product's input; the
// attention's own keys attended, before any merge) and when its last warp ended, into a table of
// its translation unit (MEG_KERNEL_TIMELINE_TABLE), one row a launch, found by a key the launch
// alone has within a step (its weights, its layer's cache). `bench_generate --timeline` reads the
// tables after one step (lib/ops/cuda/kernel_timeline.hpp). Without the option a KernelStamps is
// empty and its calls compile to nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/kernel_timeline.hpp"

namespace meg::cuda {

#ifdef MEG_KERNEL_TIMELINE

constexpr int kTimelineLaunches = 1024;  // rows of a table: launches of one step, at most
constexpr int kTimelineBlocks = 512;     // blocks a launch, at most (the later ones are not stamped)

struct DeviceTimeline {
  unsigned long long keys[kTimelineLaunches];  // 0: a free row
  int kinds[kTimelineLaunches];
  int blocks[kTimelineLaunches];
  BlockStamps stamps[kTimelineLaunches][kTimelineBlocks];
};

__device__ inline uint64_t global_time() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The row of the launch keyed KEY in TABLE, claimed by the first block to look for it; -1 when the
// table is full.
__device__ inline int timeline_row(DeviceTimeline& table, unsigned long long key, int kind) {
  int row = int((key >> 4) * 0x9E3779B97F4A7C15ull >> 54) % kTimelineLaunches;
  for (int probe = 0; probe < kTimelineLaunches; ++probe, row = (row + 1) % kTimelineLaunches) {
    const unsigned long long seen = *reinterpret_cast<volatile unsigned long long*>(&table.keys[row]);
    if (seen == key) return row;
    if (seen != 0) continue;
    const unsigned long long was = atomicCAS(&table.keys[row], 0ull, key);
    if (was == 0) {
      table.kinds[row] = kind;
      table.blocks[row] = int(gridDim.x * gridDim.y * gridDim.z);
    }
    if (was == 0 || was == key) return row;
  }
  return -1;
}

// A block's stamps: constructed by all its threads at the kernel's start (a block barrier), the
// end stamped as each warp's first lane leaves the kernel.
class KernelStamps {
 public:
  __device__ KernelStamps(DeviceTimeline& table, const void* key, int kind) {
    const uint64_t now = global_time();
    __shared__ BlockStamps* mine;
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
      const int row = timeline_row(table, reinterpret_cast<unsigned long long>(key), kind);
      const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
      mine = row >= 0 && block < unsigned(kTimelineBlocks) ? &table.stamps[row][block] : nullptr;
      if (mine) mine->start = now;
    }
    __syncthreads();
    block_ = mine;
  }
  __device__ void waited() const { stamp(&BlockStamps::wait); }
  __device__ void staged() const { stamp(&BlockStamps::staged); }
  __device__ ~KernelStamps() {
    if (block_ && threadIdx.x % kWarp == 0)
      atomicMax(reinterpret_cast<unsigned long long*>(&block_->end), global_time());
  }

 private:
  __device__ void stamp(uint64_t BlockStamps::*field) const {
    if (block_ && threadIdx.x == 0) block_->*field = global_time();
  }
  BlockStamps* block_;
};

// The translation unit's table, and NAME's reader and reset for kernel_timeline.cu.
#define MEG_KERNEL_TIMELINE_TABLE(name)                                                        \
  static __device__ DeviceTimeline name##_timeline;                                           \
  void read_kernel_timeline_##name(std::vector<LaunchStamps>& launches) {                     \
    read_device_timeline(name##_timeline, launches);                                          \
  }                                                                                            \
  void reset_kernel_timeline_##name() { reset_device_timeline(name##_timeline); }

inline void reset_device_timeline(const DeviceTimeline& table) {
  void* address = nullptr;
  MEG_CUDA_CHECK(cudaGetSymbolAddress(&address, table));
  MEG_CUDA_CHECK(cudaMemset(address, 0, sizeof(DeviceTimeline)));
}

inline void read_device_timeline(const DeviceTimeline& table, std::vector<LaunchStamps>& launches) {
  void* address = nullptr;
  MEG_CUDA_CHECK(cudaGetSymbolAddress(&address, table));
  std::vector<DeviceTimeline> host(1);
  MEG_CUDA_CHECK(cudaMemcpy(host.data(), address, sizeof(DeviceTimeline), cudaMemcpyDeviceToHost));
  const DeviceTimeline& t = host[0];
  for (int row = 0; row < kTimelineLaunches; ++row) {
    if (t.keys[row] == 0) continue;
    LaunchStamps l{t.keys[row], t.kinds[row], {}};
    for (int b = 0; b < t.blocks[row] && b < kTimelineBlocks; ++b) l.blocks.push_back(t.stamps[row][b]);
    launches.push_back(std::move(l));
  }
}

#else

struct DeviceTimeline {};
class KernelStamps {
 public:
  __device__ KernelStamps(DeviceTimeline&, const void*, int) {}
  __device__ void waited() const {}
  __device__ void staged() const {}
};
#define MEG_KERNEL_TIMELINE_TABLE(name) static __device__ DeviceTimeline name##_timeline;

#endif

}  // namespace meg::cuda
