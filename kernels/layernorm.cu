// LayerNorm forward and backward on the GPU, fp32 in and out, fp32 accumulation.
//
// The CPU reference is ops/cpu/norms.cpp; the launchers are declared in ops/cuda/ops.hpp.
//
// Forward and dinp: rows are independent, so one warp takes one row. Its 32 lanes stride over the
// channels (consecutive lanes read consecutive floats, so every load is coalesced), and the row's
// sums are finished with warp shuffles: no shared memory and no __syncthreads. The row is read
// two or three times; after the first pass it sits in L1/L2, so the later passes are cheap.
//
// dweight and dbias: sums over all N rows, for every channel. We do NOT use atomics: fp32 atomics
// add in whatever order the blocks arrive, so the gradients would differ in their last bits from
// run to run, and the rest of meg is bit-for-bit reproducible. Instead:
//   1. layernorm_backward_params_partial_kernel: the rows are cut into at most kMaxChunks chunks;
//      block (channel tile, chunk) sums its chunk's rows for 32 channels into a scratch buffer
//      partial[chunk][C];
//   2. layernorm_backward_params_reduce_kernel: one thread per channel adds the chunks' partials
//      in chunk order and accumulates the total into dweight / dbias.
// Every addition happens in a fixed order, so the result is deterministic, and it is correct for
// any N: the first kernel's grid grows with C and the chunk count, the chunk length with N.
// The scratch buffer (2 * chunks * C floats) comes from cudaMallocAsync on the caller's stream,
// which the driver's memory pool serves without a device-wide synchronisation.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kBlock = 256;  // threads per block of the row kernels: 8 warps, 8 rows
constexpr int kRowsPerBlock = kBlock / kWarp;

// dweight/dbias partials: a block is 32 channels x 8 row lanes.
constexpr int kTileC = 32;
constexpr int kTileRows = 8;
constexpr int kMinRowsPerChunk = 64;  // below this a chunk is not worth a block
constexpr int kMaxChunks = 256;       // bounds the scratch size and the reduce kernel's loop

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Sum of v over the 32 lanes of the warp, returned to every lane. The butterfly (xor) pattern
// adds in the same order on every run.
__device__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// One warp per row. Two passes for the statistics (mean, then squared deviations from it), as the
// CPU reference does: E[x^2] - E[x]^2 cancels badly when the mean is large against the spread.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int N, int C,
                                         float eps) {
  const int lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  // The whole warp shares ROW, so it leaves together and the shuffles below see all 32 lanes.
  if (row >= N) return;
  const float* x = inp + size_t(row) * C;
  float* y = out + size_t(row) * C;

  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarp) sum += x[c];
  const float m = warp_sum(sum) / C;

  float sq = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float d = x[c] - m;
    sq += d * d;
  }
  const float s = rsqrtf(warp_sum(sq) / C + eps);  // biased variance, as torch.nn.LayerNorm

  for (int c = lane; c < C; c += kWarp) {
    const float norm = (x[c] - m) * s;
    y[c] = norm * weight[c] + (bias ? bias[c] : 0.0f);
  }
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = s;
  }
}

// One warp per row. With norm = (x - mean) * rstd and dnorm = weight * dout, the gradient through
// the mean and the variance reduces to
//   dx = rstd * (dnorm - mean_c(dnorm) - norm * mean_c(dnorm * norm)),
// so one pass gathers the two row means and a second writes dx.
__global__ void layernorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                               const float* weight, const float* mean,
                                               const float* rstd, int N, int C) {
  const int lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= N) return;  // whole warp, as in the forward
  const size_t offset = size_t(row) * C;
  const float* x = inp + offset;
  const float* dy = dout + offset;
  float* dx = dinp + offset;
  const float m = mean[row];
  const float s = rstd[row];

  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float norm = (x[c] - m) * s;
    const float dnorm = weight[c] * dy[c];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * norm;
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / C;
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / C;

  for (int c = lane; c < C; c += kWarp) {
    const float norm = (x[c] - m) * s;
    const float dnorm = weight[c] * dy[c];
    dx[c] += s * (dnorm - dnorm_mean - norm * dnorm_norm_mean);  // accumulate, as on the CPU
  }
}

// Block (blockIdx.x, blockIdx.y) = (tile of 32 channels, chunk of rows). threadIdx.x picks the
// channel, so a warp reads 32 consecutive floats of one row (coalesced); threadIdx.y picks one of
// 8 interleaved row lanes. The 8 lanes' sums are then added in shared memory in lane order.
// Writes partial_dweight[chunk][c] and partial_dbias[chunk][c].
__global__ void layernorm_backward_params_partial_kernel(float* partial_dweight,
                                                         float* partial_dbias, const float* dout,
                                                         const float* inp, const float* mean,
                                                         const float* rstd, int N, int C,
                                                         int rows_per_chunk) {
  const int c = blockIdx.x * kTileC + threadIdx.x;
  const int chunk = blockIdx.y;
  const int row_begin = chunk * rows_per_chunk;
  const int row_end = min(N, row_begin + rows_per_chunk);

  float dw = 0.0f, db = 0.0f;
  if (c < C) {
    for (int i = row_begin + threadIdx.y; i < row_end; i += kTileRows) {
      const size_t idx = size_t(i) * C + c;
      const float dy = dout[idx];
      dw += (inp[idx] - mean[i]) * rstd[i] * dy;
      db += dy;
    }
  }

  // [y][x] layout: the final loop reads along a column, 32 consecutive words: no bank conflicts.
  __shared__ float s_dw[kTileRows][kTileC];
  __shared__ float s_db[kTileRows][kTileC];
  s_dw[threadIdx.y][threadIdx.x] = dw;
  s_db[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < kTileRows; ++k) {
      dw += s_dw[k][threadIdx.x];
      db += s_db[k][threadIdx.x];
    }
    partial_dweight[size_t(chunk) * C + c] = dw;
    partial_dbias[size_t(chunk) * C + c] = db;
  }
}

// One thread per channel: adds the chunks' partials in chunk order, then accumulates.
__global__ void layernorm_backward_params_reduce_kernel(float* dweight, float* dbias,
                                                        const float* partial_dweight,
                                                        const float* partial_dbias, int chunks,
                                                        int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float dw = 0.0f, db = 0.0f;
  for (int k = 0; k < chunks; ++k) {
    dw += partial_dweight[size_t(k) * C + c];
    db += partial_dbias[size_t(k) * C + c];
  }
  if (dweight) dweight[c] += dw;
  if (dbias) dbias[c] += db;
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  layernorm_forward_kernel<<<ceil_div(N, kRowsPerBlock), kBlock, 0, stream>>>(
      out, mean, rstd, inp, weight, bias, N, C, eps);
  MEG_CUDA_CHECK(cudaGetLastError());
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  if (dinp) {
    layernorm_backward_dinp_kernel<<<ceil_div(N, kRowsPerBlock), kBlock, 0, stream>>>(
        dinp, dout, inp, weight, mean, rstd, N, C);
    MEG_CUDA_CHECK(cudaGetLastError());
  }
  if (dweight || dbias) {
    // As many chunks as keep every chunk at least kMinRowsPerChunk long, capped at kMaxChunks;
    // then spread the rows evenly over them.
    const int chunks = std::clamp(N / kMinRowsPerChunk, 1, kMaxChunks);
    const int rows_per_chunk = ceil_div(N, chunks);
    float* scratch = nullptr;
    MEG_CUDA_CHECK(cudaMallocAsync(&scratch, 2 * size_t(chunks) * C * sizeof(float), stream));
    float* partial_dweight = scratch;
    float* partial_dbias = scratch + size_t(chunks) * C;

    const dim3 grid(ceil_div(C, kTileC), chunks);
    const dim3 block(kTileC, kTileRows);
    layernorm_backward_params_partial_kernel<<<grid, block, 0, stream>>>(
        partial_dweight, partial_dbias, dout, inp, mean, rstd, N, C, rows_per_chunk);
    MEG_CUDA_CHECK(cudaGetLastError());
    layernorm_backward_params_reduce_kernel<<<ceil_div(C, kBlock), kBlock, 0, stream>>>(
        dweight, dbias, partial_dweight, partial_dbias, chunks, C);
    MEG_CUDA_CHECK(cudaGetLastError());
    MEG_CUDA_CHECK(cudaFreeAsync(scratch, stream));
  }
}

}  // namespace meg::cuda
