// A thread block cluster's barrier and distributed shared memory, for kernels whose clusters may
// be of one block (the only kind before Hopper, and what a launcher picks where clusters do not
// pay): with CLUSTER = 1 the barrier is nothing (the caller's __syncthreads orders its block) and
// another block's shared memory is the block's own.
#pragma once

#include <cooperative_groups.h>

#include <type_traits>

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

}  // namespace meg::cuda
