// The chunk embedder's pooling (retro/embedder.hpp): each chunk's vector is the mean of the final
// norm's output over its real tokens. A thread per (chunk, channel) adds its column down the
// chunk's rows in position order; a warp reads 32 consecutive channels of a row, so the loads
// are coalesced.
#include <cuda_runtime.h>

#include "common.cuh"
#include "ops/cuda/check.hpp"
#include "retro/cuda_kernels.hpp"

namespace meg::cuda {

namespace {

constexpr int kPoolThreads = 128;

// blockIdx.x: the chunk; blockIdx.y: a tile of kPoolThreads channels.
template <typename X>
__global__ void mean_over_lengths_kernel(float* out, const X* x, const int32_t* lengths, int T, int C) {
  const int i = blockIdx.x, c = blockIdx.y * kPoolThreads + threadIdx.x;
  if (c >= C) return;
  const int length = lengths[i];
  const X* column = x + size_t(i) * T * C + c;
  float sum = 0.0f;
  for (int t = 0; t < length; ++t) sum += to_float(column[size_t(t) * C]);
  out[size_t(i) * C + c] = sum / float(length);
}

}  // namespace

template <typename X>
void mean_over_lengths(float* out, const X* x, const int32_t* lengths, int N, int T, int C, cudaStream_t stream) {
  if (N == 0) return;
  const dim3 grid(unsigned(N), unsigned(ceil_div(C, kPoolThreads)));
  mean_over_lengths_kernel<X><<<grid, kPoolThreads, 0, stream>>>(out, x, lengths, T, C);
  MEG_CUDA_CHECK(cudaGetLastError());
}

template void mean_over_lengths<float>(float*, const float*, const int32_t*, int, int, int, cudaStream_t);
template void mean_over_lengths<bf16>(float*, const bf16*, const int32_t*, int, int, int, cudaStream_t);
template void mean_over_lengths<fp16>(float*, const fp16*, const int32_t*, int, int, int, cudaStream_t);

}  // namespace meg::cuda
