// RoPE's rotation of one pair (x1, x2) = (element i, element i + HS/2) of a q or k head
// ("rotate_half") by the angle whose cosine and sine are c and s, in fp32. Every kernel that
// rotates (rope.cu in training, kv_cache.cu and small_linear.cu's kv_append in inference) calls
// this one function, with its multiply-adds spelled out: left to the compiler, contraction into
// fused multiply-adds may differ between kernels, and the fused and unfused decode paths would
// differ in the last bit.
#pragma once

#include <cuda_runtime.h>

namespace meg::cuda {

__device__ inline float2 rotate_pair(float x1, float x2, float c, float s) {
  return {__fmaf_rn(x1, c, -__fmul_rn(x2, s)), __fmaf_rn(x2, c, __fmul_rn(x1, s))};
}

}  // namespace meg::cuda
