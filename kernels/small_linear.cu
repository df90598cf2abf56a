// The linear layers of a decode step (ops/cuda/ops.hpp's small_linear), for X = fp32, bf16 or fp16
// with fp32 arithmetic: N <= kSmallLinearMaxRows (3) rows against a weight matrix W [OC, C] that is
// read once, so the time is the time to stream W, and what matters is keeping enough of its bytes
// in flight.
//
// Each warp takes a task at a time: one weight row (for SwiGLU two, a gate row and its up row; at
// batch 1, two consecutive rows where rows are short), its lanes striding along the rows in
// 16-byte vectors, Loads vectors per lane (a chunk: kLoads, or kLongRowLoads for some long rows) at
// a time. Each lane keeps one fp32 partial sum per row and input row; a butterfly of shuffles adds
// them over the warp, and one lane per output applies the epilogue and writes it. The grid is
// persistent, at most kBlocksPerSM blocks of kWarps warps per multiprocessor (fewer where there are
// fewer tasks than warps: launch()), and a warp walks its tasks chunk by chunk with two register
// buffers, the next chunk in flight while it multiplies the last.
// A block first stages the N input rows, through the norm when one comes first and rounded to X,
// into shared memory: a few kilobytes from L2 per block, against the weights it streams. The
// norm's weight and bias go to shared memory too, requested before the wait for the previous
// kernel (cp.async), so that the staging after the wait makes one round trip to memory, for the
// rows, rather than two. (Staging the rows beat a block per four rows with no pipelining at the
// larger models' shapes, and made every model's whole step faster.)
//
// The fused QKV projection of a decode step also does kv_cache_append's work in its epilogue
// (kv_append): with RoPE a task's two rows are a head's columns i and i + HS/2, which it turns
// together, and the rotated q, k and the v go where kv_cache_append would put them.
//
// The output layer of a greedy decode step also does argmax_rows' work in its epilogue (argmax):
// each output lane keeps its row's best (value, column) as one 64-bit key whose unsigned order is
// argmax_rows' (argmax_key()), a block merges its warps' keys in shared memory and its first thread
// merges the block's into the launch's scratch with one atomicMax a row; the last block to finish
// turns the keys into tokens and zeroes the scratch. That saves the argmax's launch, a block a row
// reading the whole row back after the product's end.
//
// The launch overlaps the kernel before it (kernels/overlapped_launch.cuh): a warp requests its
// first weights, which no kernel writes, before it waits for that kernel, whose output is this
// one's input. A decode step's chain of short kernels then streams weights through what would be
// each launch's ramp-up and the previous kernel's tail.
//
// The weights are loaded with the streaming hint (__ldcs, evict first): they are read once a step
// and would only push the activations out of L2.
//
// Numerics, as the unfused path (norm kernel, cuBLASLt product, elementwise kernel): the norm is
// layernorm_forward's (two passes, biased variance) and its output is rounded to X; the product
// accumulates in fp32 (in another order than cuBLASLt's); y = product + bias is rounded to X before
// the residual add and the SwiGLU, while GELU takes the fp32 y, as cuBLASLt's fused GELU does.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "activations.cuh"
#include "async_copy.cuh"
#include "common.cuh"
#include "kernel_timeline.cuh"
#include "overlapped_launch.cuh"
#include "rotary.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

MEG_KERNEL_TIMELINE_TABLE(small_linear)

namespace {

using Epilogue = SmallLinearEpilogue;

constexpr int kWarps = 8;
constexpr int kBlocksPerSM = 2;  // the persistent grid's
constexpr int kThreads = kWarps * kWarp;
// 16-byte weight vectors a lane has in flight, per buffer: kLoads, or for one input row of one-row
// tasks kLongRowLoads where that cuts the rows into fewer chunks. GPT-2 1.5B's second MLP product
// (800-vector rows, one task a warp) then takes its rows in three chunks (10, 10 and 5 vectors a
// lane) rather than four (8, 8, 8 and 1), the last almost idle. Not for every product: where 10
// loads cut no fewer chunks they cut uneven ones (Llama 1B's 1024-vector rows in 10, 10, 10 and 2
// rather than four of 8, which was slower), and a chunk length chosen at run time costs more than
// equal chunks gain; so the loads are a template parameter, compiled apart.
constexpr int kLoads = 8;
constexpr int kLongRowLoads = 10;
constexpr size_t kMaxStagedBytes = 96 * 1024;  // the staged rows' and norm's shared memory, at most

// Tasks of a product of OC rows, R rows a task (launch_rows() chooses R).
template <int R>
__host__ __device__ int task_count(int OC) {
  return OC / R;
}

// The kernel's arguments but the argmax epilogue's, which are a second parameter of their own: with
// them as members (Args from 120 bytes to 152) every kernel's code changed, reading its fields from
// parameter space again inside its loops, which made Llama 1B's SwiGLU products markedly slower.
template <typename X>
struct Args {
  X* out;
  const X *inp, *W, *bias;
  SmallLinearNorm<X> norm;
  SmallLinearKvAppend<X> kv;  // the kv_append epilogue's
  int C, OC;
};

// For each of the N values: the sum of V over the block's threads, added in warp order, returned
// to every thread.
template <int N>
__device__ void block_sums(float (&v)[N], float (*scratch)[N]) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
  for (int n = 0; n < N; ++n) v[n] = warp_sum(v[n]);
  if (lane == 0) {
#pragma unroll
    for (int n = 0; n < N; ++n) scratch[warp][n] = v[n];
  }
  __syncthreads();
#pragma unroll
  for (int n = 0; n < N; ++n) {
    float s = 0.0f;
    for (int w = 0; w < kWarps; ++w) s += scratch[w][n];
    v[n] = s;
  }
  __syncthreads();  // everyone has read scratch before it is written again
}

// The norm's weight and bias (if any) into NORM_PARAMS [2, C], each thread the vectors
// stage_input() will read: they are visible to it after its cp_async_wait, without a barrier.
template <typename X>
__device__ void request_norm_params(X* norm_params, const Args<X>& a) {
  const int nvec = a.C / kVecWidth<X>;
  const uint32_t g = smem_addr(norm_params), b = smem_addr(norm_params + a.C);
  for (int i = threadIdx.x; i < nvec; i += kThreads) {
    cp_async_16(g + uint32_t(i) * 16, reinterpret_cast<const uint4*>(a.norm.weight) + i, true);
    if (a.norm.bias) cp_async_16(b + uint32_t(i) * 16, reinterpret_cast<const uint4*>(a.norm.bias) + i, true);
  }
  cp_async_commit();
}

// XS [N, C] = norm(inp), rounded to X; without a norm, inp itself. Each thread normalises the
// vectors it copied, so the only barriers are those of the row sums and the last one. NORM_PARAMS
// holds the norm's weight and bias as request_norm_params() left them.
template <typename X, int N>
__device__ void stage_input(X* xs, const X* norm_params, const Args<X>& a) {
  constexpr int W = kVecWidth<X>;
  using V = Vec<X, W>;
  __shared__ float scratch[kWarps][N];
  const int nvec = a.C / W;
  const V* in = reinterpret_cast<const V*>(a.inp);
  V* x = reinterpret_cast<V*>(xs);
  const SmallLinearNorm<X>& norm = a.norm;

  const bool layernorm = norm.weight && !norm.rms;  // which needs the rows' sums
  float sum[N] = {};
#pragma unroll
  for (int n = 0; n < N; ++n) {
    for (int i = threadIdx.x; i < nvec; i += kThreads) {
      const V v = in[size_t(n) * nvec + i];
      x[n * nvec + i] = v;
      if (!layernorm) continue;
#pragma unroll
      for (int w = 0; w < W; ++w) sum[n] += to_float(v.v[w]);
    }
  }
  if (!norm.weight) {
    __syncthreads();
    return;
  }
  float mean[N] = {};
  if (layernorm) {
    block_sums<N>(sum, scratch);
#pragma unroll
    for (int n = 0; n < N; ++n) mean[n] = sum[n] / a.C;
  }
  float sq[N] = {};
#pragma unroll
  for (int n = 0; n < N; ++n) {
    for (int i = threadIdx.x; i < nvec; i += kThreads) {
      const V v = x[n * nvec + i];
#pragma unroll
      for (int w = 0; w < W; ++w) {
        const float d = to_float(v.v[w]) - mean[n];  // mean 0 for RMSNorm: d = x exactly
        sq[n] += d * d;
      }
    }
  }
  block_sums<N>(sq, scratch);
  cp_async_wait<0>();  // this thread's vectors of the weight and bias
  const V* g = reinterpret_cast<const V*>(norm_params);
  const V* b = norm.bias ? reinterpret_cast<const V*>(norm_params + a.C) : nullptr;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const float rstd = rsqrtf(sq[n] / a.C + norm.eps);
    for (int i = threadIdx.x; i < nvec; i += kThreads) {
      const V v = x[n * nvec + i], gv = g[i];
      V bv;
      if (b) bv = b[i];
      V y;
#pragma unroll
      for (int w = 0; w < W; ++w)
        y.v[w] = from_float<X>((to_float(v.v[w]) - mean[n]) * rstd * to_float(gv.v[w]) +
                               (b ? to_float(bv.v[w]) : 0.0f));
      x[n * nvec + i] = y;
    }
  }
  __syncthreads();
}

// Output (n, col) of y = product + BIAS (fp32), through the epilogue (not SwiGLU's); RESIDUAL is
// the residual epilogue's out[n, col] before the add.
template <typename X, Epilogue E>
__device__ void write_output(const Args<X>& a, int n, int col, float product, float bias, float residual) {
  const float y = product + bias;
  X* o = a.out + size_t(n) * a.OC + col;
  if constexpr (E == Epilogue::gelu) *o = from_float<X>(gelu(y));
  else if constexpr (E == Epilogue::residual) *o = from_float<X>(residual + to_float(from_float<X>(y)));
  else *o = from_float<X>(y);
}

// Where row n's head h goes in the KV cache (its column 0): null for a query head.
template <typename X>
__device__ X* cache_row(const SmallLinearKvAppend<X>& kv, int n, int h) {
  if (h < kv.NH) return nullptr;
  const bool key = h < kv.NH + kv.NKV;
  const int g = key ? h - kv.NH : h - kv.NH - kv.NKV;
  const size_t row = (size_t(kv.slots[n]) * kv.NKV + g) * kv.max_length + kv.positions[n];
  return (key ? kv.k_cache : kv.v_cache) + row * kv.HS;
}

// Row n's pair of columns (i, i + HS/2) of head h, which task TASK holds (y0, y1: products plus
// biases), as kv_cache_append turns and caches them: rounded to X as a product's output, q and k
// rotated by the row's position, all written to the projection, k and v to the cache.
template <typename X>
__device__ void append_kv_pair(const Args<X>& a, int n, int task, float y0, float y1) {
  const SmallLinearKvAppend<X>& kv = a.kv;
  const int half = kv.HS / 2, h = task / half, i = task % half, col = h * kv.HS + i;
  X lo = from_float<X>(y0);
  X hi = from_float<X>(y1);
  if (kv.rope_table && h < kv.NH + kv.NKV) {
    const float2 cs = reinterpret_cast<const float2*>(kv.rope_table)[size_t(kv.positions[n]) * half + i];
    const float2 y = rotate_pair(to_float(lo), to_float(hi), cs.x, cs.y);
    lo = from_float<X>(y.x);
    hi = from_float<X>(y.y);
  }
  X* out = a.out + size_t(n) * a.OC + col;
  out[0] = lo;
  out[half] = hi;
  if (X* dst = cache_row(kv, n, h)) {
    dst[i] = lo;
    dst[i + half] = hi;
  }
}

// Row n's column COL (Y: product plus bias) without RoPE, as kv_cache_append caches it.
template <typename X>
__device__ void append_kv_column(const Args<X>& a, int n, int col, float y) {
  const X v = from_float<X>(y);
  a.out[size_t(n) * a.OC + col] = v;
  if (X* dst = cache_row(a.kv, n, col / a.kv.HS)) dst[col % a.kv.HS] = v;
}

// Column COL's key for the argmax epilogue, from its value V as stored: keys order as argmax_rows
// chooses, a larger value first and among equal values the lower column; 0, which never wins, for
// NaN. The float's bits are made to order as unsigned integers (negative values' bits inverted,
// the others' sign bit set), -0 counted as +0, which compare equal.
__device__ unsigned long long argmax_key(float v, int col) {
  if (isnan(v)) return 0;
  if (v == 0.0f) v = 0.0f;
  const unsigned bits = __float_as_uint(v);
  const unsigned ordered = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
  return static_cast<unsigned long long>(ordered) << 32 | (0xffffffffu - unsigned(col));
}
__device__ int argmax_column(unsigned long long key) { return key ? int(0xffffffffu - unsigned(key)) : 0; }
__device__ float argmax_value(unsigned long long key) {
  if (!key) return NAN;
  const unsigned ordered = unsigned(key >> 32);
  return __uint_as_float(ordered & 0x80000000u ? ordered & 0x7fffffffu : ~ordered);
}

// The argmax epilogue's end, with BEST lane n's key of row n over its tasks (0: none): the block's
// keys per row merged in BLOCK_BEST (zeroed before the input's staging barriers), then into the
// scratch; the last block to arrive writes the tokens and leaves the scratch zero.
template <int N>
__device__ void finish_argmax(const SmallLinearArgmax& m, unsigned long long best, unsigned long long* block_best) {
  const int lane = threadIdx.x % kWarp;
  if (lane < N && best) atomicMax(block_best + lane, best);
  __syncthreads();
  if (threadIdx.x != 0) return;
  SmallLinearArgmaxScratch& scratch = *m.scratch;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    if (block_best[n]) atomicMax(scratch.best + n, block_best[n]);
  }
  __threadfence();  // the keys before the count that says they are there
  if (atomicAdd(&scratch.blocks_done, 1u) != gridDim.x - 1) return;
  __threadfence();
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const unsigned long long key = atomicExch(scratch.best + n, 0ull);
    m.tokens[n] = argmax_column(key);
    if (m.values) m.values[n] = argmax_value(key);
  }
  scratch.blocks_done = 0;
}

// A task's weight rows: SwiGLU's task t is output column t, from rows t (gate) and t + OC / 2 (up);
// kv_append's task of two rows t is the pair (i, i + HS/2) of head h = t / (HS/2), i = t % (HS/2);
// the others' task t is columns t R .. t R + R - 1.
template <typename X, Epilogue E, int R>
__device__ void task_rows(int (&rows)[R], int task, const Args<X>& a) {
  if constexpr (E == Epilogue::swiglu) {
    rows[0] = task;
    rows[1] = task + a.OC / 2;
  } else if constexpr (E == Epilogue::kv_append && R == 2) {
    const int half = a.kv.HS / 2;
    rows[0] = task / half * a.kv.HS + task % half;
    rows[1] = rows[0] + half;
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) rows[r] = task * R + r;
  }
}

// Vectors I0, I0 + kWarp, ... (those below NVEC) of each of the task's rows.
template <int R, int U, typename V>
__device__ void load_weights(V (&wv)[U][R], const uint4* w, const int (&rows)[R], int nvec, int i0) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int i = i0 + u * kWarp;
    if (i < nvec) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint4 raw = __ldcs(w + size_t(rows[r]) * nvec + i);
        memcpy(&wv[u][r], &raw, sizeof(raw));
      }
    }
  }
}

// What a task's epilogue reads besides its sums: its rows' biases (0 without), and for the
// residual epilogue, each input row n's residual out[n, column] of the task's columns. A warp
// requests them with the task's last chunk of weights, so that they arrive with it: read after
// the last sum, they would add a memory round trip to every warp's end, the kernel's tail. The
// residual is read through L2: the kernel may read it before it waits for the previous one
// (ops.hpp: that one did not write it).
template <int N, int R>
struct TaskInputs {
  float bias[R] = {};
  float residual[R][N] = {};  // the residual epilogue's
};

template <typename X, int N, Epilogue E, int R, bool Biased>
__device__ void load_inputs(TaskInputs<N, R>& t, const Args<X>& a, const int (&rows)[R]) {
  if constexpr (Biased) {
#pragma unroll
    for (int r = 0; r < R; ++r) t.bias[r] = to_float(a.bias[rows[r]]);
  }
  if constexpr (E == Epilogue::residual) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int n = 0; n < N; ++n) t.residual[r][n] = to_float(__ldcg(a.out + size_t(n) * a.OC + rows[r]));
    }
  }
}

// Task TASK's outputs from its lanes' sums ACC and its inputs T: summed over the warp, and lane n
// writes row n's (and with the argmax epilogue keeps in BEST its best key of columns below CHOICES).
template <typename X, int N, Epilogue E, int R>
__device__ void finish_task(const Args<X>& a, int task, float (&acc)[R][N], const TaskInputs<N, R>& t,
                            unsigned long long& best, int choices) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int n = 0; n < N; ++n) acc[r][n] = warp_sum(acc[r][n]);
  }
#pragma unroll
  for (int n = 0; n < N; ++n) {
    if (lane != n) continue;
    if constexpr (E == Epilogue::swiglu) {
      const int tasks = task_count<R>(a.OC);
      const float gate = acc[0][n] + t.bias[0], up = acc[1][n] + t.bias[1];
      a.out[size_t(n) * tasks + task] =
          from_float<X>(silu(to_float(from_float<X>(gate))) * to_float(from_float<X>(up)));
    } else if constexpr (E == Epilogue::kv_append && R == 2) {
      append_kv_pair(a, n, task, acc[0][n] + t.bias[0], acc[1][n] + t.bias[1]);
    } else {
      int rows[R];
      task_rows<X, E, R>(rows, task, a);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if constexpr (E == Epilogue::kv_append) {
          append_kv_column(a, n, rows[r], acc[r][n] + t.bias[r]);
        } else if constexpr (E == Epilogue::argmax) {
          const X y = from_float<X>(acc[r][n] + t.bias[r]);
          a.out[size_t(n) * a.OC + rows[r]] = y;
          if (rows[r] < choices) best = max(best, argmax_key(to_float(y), rows[r]));
        } else {
          write_output<X, E>(a, n, rows[r], acc[r][n], t.bias[r], t.residual[r][n]);
        }
      }
    }
  }
}

// The grid is persistent (at most kBlocksPerSM blocks per multiprocessor), and each warp walks
// its tasks first, first + stride, ... chunk by chunk: a chunk is Loads vectors per lane (kWarp *
// U vectors) of each of the task's rows (LOADS: kLoads, or kLongRowLoads where launch_rows() says).
// Two register buffers alternate, so the next chunk is always in flight while the lane multiplies
// the last one, across the tasks' boundaries too; both
// are requested before the wait for the previous kernel, and keep the memory busy while the block
// stages its input. The weights queued so delay the wait's return and the staging, but every way
// of queueing fewer measured slower: one chunk, fewer loads a chunk, or chunks requested into L2 by
// bulk prefetches instead: the weights in flight are worth more than an earlier start.
//
// BIASED: the product has a bias (a.bias not null). An unbiased product without a residual has
// no inputs to request with its chunks, and is compiled without the branch that would: with it,
// Llama 1B's unbiased products made its decode step slower.
template <typename X, int N, Epilogue E, bool Biased, int R, int Loads>
__global__ void __launch_bounds__(kThreads, kBlocksPerSM)
    small_linear_kernel(const Args<X> a, const SmallLinearArgmax argmax) {
  static_assert(E != Epilogue::swiglu || R == 2, "SwiGLU's tasks are a gate row and its up row");
  const KernelStamps stamps(small_linear_timeline, a.W, int(TimelineKind::linear_store) + int(E));
  constexpr int U = Loads / R, W = kVecWidth<X>;
  using V = Vec<X, W>;
  extern __shared__ uint4 staged[];  // [N, C] of X, then the norm's [2, C], 16-byte aligned
  X* xs = reinterpret_cast<X*>(staged);
  X* norm_params = xs + N * a.C;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int nvec = a.C / W, chunks = ceil_div(nvec, kWarp * U);
  const uint4* w = reinterpret_cast<const uint4*>(a.W);
  const int tasks = task_count<R>(a.OC);
  const int first = blockIdx.x * kWarps + warp, stride = gridDim.x * kWarps;
  // The warp's work items k: chunk k % chunks of task first + (k / chunks) * stride.
  const int items = first < tasks ? ceil_div(tasks - first, stride) * chunks : 0;
  auto task_of = [&](int k) { return first + k / chunks * stride; };
  // Work item K's chunk of weights, and with a task's last chunk, the task's other inputs.
  constexpr bool kInputs = Biased || E == Epilogue::residual;
  auto load = [&](V(&wv)[U][R], TaskInputs<N, R>& t, int k) {
    int rows[R];
    task_rows<X, E, R>(rows, task_of(k), a);
    load_weights(wv, w, rows, nvec, k % chunks * kWarp * U + lane);
    if constexpr (kInputs) {
      if (k % chunks == chunks - 1) load_inputs<X, N, E, R, Biased>(t, a, rows);
    }
  };

  V wa[U][R], wb[U][R];
  TaskInputs<N, R> ta, tb;  // the inputs that go with wa's and wb's chunks
  if (items > 0) load(wa, ta, 0);
  if (items > 1) load(wb, tb, 1);
  if (a.norm.weight) request_norm_params(norm_params, a);
  __shared__ unsigned long long block_best[N];  // the argmax epilogue's
  if constexpr (E == Epilogue::argmax) {
    if (threadIdx.x < N) block_best[threadIdx.x] = 0;
  }
  wait_for_previous_kernel();
  stamps.waited();
  allow_next_kernel();
  stage_input<X, N>(xs, norm_params, a);
  stamps.staged();
  const V* x = reinterpret_cast<const V*>(xs);

  float acc[R][N] = {};
  unsigned long long best = 0;  // the argmax epilogue's: lane n's key of row n
  auto use = [&](const V(&wv)[U][R], const TaskInputs<N, R>& t, int k) {
    const int i0 = k % chunks * kWarp * U + lane;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + u * kWarp;
      if (i >= nvec) break;
#pragma unroll
      for (int n = 0; n < N; ++n) {
        const V xv = x[n * nvec + i];
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float xf = to_float(xv.v[j]);
#pragma unroll
          for (int r = 0; r < R; ++r) acc[r][n] += to_float(wv[u][r].v[j]) * xf;
        }
      }
    }
    if (k % chunks == chunks - 1) {
      finish_task<X, N, E, R>(a, task_of(k), acc, t, best, argmax.choices);
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int n = 0; n < N; ++n) acc[r][n] = 0.0f;
      }
    }
  };
  for (int k = 0; k < items; k += 2) {
    use(wa, ta, k);
    if (k + 2 < items) load(wa, ta, k + 2);
    if (k + 1 < items) {
      use(wb, tb, k + 1);
      if (k + 3 < items) load(wb, tb, k + 3);
    }
  }
  if constexpr (E == Epilogue::argmax) finish_argmax<N>(argmax, best, block_best);
}

template <typename X, int N, Epilogue E, bool Biased, int R, int Loads>
void launch(const Args<X>& a, const SmallLinearArgmax& m, size_t smem, cudaStream_t stream) {
  const auto kernel = small_linear_kernel<X, N, E, Biased, R, Loads>;
  static std::once_flag opted_in;  // to more than the default 48 KB of shared memory, once
  std::call_once(opted_in, [&] {
    MEG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxStagedBytes)));
  });
  // The full persistent grid, or a block per kWarps tasks where there are fewer: fewer blocks for
  // a product of more tasks than warps (as few as its rounds of tasks a warp allow) put a second
  // block on some multiprocessors only, and were slower. A block's tasks as one run of consecutive
  // rows rather than strided, consecutive tasks to consecutive blocks rather than to a block's
  // warps (a block's rows far apart), and a product of fewer tasks than warps spread over every
  // block were all slower. Where there are fewer tasks than warps, the multiprocessors left free
  // take the next kernel's blocks early.
  const int tasks = task_count<R>(a.OC);
  const int blocks = std::min(ceil_div(tasks, kWarps), kBlocksPerSM * multiprocessors());
  launch_overlapped(kernel, dim3(blocks), dim3(kThreads), smem, stream, a, m);
}

// The argmax epilogue is compiled unbiased only (small_linear() turns a bias away).
template <typename X, int N, Epilogue E, int R, int Loads = kLoads>
void launch_biased(const Args<X>& a, const SmallLinearArgmax& m, size_t smem, cudaStream_t stream) {
  if constexpr (E == Epilogue::argmax) launch<X, N, E, false, R, Loads>(a, m, smem, stream);
  else if (a.bias) launch<X, N, E, true, R, Loads>(a, m, smem, stream);
  else launch<X, N, E, false, R, Loads>(a, m, smem, stream);
}

// Whether LOADS vectors a lane cut a row of NVEC vectors into fewer chunks than kLoads do.
bool fewer_chunks(int nvec, int loads) {
  return ceil_div(nvec, kWarp * loads) < ceil_div(nvec, kWarp * kLoads);
}

// Rows per task: SwiGLU's gate and up rows, and kv_append's two halves of a head's pair of
// columns where RoPE turns them together, always. The others (kv_append without RoPE too) take
// two rows where there is one input row and a row fills at most half a chunk, so that a lane's
// loads are not mostly idle (GPT-2 124M's rows of 768 fill 96 of a chunk's 256 vectors), and one
// otherwise: GPT-2 1.5B's QKV product in 4800 tasks of one row rather than 2400 pairs leaves 576
// of 2112 warps a third row rather than 288 a second pair, a shorter tail. Only the kernels that
// can be chosen are compiled: two-row tasks for one input row (short rows) or kv_append (rotated
// pairs), one-row tasks of kLongRowLoads for one input row.
template <typename X, int N, Epilogue E>
void launch_rows(const Args<X>& a, const SmallLinearArgmax& m, size_t smem, cudaStream_t stream) {
  if constexpr (E == Epilogue::swiglu) {
    launch_biased<X, N, E, 2>(a, m, smem, stream);
  } else {
    const int nvec = a.C / kVecWidth<X>;
    if constexpr (N == 1 || E == Epilogue::kv_append) {
      const bool rotated_pairs = E == Epilogue::kv_append && a.kv.rope_table;
      const bool short_rows = N == 1 && a.OC % 2 == 0 && nvec <= kWarp * kLoads / 2;
      if (rotated_pairs || short_rows) return launch_biased<X, N, E, 2>(a, m, smem, stream);
    }
    if constexpr (N == 1) {
      if (fewer_chunks(nvec, kLongRowLoads)) return launch_biased<X, N, E, 1, kLongRowLoads>(a, m, smem, stream);
    }
    launch_biased<X, N, E, 1>(a, m, smem, stream);
  }
}

template <typename X, int N>
void launch_epilogue(const Args<X>& a, const SmallLinearArgmax& m, Epilogue e, size_t smem, cudaStream_t stream) {
  switch (e) {
    case Epilogue::store: return launch_rows<X, N, Epilogue::store>(a, m, smem, stream);
    case Epilogue::gelu: return launch_rows<X, N, Epilogue::gelu>(a, m, smem, stream);
    case Epilogue::swiglu: return launch_rows<X, N, Epilogue::swiglu>(a, m, smem, stream);
    case Epilogue::residual: return launch_rows<X, N, Epilogue::residual>(a, m, smem, stream);
    case Epilogue::kv_append: return launch_rows<X, N, Epilogue::kv_append>(a, m, smem, stream);
    case Epilogue::argmax: return launch_rows<X, N, Epilogue::argmax>(a, m, smem, stream);
  }
}

}  // namespace

template <typename X>
bool small_linear(X* out, const X* inp, const X* W, const X* bias, int N, int C, int OC,
                  const SmallLinearNorm<X>& norm, SmallLinearEpilogue epilogue, cudaStream_t stream,
                  const SmallLinearKvAppend<X>* kv_append, const SmallLinearArgmax* argmax) {
  constexpr int kVec = kVecWidth<X>;
  const int norm_rows = norm.weight ? (norm.bias ? 2 : 1) : 0;
  const size_t smem = size_t(N + norm_rows) * C * sizeof(X);
  if (N < 1 || N > kSmallLinearMaxRows || C <= 0 || OC <= 0 || C % kVec != 0 || smem > kMaxStagedBytes) return false;
  if (epilogue == Epilogue::swiglu && OC % 2 != 0) return false;
  if (epilogue == Epilogue::argmax && bias) return false;
  if ((epilogue == Epilogue::kv_append) != (kv_append != nullptr))
    throw std::invalid_argument("small_linear: the kv_append epilogue and its arguments go together");
  if (kv_append && (kv_append->HS % 2 != 0 || OC != (kv_append->NH + 2 * kv_append->NKV) * kv_append->HS))
    throw std::invalid_argument("small_linear: kv_append: OC must be (NH + 2 NKV) HS, HS even");
  if ((epilogue == Epilogue::argmax) != (argmax != nullptr))
    throw std::invalid_argument("small_linear: the argmax epilogue and its arguments go together");
  if (argmax && (!argmax->tokens || !argmax->scratch || argmax->choices < 1 || argmax->choices > OC))
    throw std::invalid_argument("small_linear: argmax: tokens and scratch, and choices in [1, OC]");
  for (const void* p : {static_cast<const void*>(out), static_cast<const void*>(inp), static_cast<const void*>(W),
                        static_cast<const void*>(norm.weight), static_cast<const void*>(norm.bias)})
    if (!aligned16(p)) return false;
  const Args<X> a{out, inp, W, bias, norm, kv_append ? *kv_append : SmallLinearKvAppend<X>{}, C, OC};
  const SmallLinearArgmax m = argmax ? *argmax : SmallLinearArgmax{};
  switch (N) {
    case 1: launch_epilogue<X, 1>(a, m, epilogue, smem, stream); break;
    case 2: launch_epilogue<X, 2>(a, m, epilogue, smem, stream); break;
    default: launch_epilogue<X, 3>(a, m, epilogue, smem, stream); break;
  }
  return true;
}

#define MEG_INSTANTIATE(X)                                                                                   \
  template bool small_linear<X>(X*, const X*, const X*, const X*, int, int, int, const SmallLinearNorm<X>&, \
                                SmallLinearEpilogue, cudaStream_t, const SmallLinearKvAppend<X>*,      \
                                const SmallLinearArgmax*);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
