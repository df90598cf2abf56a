// The CUDA path of the ops: host functions that launch the kernels of kernels/*.cu.
//
// Each mirrors the CPU reference of the same name in ops/cpu/ops.hpp (same arguments, same
// semantics, fp32 only) and adds the stream to launch on. Every pointer is a device pointer; every
// function is asynchronous with respect to the host and checks its launches with MEG_CUDA_CHECK,
// so a bad launch throws std::runtime_error. As on the CPU:
//   - every backward ACCUMULATES (+=) into its gradient outputs;
//   - a gradient output given as nullptr is not computed.
//
// Only for code built with CUDA (MEG_CUDA): kernels/*.cu and the GPU tests.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace meg::cuda {

// ---- kernels/layernorm.cu ----------------------------------------------------------------------

// out[N,C] = (inp - mean) * rstd * weight + bias, over the last dimension. Saves mean[N] and
// rstd[N] (either may be null). bias may be null.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps, cudaStream_t stream = 0);

// dinp[N,C] += ..., dweight[C] += sum over rows of norm * dout, dbias[C] += sum over rows of dout.
// mean and rstd are those saved by the forward (required). dweight and dbias are reduced in a
// fixed order, so the result is the same bit for bit from run to run (see layernorm.cu).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, cudaStream_t stream = 0);

// ---- kernels/gelu.cu ---------------------------------------------------------------------------

// GELU, tanh approximation, elementwise over n values. out may equal inp.
void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream = 0);

// dinp[i] += gelu'(inp[i]) * dout[i].
void gelu_backward(float* dinp, const float* dout, const float* inp, size_t n,
                   cudaStream_t stream = 0);

}  // namespace meg::cuda
