// Multi-tensor AdamW on the GPU: one launch updates every parameter tensor of the model, fp32
// master weights and moments, and refreshes the compute copy of type X (fp32, bf16 or fp16) in the
// same pass.
//
// The CPU reference is ops/cpu/adamw.cpp (adamw_step, one tensor per call); the launcher is
// declared in ops/cuda/ops.hpp. The per-element arithmetic follows the CPU's formulas term by term,
// in fp32: the bias corrections 1 - beta^t are computed on the host in double as the CPU computes
// them, then rounded once to fp32, and the update is (m / c1) / (sqrt(v / c2) + eps) with true
// divisions, so an fp32 step lands within a few roundings of the CPU's.
//
// The work split. The segments (one per tensor, ~150 for GPT-2, from 768 to 38 million elements)
// are cut into chunks of kChunk elements, numbered in segment order as one long list, and the
// blocks of a persistent grid (as many as fit on the GPU at once) take the chunks round-robin:
// block b gets chunks b, b + G, b + 2G, ... . Every block walks the segment table (staged through
// shared memory, a tile of kBlock entries at a time) to find its chunks, so the table stays on the
// device and the host never reads it; the walk costs a few integer operations per segment, and the
// chunks spread evenly over the blocks however unequal the segments are. Each element is updated
// by exactly one thread and reads nothing but its own state, so the result does not depend on the
// grid: it is the same bit for bit on any GPU.
//
// Within a chunk, each thread takes 4 consecutive elements: one 16-byte access to each of params,
// grads, m and v (and 8 bytes of a bf16/fp16 copy). That needs the segment's offset to be a
// multiple of 4 (all base pointers being 16-byte aligned); a segment that is not, and the last
// partial group of 4 of each segment, go one element at a time.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kWidth = 4;  // fp32 elements per 16-byte access
constexpr size_t kChunk = size_t(kBlock) * kWidth;

struct Hyper {
  float lr, beta1, beta2, eps, grad_scale;
  float c1, c2;  // bias corrections 1 - beta1^t, 1 - beta2^t
};

// One element, as cpu::adamw_step with the gradient scaled first; p, m and v are updated in place.
// The decay uses the parameter from before the step, decoupled from the adaptive scaling.
__device__ void adamw_update(float& p, float& m, float& v, float grad, float wd, const Hyper& h) {
  const float g = grad * h.grad_scale;
  m = h.beta1 * m + (1.0f - h.beta1) * g;
  v = h.beta2 * v + (1.0f - h.beta2) * g * g;
  const float update = (m / h.c1) / (sqrtf(v / h.c2) + h.eps);
  p = p - h.lr * (update + wd * p);
}

// Updates elements [i, min(i + kWidth, end)) of the flat arrays: as one access per array when all
// four are there and VEC says the segment is aligned, else one by one.
template <typename X>
__device__ void adamw_group(float* params, X* params_x, const float* grads, float* m, float* v,
                            size_t i, size_t end, bool vec, float wd, const Hyper& h) {
  if (vec && i + kWidth <= end) {
    float4 p = *reinterpret_cast<const float4*>(params + i);
    const float4 g = *reinterpret_cast<const float4*>(grads + i);
    float4 mi = *reinterpret_cast<const float4*>(m + i);
    float4 vi = *reinterpret_cast<const float4*>(v + i);
    adamw_update(p.x, mi.x, vi.x, g.x, wd, h);
    adamw_update(p.y, mi.y, vi.y, g.y, wd, h);
    adamw_update(p.z, mi.z, vi.z, g.z, wd, h);
    adamw_update(p.w, mi.w, vi.w, g.w, wd, h);
    *reinterpret_cast<float4*>(params + i) = p;
    *reinterpret_cast<float4*>(m + i) = mi;
    *reinterpret_cast<float4*>(v + i) = vi;
    if (params_x) {
      Vec<X, kWidth> x;
      x.v[0] = from_float<X>(p.x);
      x.v[1] = from_float<X>(p.y);
      x.v[2] = from_float<X>(p.z);
      x.v[3] = from_float<X>(p.w);
      *reinterpret_cast<Vec<X, kWidth>*>(params_x + i) = x;
    }
  } else {
    for (size_t j = i; j < end && j < i + kWidth; ++j) {
      float p = params[j], mj = m[j], vj = v[j];
      adamw_update(p, mj, vj, grads[j], wd, h);
      params[j] = p;
      m[j] = mj;
      v[j] = vj;
      if (params_x) params_x[j] = from_float<X>(p);
    }
  }
}

template <typename X>
__global__ void __launch_bounds__(kBlock)
    adamw_kernel(float* params, X* params_x, const float* grads, float* m, float* v,
                 const AdamWSegment* segments, int num_segments, Hyper h, bool aligned) {
  __shared__ AdamWSegment tile[kBlock];
  const size_t G = gridDim.x;
  size_t first_chunk = 0;  // number of the current segment's first chunk in the list of all chunks
  for (int t0 = 0; t0 < num_segments; t0 += kBlock) {
    const int count = min(kBlock, num_segments - t0);
    __syncthreads();  // every thread is done with the previous tile
    if (int(threadIdx.x) < count) tile[threadIdx.x] = segments[t0 + threadIdx.x];
    __syncthreads();
    for (int k = 0; k < count; ++k) {
      const AdamWSegment seg = tile[k];
      const size_t chunks = (seg.numel + kChunk - 1) / kChunk;
      const size_t end = seg.offset + seg.numel;
      const bool vec = aligned && seg.offset % kWidth == 0;
      // This block's first chunk at or after first_chunk: the next number congruent to blockIdx.x.
      const size_t skip = (blockIdx.x + G - first_chunk % G) % G;
      for (size_t c = skip; c < chunks; c += G) {
        const size_t i = seg.offset + c * kChunk + size_t(threadIdx.x) * kWidth;
        if (i < end) adamw_group(params, params_x, grads, m, v, i, end, vec, seg.weight_decay, h);
      }
      first_chunk += chunks;
    }
  }
}

// The persistent grid: as many blocks as the GPU holds at once.
template <typename X>
int persistent_grid() {
  int per_sm = 0;
  MEG_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, adamw_kernel<X>, kBlock, 0));
  return std::max(1, multiprocessors() * per_sm);
}

}  // namespace

template <typename X>
void adamw_step(float* params, X* params_x, const float* grads, float* m, float* v,
                const AdamWSegment* segments, int num_segments, float lr, float beta1, float beta2,
                float eps, float grad_scale, int64_t t, cudaStream_t stream) {
  if (num_segments <= 0) return;
  // As cpu::adamw_step: the weights of moments that start at zero sum to 1 - beta^t after t steps.
  const double c1 = 1.0 - std::pow(double(beta1), double(t));
  const double c2 = 1.0 - std::pow(double(beta2), double(t));
  const Hyper h{lr, beta1, beta2, eps, grad_scale, float(c1), float(c2)};
  const bool aligned = aligned16(params) && aligned16(grads) && aligned16(m) && aligned16(v) &&
                       (params_x == nullptr || aligned16(params_x));
  adamw_kernel<X><<<persistent_grid<X>(), kBlock, 0, stream>>>(params, params_x, grads, m, v,
                                                               segments, num_segments, h, aligned);
  MEG_CUDA_CHECK(cudaGetLastError());
}

#define MEG_INSTANTIATE(X)                                                                        \
  template void adamw_step<X>(float*, X*, const float*, float*, float*, const AdamWSegment*, int, \
                              float, float, float, float, float, int64_t, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
