// RMSNorm (Llama) forward and backward on the GPU, for activations X = fp32, bf16 or fp16; the
// arithmetic and the saved rstd are fp32 whatever X is.
//
// The CPU reference is ops/cpu/norms.cpp; the launchers are declared in ops/cuda/ops.hpp. The
// kernels are kernels/norm_rows.cuh's without the mean and the bias (norm_rows::RMSNorm), that is
// LayerNorm's method: one row per group of threads, held in registers and read once; row sums in
// a fixed order; dweight reduced without atomics, through partial rows in SCRATCH, so the same
// bits on every run.
#include <cuda_runtime.h>

#include <cstddef>

#include "norm_rows.cuh"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

using norm_rows::RMSNorm;

template <typename X>
void rmsnorm_forward(X* out, float* rstd, const X* inp, const X* weight, int N, int C, float eps,
                     cudaStream_t stream) {
  norm_rows::forward<RMSNorm>(out, nullptr, rstd, inp, weight, static_cast<const X*>(nullptr), N, C,
                              eps, stream);
}

template <typename X>
void add_rmsnorm_forward(X* out, X* x, const X* part, const X* weight, int N, int C, float eps, cudaStream_t stream) {
  norm_rows::forward<RMSNorm>(out, nullptr, nullptr, x, weight, static_cast<const X*>(nullptr), N, C, eps, stream, x,
                              part);
}

size_t rmsnorm_backward_scratch(int N, int C) { return norm_rows::backward_scratch<RMSNorm>(N, C); }

template <typename X>
void rmsnorm_backward(X* dinp, float* dweight, const X* dout, const X* inp, const X* weight,
                      const float* rstd, int N, int C, float* scratch, cudaStream_t stream) {
  norm_rows::backward<RMSNorm>(dinp, dweight, nullptr, dout, inp, weight, nullptr, rstd, N, C,
                               scratch, stream);
}

#define MEG_INSTANTIATE(X)                                                                       \
  template void rmsnorm_forward<X>(X*, float*, const X*, const X*, int, int, float, cudaStream_t); \
  template void add_rmsnorm_forward<X>(X*, X*, const X*, const X*, int, int, float, cudaStream_t); \
  template void rmsnorm_backward<X>(X*, float*, const X*, const X*, const X*, const float*, int,  \
                                    int, float*, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
