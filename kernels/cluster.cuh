// A thread block cluster's barrier and distributed shared memory, for kernels whose clusters may
// be of one block (the only kind before Hopper, and what a launcher picks where clusters do not
// pay): with CLUSTER = 1 the barrier is nothing (the caller's __syncthreads orders its block) and
// another block's shared memory is the block's own. Then, for clusters of several blocks, what a
// handoff needs without a whole barrier: the barrier in two halves, and mbarriers that the
// cluster's blocks arrive on.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>
#include <type_traits>

#include "async_copy.cuh"

namespace meg::cuda {

// Every thread of the cluster's CLUSTER blocks arrives; shared memory written before it is
// visible to the cluster's blocks after it.
__device__ inline void cluster_barrier(int cluster) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (cluster > 1) cooperative_groups::this_cluster().sync();
#endif
}

// The address of V (in this block's shared memory) in block RANK's of the cluster of CLUSTER.
template <typename T>
__device__ T* cluster_shared(T* v, int cluster, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (cluster > 1)
    return cooperative_groups::this_cluster().map_shared_rank(const_cast<std::remove_const_t<T>*>(v), rank);
#endif
  return v;
}

// The cluster barrier in two halves: every thread of the cluster arrives (relaxed: it orders
// nothing but what a fence before it released), then waits for all the others' arrivals.
__device__ inline void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
__device__ inline void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#endif
}

// An mbarrier in this block's shared memory that the cluster's blocks arrive on: initialized for
// COUNT arrivals, the initialization released to the cluster (a cluster barrier must still come
// between it and the first remote arrival).
__device__ inline void cluster_mbarrier_init(uint64_t* bar, unsigned count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// Arrives on BAR (this block's address of it) in cluster block RANK's shared memory, releasing this
// thread's earlier writes to the cluster.
__device__ inline void cluster_mbarrier_arrive(uint64_t* bar, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
#endif
}

// Waits for phase PARITY of BAR (in this block's shared memory) to complete, acquiring what the
// arrivals released.
__device__ inline void cluster_mbarrier_wait(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred done;\n wait_%=:\n"
      " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait_%=;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
#endif
}

}  // namespace meg::cuda
