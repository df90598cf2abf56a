// Error checking for CUDA runtime calls: MEG_CUDA_CHECK(expr) throws std::runtime_error naming the
// file, the line and the runtime's message when EXPR does not return cudaSuccess. Kernel launches
// report their errors through cudaGetLastError(), so launchers follow each launch with
// MEG_CUDA_CHECK(cudaGetLastError()).
//
// Only for code built with CUDA (MEG_CUDA): kernels/*.cu and the GPU tests.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace meg::cuda {

inline void check(cudaError_t err, const char* expr, const char* file, int line) {
  if (err == cudaSuccess) return;
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + expr + ": " +
                           cudaGetErrorString(err));
}

}  // namespace meg::cuda

#define MEG_CUDA_CHECK(expr) ::meg::cuda::check((expr), #expr, __FILE__, __LINE__)
