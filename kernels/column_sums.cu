// The second stage of the deterministic column sums (kernels/column_sums.cuh): G partial rows of C
// fp32 values added, in a fixed order, into one row.
//
// Block = 32 channels x kLanes row lanes: lane y adds the contiguous partial rows
// [y G / kLanes, (y + 1) G / kLanes) in order, its loads kReduceAhead rows ahead of the adds so
// that they overlap; then the lanes' sums are added in lane order. A warp reads 32 consecutive
// channels of a row, so the loads are coalesced.
#include "column_sums.cuh"

#include <cuda_runtime.h>

#include <cstddef>

#include "common.cuh"
#include "ops/cuda/check.hpp"

namespace meg::cuda {

namespace {

constexpr int kReduceAhead = 8;  // partial rows loaded ahead of their adds

// blockIdx.y picks the (out, partial) pair.
template <int kLanes>
__global__ void column_sums_kernel(float* out0, const float* partial0, float* out1,
                                   const float* partial1, int G, int C) {
  __shared__ float lane_sums[kLanes][kWarp];
  float* out = blockIdx.y == 0 ? out0 : out1;
  const float* partial = blockIdx.y == 0 ? partial0 : partial1;
  const int c = blockIdx.x * kWarp + threadIdx.x;
  float s = 0.0f;
  if (c < C) {
    const int g_end = (threadIdx.y + 1) * G / kLanes;
    int g = threadIdx.y * G / kLanes;
    for (; g + kReduceAhead <= g_end; g += kReduceAhead) {
      float v[kReduceAhead];
#pragma unroll
      for (int u = 0; u < kReduceAhead; ++u) v[u] = partial[size_t(g + u) * C + c];
#pragma unroll
      for (int u = 0; u < kReduceAhead; ++u) s += v[u];
    }
    for (; g < g_end; ++g) s += partial[size_t(g) * C + c];
  }
  lane_sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int y = 1; y < kLanes; ++y) s += lane_sums[y][threadIdx.x];
    out[c] += s;
  }
}

}  // namespace

template <int kLanes>
void accumulate_column_sums(float* out0, const float* partial0, float* out1,
                            const float* partial1, int G, int C, cudaStream_t stream) {
  const dim3 grid(ceil_div(C, kWarp), out1 ? 2 : 1);
  column_sums_kernel<kLanes><<<grid, dim3(kWarp, kLanes), 0, stream>>>(out0, partial0, out1,
                                                                       partial1, G, C);
  MEG_CUDA_CHECK(cudaGetLastError());
}

template void accumulate_column_sums<16>(float*, const float*, float*, const float*, int, int,
                                         cudaStream_t);
template void accumulate_column_sums<32>(float*, const float*, float*, const float*, int, int,
                                         cudaStream_t);

}  // namespace meg::cuda
