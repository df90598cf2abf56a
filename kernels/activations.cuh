// The activation functions, one definition each for every kernel that applies them: the
// elementwise kernels (kernels/gelu.cu, kernels/swiglu.cu) and the epilogues of the small linear
// layers (kernels/small_linear.cu) compute the same fp32 values from the same inputs.
#pragma once

#include <cuda_runtime.h>

namespace meg::cuda {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

// GELU, tanh approximation (GPT-2's "gelu_new"): gelu(x) = x * s, s = sigmoid(2u) = 1 / (1 +
// exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3). exp(-2u) overflows to inf for very negative x,
// giving the right limit, -0.
__device__ inline float gelu(float x) {
  const float u = kGeluK * (x + kGeluA * x * x * x);
  return x / (1.0f + expf(-2.0f * u));
}

// SiLU (SwiGLU's gate): silu(g) = g * sigmoid(g).
__device__ inline float silu(float g) { return g / (1.0f + expf(-g)); }

}  // namespace meg::cuda
