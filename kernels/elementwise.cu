// Small memory-bound ops on the GPU, for activations X = fp32, bf16 or fp16 (fp32 arithmetic):
//   - add: the residual connection, out = a + b;
//   - cast_from_float: the compute copy X of fp32 master weights;
//   - bias_backward: the bias gradient of a linear layer, a column sum of dout.
//
// The launchers are declared in ops/cuda/ops.hpp.
//
// add and cast are purely elementwise: each thread moves W consecutive values per step with one
// 16-byte access per X array (W = 8 for bf16/fp16, 4 for fp32), in a grid-stride loop. Vector
// accesses need aligned addresses, so the launcher checks the pointers and falls back to the same
// kernel with W = 1 when one is misaligned (a view that starts mid-tensor, say). The ragged tail
// (n not a multiple of W) is done one element at a time.
//
// bias_backward sums each column over all N rows without atomics (they would add in arrival order
// and break meg's bit-for-bit reproducibility). The rows are cut into chunks; block (column tile,
// chunk) adds its chunk's rows into one partial row of SCRATCH, 8 interleaved row lanes then added
// in lane order; accumulate_column_sums (kernels/column_sums.cuh) adds the partial rows in chunk
// order into dbias. The chunk count depends on N alone, so the order, and the result, is the same
// on every run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "column_sums.cuh"
#include "common.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kBlock = 256;

// bias_backward: a block is 32 column vectors x kRowLanes row lanes; a chunk has at least
// kMinChunkRows rows and there are at most kMaxChunks chunks (the scratch rows).
constexpr int kRowLanes = 8;
constexpr int kMinChunkRows = 32;
constexpr int kMaxChunks = 256;
constexpr int kReduceLanes = 16;  // row lanes of the reduction of the chunks' partial rows

// Thread t handles values [W t, W t + W) of each stride. out may equal a or b: every value is read
// before it is written, by the same thread.
template <typename X, int W>
__global__ void add_kernel(X* out, const X* a, const X* b, size_t n) {
  using V = Vec<X, W>;
  const size_t stride = size_t(gridDim.x) * blockDim.x * W;
  for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * W; i < n; i += stride) {
    if (i + W <= n) {
      const V av = *reinterpret_cast<const V*>(a + i);
      const V bv = *reinterpret_cast<const V*>(b + i);
      V ov;
#pragma unroll
      for (int j = 0; j < W; ++j) ov.v[j] = X(float(av.v[j]) + float(bv.v[j]));
      *reinterpret_cast<V*>(out + i) = ov;
    } else {
      for (size_t j = i; j < n; ++j) out[j] = X(float(a[j]) + float(b[j]));
    }
  }
}

// W fp32 values in (one or two 16-byte loads), W values of X out (one 16-byte store).
template <typename X, int W>
__global__ void cast_from_float_kernel(X* out, const float* inp, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x * W;
  for (size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * W; i < n; i += stride) {
    if (i + W <= n) {
      const Vec<float, W> v = *reinterpret_cast<const Vec<float, W>*>(inp + i);
      Vec<X, W> o;
#pragma unroll
      for (int j = 0; j < W; ++j) o.v[j] = X(v.v[j]);
      *reinterpret_cast<Vec<X, W>*>(out + i) = o;
    } else {
      for (size_t j = i; j < n; ++j) out[j] = X(inp[j]);
    }
  }
}

int bias_chunks(int N) { return std::clamp(N / kMinChunkRows, 1, kMaxChunks); }

// Block (blockIdx.x, blockIdx.y) = (tile of 32 column vectors, chunk of rows). threadIdx.x picks
// the vector of W columns, so a warp reads 32 consecutive vectors of one row; threadIdx.y picks
// one of kRowLanes interleaved row lanes. Writes partial[chunk][columns of the tile].
template <typename X, int W>
__global__ void bias_backward_partial_kernel(float* partial, const X* dout, int N, int OC) {
  using V = Vec<X, W>;
  __shared__ float lane_sums[kRowLanes][kWarp * W];
  const int nvec = OC / W;
  const int i = blockIdx.x * kWarp + threadIdx.x;  // the column vector
  const int chunk = blockIdx.y;
  const int row_begin = int(int64_t(chunk) * N / gridDim.y);
  const int row_end = int(int64_t(chunk + 1) * N / gridDim.y);

  float sum[W] = {};
  if (i < nvec) {
    for (int r = row_begin + threadIdx.y; r < row_end; r += kRowLanes) {
      const V v = reinterpret_cast<const V*>(dout)[size_t(r) * nvec + i];
#pragma unroll
      for (int j = 0; j < W; ++j) sum[j] += float(v.v[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < W; ++j) lane_sums[threadIdx.y][threadIdx.x * W + j] = sum[j];
  __syncthreads();
  // The block's kWarp * W columns, added over the row lanes in lane order by the whole block.
  const int c0 = blockIdx.x * kWarp * W;
  for (int c = threadIdx.y * kWarp + threadIdx.x; c < kWarp * W && c0 + c < OC;
       c += kWarp * kRowLanes) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += lane_sums[lane][c];
    partial[size_t(chunk) * OC + c0 + c] = total;
  }
}

template <typename X, int W>
void launch_bias_backward(float* partial, const X* dout, int N, int OC, cudaStream_t stream) {
  const dim3 grid(ceil_div(OC / W, kWarp), bias_chunks(N));
  bias_backward_partial_kernel<X, W><<<grid, dim3(kWarp, kRowLanes), 0, stream>>>(partial, dout,
                                                                                  N, OC);
  MEG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

template <typename X>
void add(X* out, const X* a, const X* b, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int W = kVecWidth<X>;
  if (aligned16(out) && aligned16(a) && aligned16(b))
    add_kernel<X, W><<<grid_stride_blocks(n, kBlock * W), kBlock, 0, stream>>>(out, a, b, n);
  else
    add_kernel<X, 1><<<grid_stride_blocks(n, kBlock), kBlock, 0, stream>>>(out, a, b, n);
  MEG_CUDA_CHECK(cudaGetLastError());
}

template <typename X>
void cast_from_float(X* out, const float* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int W = kVecWidth<X>;
  if (aligned16(out) && aligned(inp, sizeof(Vec<float, W>)))
    cast_from_float_kernel<X, W>
        <<<grid_stride_blocks(n, kBlock * W), kBlock, 0, stream>>>(out, inp, n);
  else
    cast_from_float_kernel<X, 1><<<grid_stride_blocks(n, kBlock), kBlock, 0, stream>>>(out, inp, n);
  MEG_CUDA_CHECK(cudaGetLastError());
}

size_t bias_backward_scratch(int N, int OC) {
  return N <= 0 || OC <= 0 ? 0 : size_t(bias_chunks(N)) * OC;
}

template <typename X>
void bias_backward(float* dbias, const X* dout, int N, int OC, float* scratch,
                   cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  constexpr int W = kVecWidth<X>;
  if (OC % W == 0 && aligned16(dout))
    launch_bias_backward<X, W>(scratch, dout, N, OC, stream);
  else
    launch_bias_backward<X, 1>(scratch, dout, N, OC, stream);
  accumulate_column_sums<kReduceLanes>(dbias, scratch, nullptr, nullptr, bias_chunks(N), OC,
                                       stream);
}

#define MEG_INSTANTIATE(X)                                                            \
  template void add<X>(X*, const X*, const X*, size_t, cudaStream_t);                 \
  template void cast_from_float<X>(X*, const float*, size_t, cudaStream_t);           \
  template void bias_backward<X>(float*, const X*, int, int, float*, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
