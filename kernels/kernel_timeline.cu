// The kernel timeline's tables read and cleared together (kernel_timeline.cuh): one per
// translation unit whose kernels stamp.
#include "kernel_timeline.cuh"

#include <cuda_runtime.h>

#include "ops/cuda/check.hpp"

namespace meg::cuda {

#ifdef MEG_KERNEL_TIMELINE
void read_kernel_timeline_small_linear(std::vector<LaunchStamps>& launches);
void read_kernel_timeline_cached_attention(std::vector<LaunchStamps>& launches);
void reset_kernel_timeline_small_linear();
void reset_kernel_timeline_cached_attention();

bool kernel_timeline_built() { return true; }

void reset_kernel_timeline() {
  MEG_CUDA_CHECK(cudaDeviceSynchronize());
  reset_kernel_timeline_small_linear();
  reset_kernel_timeline_cached_attention();
  MEG_CUDA_CHECK(cudaDeviceSynchronize());  // the clearing done before any stream's next launch
}

std::vector<LaunchStamps> read_kernel_timeline() {
  MEG_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<LaunchStamps> launches;
  read_kernel_timeline_small_linear(launches);
  read_kernel_timeline_cached_attention(launches);
  return launches;
}
#else
bool kernel_timeline_built() { return false; }
void reset_kernel_timeline() {}
std::vector<LaunchStamps> read_kernel_timeline() { return {}; }
#endif

}  // namespace meg::cuda
