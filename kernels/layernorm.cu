// LayerNorm forward and backward on the GPU, for activations X = fp32, bf16 or fp16; the arithmetic
// and the saved statistics are fp32 whatever X is.
//
// The CPU reference is ops/cpu/norms.cpp; the launchers are declared in ops/cuda/ops.hpp. The
// kernels are kernels/norm_rows.cuh's with the mean and the bias (norm_rows::LayerNorm): one row
// per group of threads, held in registers and read once; row sums in a fixed order; dweight and
// dbias reduced without atomics, through partial rows in SCRATCH, so the same bits on every run.
#include <cuda_runtime.h>

#include <cstddef>

#include "norm_rows.cuh"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

using norm_rows::LayerNorm;

template <typename X>
void layernorm_forward(X* out, float* mean, float* rstd, const X* inp, const X* weight,
                       const X* bias, int N, int C, float eps, cudaStream_t stream) {
  norm_rows::forward<LayerNorm>(out, mean, rstd, inp, weight, bias, N, C, eps, stream);
}

template <typename X>
void add_layernorm_forward(X* out, X* x, const X* part, const X* weight, const X* bias, int N, int C, float eps,
                           cudaStream_t stream) {
  norm_rows::forward<LayerNorm>(out, nullptr, nullptr, x, weight, bias, N, C, eps, stream, x, part);
}

size_t layernorm_backward_scratch(int N, int C) {
  return norm_rows::backward_scratch<LayerNorm>(N, C);
}

template <typename X>
void layernorm_backward(X* dinp, float* dweight, float* dbias, const X* dout, const X* inp,
                        const X* weight, const float* mean, const float* rstd, int N, int C,
                        float* scratch, cudaStream_t stream) {
  norm_rows::backward<LayerNorm>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                                 scratch, stream);
}

#define MEG_INSTANTIATE(X)                                                                       \
  template void layernorm_forward<X>(X*, float*, float*, const X*, const X*, const X*, int, int, \
                                     float, cudaStream_t);                                       \
  template void add_layernorm_forward<X>(X*, X*, const X*, const X*, const X*, int, int, float, cudaStream_t); \
  template void layernorm_backward<X>(X*, float*, float*, const X*, const X*, const X*,          \
                                      const float*, const float*, int, int, float*, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
