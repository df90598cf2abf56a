// Token (+ learned position) embedding on the GPU, for activations X = fp32, bf16 or fp16; the
// gradients of the tables are fp32.
//
// The CPU reference is ops/cpu/embedding.cpp; the launchers are declared in ops/cuda/ops.hpp.
//
// Forward: a gather. Each thread copies one vector of W channels (16 bytes: W = 8 for bf16/fp16,
// 4 for fp32) of one output row from its token's row of wte, plus the position's row of wpe. When
// C is not a multiple of W or a pointer is misaligned, the same kernel runs with W = 1.
//
// Backward: a scatter-add, where two positions holding the same token add into the same row of
// dwte. Atomics would add them in arrival order, and meg is reproducible bit for bit, so the host
// groups the positions by token first (group_positions_by_token, from the host copy of the
// batch). Then one block per token group owns its dwte row outright: each thread takes a vector
// of channels, adds the group's dout rows in position order in registers, and adds the sum into
// dwte once. Position rows of dwpe are the same with the B rows b*T + t as the group, by further
// blocks of the same launch. No two blocks write the same row, so there is nothing to order
// between them. A token that fills much of the batch makes one long block: the price of adding in
// position order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "common.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kPrefetch = 8;  // dout rows loaded ahead of their (in-order) adds

// One thread per vector of W channels of the output, rows one after the other.
template <typename X, int W>
__global__ void embedding_forward_kernel(X* out, const int32_t* tokens, const X* wte, const X* wpe,
                                         const int32_t* positions, TokenLog log, int N, int T, int C,
                                         int vocab_begin, int vocab_size) {
  using V = Vec<X, W>;
  const int nvec = C / W;
  const size_t total = size_t(N) * nvec;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int row = int(idx / nvec), i = int(idx % nvec);
    if (log.history && i == 0)
      log.history[size_t(log.slots[row]) * log.max_length + positions[row]] = tokens[row];
    const int token = tokens[row] - vocab_begin;
    V o;
    if (token >= 0 && token < vocab_size) {
      o = reinterpret_cast<const V*>(wte)[size_t(token) * nvec + i];
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) o.v[j] = X(0.0f);
    }
    if (wpe) {
      const int position = positions ? positions[row] : row % T;
      const V p = reinterpret_cast<const V*>(wpe)[size_t(position) * nvec + i];
#pragma unroll
      for (int j = 0; j < W; ++j) o.v[j] = X(float(o.v[j]) + float(p.v[j]));
    }
    reinterpret_cast<V*>(out)[idx] = o;
  }
}

// acc += the COUNT rows row_of(0), row_of(1), ... of dout at vector i, added in that order. The
// loads run kPrefetch rows ahead of the adds, so several are in flight at once.
template <typename X, int W, typename RowOf>
__device__ void add_rows(float (&acc)[W], const Vec<X, W>* dout, int nvec, int i, int count,
                         RowOf row_of) {
  int k = 0;
  for (; k + kPrefetch <= count; k += kPrefetch) {
    Vec<X, W> v[kPrefetch];
#pragma unroll
    for (int u = 0; u < kPrefetch; ++u) v[u] = dout[size_t(row_of(k + u)) * nvec + i];
#pragma unroll
    for (int u = 0; u < kPrefetch; ++u)
#pragma unroll
      for (int j = 0; j < W; ++j) acc[j] += float(v[u].v[j]);
  }
  for (; k < count; ++k) {
    const Vec<X, W> v = dout[size_t(row_of(k)) * nvec + i];
#pragma unroll
    for (int j = 0; j < W; ++j) acc[j] += float(v.v[j]);
  }
}

// Blocks [0, U): token group u, into dwte[unique[u]]. Blocks [U, U + T): position t, into dwpe[t].
// Each thread takes vectors i, i + blockDim.x, ... of the row.
template <typename X, int W>
__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const X* dout,
                                          const int32_t* unique, const int32_t* starts,
                                          const int32_t* positions, int U, int T, int B, int C) {
  using V = Vec<X, W>;
  using F = Vec<float, W>;
  const int nvec = C / W;
  const V* dy = reinterpret_cast<const V*>(dout);
  const bool token = int(blockIdx.x) < U;
  const int u = blockIdx.x, t = blockIdx.x - U;
  F* dst = reinterpret_cast<F*>(token ? dwte + size_t(unique[u]) * C : dwpe + size_t(t) * C);
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    float acc[W] = {};
    if (token) {
      const int begin = starts[u];
      add_rows(acc, dy, nvec, i, starts[u + 1] - begin,
               [&](int k) { return positions[begin + k]; });
    } else {
      add_rows(acc, dy, nvec, i, B, [&](int b) { return b * T + t; });
    }
    F g = dst[i];
#pragma unroll
    for (int j = 0; j < W; ++j) g.v[j] += acc[j];
    dst[i] = g;
  }
}

template <typename X, int W>
void launch_forward(X* out, const int32_t* tokens, const X* wte, const X* wpe, const int32_t* positions,
                    const TokenLog& log, int B, int T, int C, int vocab_begin, int vocab_size, cudaStream_t stream) {
  const unsigned grid = grid_stride_blocks(size_t(B) * T * (C / W), kBlock);
  embedding_forward_kernel<X, W><<<grid, kBlock, 0, stream>>>(out, tokens, wte, wpe, positions, log, B * T, T, C,
                                                              vocab_begin, vocab_size);
  MEG_CUDA_CHECK(cudaGetLastError());
}

template <typename X, int W>
void launch_backward(float* dwte, float* dwpe, const X* dout, const int32_t* unique,
                     const int32_t* starts, const int32_t* positions, int U, int B, int T, int C,
                     cudaStream_t stream) {
  // As many whole warps as the row has vectors, up to kBlock (then each thread takes several).
  const int nvec = C / W;
  const int threads = std::min(kBlock, ceil_div(nvec, kWarp) * kWarp);
  const int blocks = U + (dwpe ? T : 0);
  embedding_backward_kernel<X, W><<<blocks, threads, 0, stream>>>(dwte, dwpe, dout, unique, starts,
                                                                  positions, U, T, B, C);
  MEG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

template <typename X>
void embedding_forward(X* out, const int32_t* tokens, const X* wte, const X* wpe, int B, int T,
                       int C, int vocab_begin, int vocab_size, cudaStream_t stream, const int32_t* positions,
                       const TokenLog& log) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  if (log.history && (!positions || !log.slots))
    throw std::invalid_argument("embedding_forward: a token log needs the rows' positions and slots");
  constexpr int W = kVecWidth<X>;
  if (C % W == 0 && aligned16(out) && aligned16(wte) && aligned16(wpe))
    launch_forward<X, W>(out, tokens, wte, wpe, positions, log, B, T, C, vocab_begin, vocab_size, stream);
  else
    launch_forward<X, 1>(out, tokens, wte, wpe, positions, log, B, T, C, vocab_begin, vocab_size, stream);
}

TokenGroups group_positions_by_token(const int32_t* tokens, int N, int vocab_begin, int vocab_size) {
  TokenGroups g;
  const auto mine = [&](int32_t p) { return tokens[p] >= vocab_begin && tokens[p] - vocab_begin < vocab_size; };
  // This range's positions sorted by token; the sort is stable, so each token's positions stay
  // ascending.
  for (int32_t p = 0; p < N; ++p)
    if (mine(p)) g.positions.push_back(p);
  std::stable_sort(g.positions.begin(), g.positions.end(),
                   [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
  const int kept = static_cast<int>(g.positions.size());
  for (int k = 0; k < kept; ++k) {
    const int32_t row = tokens[g.positions[size_t(k)]] - vocab_begin;
    if (k == 0 || row != g.unique.back()) {
      g.unique.push_back(row);
      g.starts.push_back(k);
    }
  }
  g.starts.push_back(kept);
  return g;
}

template <typename X>
void embedding_backward(float* dwte, float* dwpe, const X* dout, const int32_t* unique,
                        const int32_t* starts, const int32_t* positions, int U, int B, int T, int C,
                        cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  if (!dwte) U = 0;  // no token blocks
  if (U == 0 && !dwpe) return;
  constexpr int W = kVecWidth<X>;
  // The fp32 rows of dwte and dwpe are read and written W values at a time too.
  const size_t fbytes = sizeof(Vec<float, W>);
  if (C % W == 0 && aligned16(dout) && aligned(dwte, fbytes) && aligned(dwpe, fbytes))
    launch_backward<X, W>(dwte, dwpe, dout, unique, starts, positions, U, B, T, C, stream);
  else
    launch_backward<X, 1>(dwte, dwpe, dout, unique, starts, positions, U, B, T, C, stream);
}

#define MEG_INSTANTIATE(X)                                                                      \
  template void embedding_forward<X>(X*, const int32_t*, const X*, const X*, int, int, int, int, \
                                     int, cudaStream_t, const int32_t*, const TokenLog&);       \
  template void embedding_backward<X>(float*, float*, const X*, const int32_t*, const int32_t*, \
                                      const int32_t*, int, int, int, int, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
