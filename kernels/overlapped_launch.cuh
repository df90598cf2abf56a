// Overlapped launches (programmatic dependent launch, Hopper and later) for the kernels of a decode
// step, which are short enough that a launch's ramp-up and the previous kernel's tail cost as much
// as their work, and for the norms and SwiGLU between the cuBLASLt products of batched steps (the
// products themselves are ordinary launches).
//
// A kernel launched with launch_overlapped() may start while the kernel before it in the stream
// is still running. Until it calls wait_for_previous_kernel() it must touch only what no kernel that
// may still be running writes (the weights: small_linear streams its first weights there); after
// the call the previous kernel has finished and its writes are visible, and so have all before it.
// A kernel lets the next one start with allow_next_kernel(). Most call it once past their own wait,
// so that only the kernel before is then running; the cached attention calls it just before its
// wait, as nothing it writes is read early by the projection after it. The next kernel's blocks
// take multiprocessors as the running ones' retire. On devices before Hopper, and for a
// predecessor that is not a kernel, the launch is an ordinary one and the calls do nothing.
//
// The alternatives, measured slower on an H100 (by tests/bench/cuda/bench_decode_chain.cu, whose
// history keeps their code; the figures are in docs/experiments.md): the step's products as phases
// of one persistent kernel with a grid-wide barrier between them (each phase requesting its first
// weights before the barrier, as here before the wait), or as kernels that hand over through
// counters in memory (each block arrives when done; the next kernel's blocks poll for a full
// grid's arrivals) in place of wait_for_previous_kernel(); one launch streaming every product's
// weights through a ring of shared memory ahead of counter handoffs (a counter handoff costs about
// what a boundary here does); and kernels of their own streaming through rings of shared memory,
// each letting the next start at once beside it. small_linear letting the next kernel start
// before its wait too (the residual then read after it) changed nothing beyond noise: a product's
// blocks fill the multiprocessors' registers, so the next one's blocks start no earlier.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "ops/cuda/check.hpp"

namespace meg::cuda {

__device__ inline void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ inline void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Overlapped launches and thread block clusters both need Hopper (compute capability 9.0) or later.
inline bool hopper_or_later() {
  int device = 0, major = 0;
  MEG_CUDA_CHECK(cudaGetDevice(&device));
  MEG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 9;
}
inline bool overlapped_launches_supported() { return hopper_or_later(); }
inline bool clusters_supported() { return hopper_or_later(); }

// launch_overlapped with the grid in thread block clusters of CLUSTER blocks along x (which must
// divide grid.x; 1 before Hopper).
template <typename... Params, typename... Args>
void launch_overlapped_clusters(void (*kernel)(Params...), dim3 grid, unsigned cluster, dim3 block, size_t smem,
                                cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (overlapped_launches_supported()) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count++].val.clusterDim = {cluster, 1, 1};
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  MEG_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

template <typename... Params, typename... Args>
void launch_overlapped(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  launch_overlapped_clusters(kernel, grid, 1, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace meg::cuda
