// The linear layers of a batch-1 decode step alone, on a CUDA machine: for GPT-2 124M, GPT-2 1.56B
// and Llama 1B (the shapes of model/config.hpp's presets, which this file, compiled as CUDA C++17,
// cannot include) in bf16, each layer's four products (QKV, attention
// projection, FC1 with SwiGLU's gate and up rows together, FC2) against weights of their own, one
// row each, for all the model's layers: the weights a decode step streams, without its attention,
// embedding and output layer. Per layer, the time and the fraction of the card's peak bandwidth
// the weights' bytes make of it. The ways to run the chain:
//   small_linear          the inference model's: a small_linear launch per product, each
//                         overlapping the one before (kernels/overlapped_launch.cuh), the whole
//                         chain replayed from a CUDA graph;
//   small_linear, norms   the same with the norms a block has before QKV and FC1 (LayerNorm);
//   as the model, ...     the products as the model's blocks run them: its norms (RMSNorm for
//                         Llama), GPT-2's biases, the QKV product's kv_append epilogue (RoPE for
//                         Llama), GELU or SwiGLU, the residual adds; then with each of these
//                         left out in turn (store in its place): what each costs;
//   kernels, ...          this file's streaming loop (stream_product: two register buffers of 8
//                         16-byte vectors a lane, 8 warps a block) as one overlapped kernel a
//                         product, waiting for the kernel before either by griddepcontrol.wait
//                         (its whole grid done) or by counters (each block arrives at its
//                         kernel's counter when done; the next waits for the count of a grid);
//                         at 2 blocks a multiprocessor, or at 1 (half the register file, so that
//                         the next kernel's block starts beside this one's and requests its
//                         weights while this one streams);
//   persistent, ...       every product a phase of one cooperative launch running the same loop,
//                         each phase requesting its first weights before a grid-wide barrier:
//                         a generation barrier, or arrivals at a counter that only grows, a block
//                         arriving after those requests or ("early arrival") before them;
//   ring, ...             one cooperative launch, a block a multiprocessor, in which a producer
//                         lane streams the block's rows of every product, in chain order, through
//                         a ring of shared-memory slots (bulk copies) as far ahead as the ring
//                         allows, never waiting for an input, and consumer warps wait for the
//                         product before (a counter) and multiply each piece as it lands; then
//                         its parts: without the waits (the values then wrong; for the timing),
//                         the copies alone, the copies and the waits, the multiplies alone;
//   kernels, bulk ring    each product a kernel of its own at one block a multiprocessor,
//                         streaming its rows through a ring of shared memory (bulk copies) from
//                         its start; "early" lets the next kernel start at once, beside it, to
//                         request its own first rows while this one streams; with a slot a
//                         consumer warp or two half-size ones; then the copies and waits alone;
//                         "bulk mma" the same with tensor-core consumers.
// On an H100 (us a layer, GPT-2 124M / 1.5B / Llama 1B): small_linear 9.7 / 26.5 / 43.9;
// kernels with griddepcontrol.wait 11.1 / 27.0 / 45.5, with counters 12.9 / 29.4 / 47.4; at one
// block a multiprocessor 11.8 / 34.0 / 50.9 and 13.3 / 35.6 / 52.0; persistent with the generation
// barrier 19.8 / 35.4 / 55.3, with the counter 16.3 / 33.2 / 52.2. (Arriving after the requests,
// the release waits for the arriving thread's weights in flight to land. Arriving before them, on
// one H200: 14.3 / 26.6 / 39.5 against 15.7 / 30.1 / 42.6 after, and small_linear's 8.8 / 22.9 /
// 35.7: the barrier still costs more than the boundary it replaces.) Hence a decode step is a chain
// of kernels that wait in hardware (overlapped_launch.cuh): a handoff through memory costs more
// than the boundary it replaces, and fewer blocks keep fewer bytes in flight.
// The ring (one H100, the same run as small_linear's 9.8 / 26.9 / 43.9): 14.4 / 30.4 / 51.6. Its
// copies alone take 7.4 / 19.9 / 39.4 (3.09 TB/s at the larger two, small_linear's rate within a
// kernel, not more); with the waits 11.6 / 25.2 / 46.1; its multiplies alone 8.4 / 12.9 / 19.2.
// (Its consumers once had a runtime count of rows a piece, which left the absent rows' loads and
// multiply-adds, predicated off, in every iteration: 19.1 / 38.6 / 61.8, the multiplies alone as
// slow as the stream.) Even free multiplies leave it at its copies-and-waits rows: this handoff
// (a counter, then the input through L2, each product) costs about what a kernel boundary does.
// The bulk rings' figures are in their section below: their copies and waits alone take 12% less
// than small_linear at GPT-2 1.5B's shapes, but with the multiplies they are 3% slower (GPT-2
// 124M's even, Llama 1B's 5% slower).
//
// Each figure is the median of kRuns timed runs of the whole chain after kWarmup untimed ones.
// Weights and inputs are pseudo-random, never zeros; the products' values are not checked here
// (tests/gpu/test_small_linear.cpp does that).
//
// With --sweep, it instead times chains of one product shape (kSweepProducts products of their own
// weights, replayed from a CUDA graph) for a range of sizes, and fits time = boundary + bytes /
// rate over them: what a kernel boundary costs and the rate at which small_linear streams within
// a kernel, against the rate of a plain streaming read of kSweepReadBytes (the card's practical
// ceiling for this access).
//
// Usage: bench_decode_chain [MODEL ...] | --sweep
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/cuda/check.hpp"
#include "ops/cuda/device_memory.hpp"
#include "ops/cuda/ops.hpp"
#include "ops/cuda/stream.hpp"
#include "event_timer.hpp"
#include "peak_bandwidth.hpp"
#include "../../../kernels/async_copy.cuh"
#include "../../../kernels/overlapped_launch.cuh"

namespace {

using bf16 = __nv_bfloat16;
using meg::cuda::allow_next_kernel;
using meg::cuda::launch_overlapped;
using meg::cuda::smem_addr;
using meg::cuda::wait_for_previous_kernel;

constexpr int kWarmup = 5;
constexpr int kRuns = 30;

// The current device's peak memory bandwidth in B/s, read once.
double bandwidth() {
  static const double peak = [] {
    int device = 0;
    MEG_CUDA_CHECK(cudaGetDevice(&device));
    return meg::bench::peak_bandwidth(device);
  }();
  return peak;
}

constexpr int kWarp = 32;
constexpr int kWarps = 8;            // the persistent kernel's, as small_linear's
constexpr int kBlocksPerSM = 2;
constexpr int kLoads = 8;            // 16-byte weight vectors a lane has in flight per buffer

// Values in (-1/64, 1/64) from a hash of the index: none zero (k + 1/2 is never 2^15 for an
// integer k), none large enough for the chain's products to overflow, and no host round trip for
// the gigabytes of weights.
__global__ void fill_kernel(bf16* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16(((float(h & 0xffff) + 0.5f) / 65536.0f - 0.5f) / 32.0f);
  }
}

void fill(bf16* x, size_t n, uint32_t seed) {
  fill_kernel<<<1024, 256>>>(x, n, seed);
  MEG_CUDA_CHECK(cudaGetLastError());
}

// A model's shape: hidden size, fused QKV width, FC1 rows (SwiGLU's gate and up together), FC2's
// input width, layers.
struct Shape {
  const char* name;
  int C, QKV, FC1, FC2, L;
  int NH, NKV, HS;
  bool llama;  // RMSNorm, no biases, SwiGLU, RoPE; else GPT-2's LayerNorm, biases, GELU
};
constexpr Shape kShapes[] = {
    {"gpt2-124m", 768, 3 * 768, 3072, 3072, 12, 12, 12, 64, false},
    {"gpt2-1.5b", 1600, 3 * 1600, 6400, 6400, 48, 25, 25, 64, false},
    {"llama-1b", 2048, (32 + 2 * 8) * 64, 2 * 8192, 8192, 16, 32, 8, 64, true},
};

// One product of the chain: out[OC] = W[OC, C] @ in[C].
struct Product {
  const bf16* W;
  const bf16* in;
  bf16* out;
  int C, OC;
};

// ---- the streaming loop, as kernels of their own or phases of one -------------------------------

// A barrier across the grid's blocks, all resident (a cooperative launch): the blocks that have
// arrived and a generation that the last to arrive advances; the others spin until it does.
struct GridBarrier {
  unsigned* words;  // [arrived, generation]: arrived zero before the first launch, and each leaves it so

  __device__ void arrive_early() const {}

  __device__ void wait(unsigned /*phase*/) const {
    __syncthreads();
    if (threadIdx.x == 0) {
      volatile unsigned* generation = words + 1;
      const unsigned seen = *generation;
      __threadfence();
      if (atomicAdd(words, 1u) == gridDim.x - 1) {
        words[0] = 0;
        __threadfence();
        atomicAdd(words + 1, 1u);
      } else {
        while (*generation == seen) {
        }
      }
      __threadfence();
    }
    __syncthreads();
  }
};

__device__ float dot8(uint4 w, uint4 x) {
  bf16 a[8], b[8];
  memcpy(a, &w, sizeof(a));
  memcpy(b, &x, sizeof(b));
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k) s += __bfloat162float(a[k]) * __bfloat162float(b[k]);
  return s;
}

// Arrivals at a counter that only grows (zeroed before the chain): a block's arrival releases its
// writes, and a wait acquires those of every block that has arrived. Phase p of a grid of G blocks
// is over when the counter reaches p * G; no block resets it, so no block waits for a reset.
__device__ inline void arrive(unsigned* counter) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
}
__device__ inline void wait_for_count(const unsigned* counter, unsigned target) {
  unsigned seen;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
  } while (seen < target);
}

// A barrier across the grid's blocks on one counter: phase p's wait returns once every block has
// arrived p times.
struct CounterBarrier {
  unsigned* counter;

  __device__ void arrive_early() const {}
  __device__ void wait(unsigned phase) const {
    __syncthreads();
    if (threadIdx.x == 0) {
      arrive(counter);
      wait_for_count(counter, phase * gridDim.x);
    }
    __syncthreads();
  }
};

// The counter barrier split in two: a block arrives as soon as the phase before is done (its
// outputs written: stream_product ends at a block barrier), before it requests the next phase's
// first weights, and waits for the count after. Arriving after those requests, as the barriers
// above do, the release waits for the arriving thread's loads in flight to land, which are the
// newest in the multiprocessor's queue.
struct SplitCounterBarrier {
  unsigned* counter;

  __device__ void arrive_early() const {
    if (threadIdx.x == 0) arrive(counter);
  }
  __device__ void wait(unsigned phase) const {
    if (threadIdx.x == 0) wait_for_count(counter, phase * gridDim.x);
    __syncthreads();
  }
};

// One product, in chunks of kLoads vectors a lane, two buffers alternating as small_linear's: a
// warp takes rows first, first + stride, ... . Its first two chunks are requested after
// ARRIVE_EARLY (a split barrier's arrival, or nothing) and before WAIT (for the phase or kernel
// before, whose output is this product's input), the input read through L2 after it into XS.
template <typename Wait, typename Arrive>
__device__ void stream_product(const Product& pr, uint4* xs, Wait wait, Arrive arrive_early) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  constexpr int span = kWarp * kLoads;
  const int first = blockIdx.x * kWarps + warp, stride = gridDim.x * kWarps;
  const int nvec = pr.C / 8, chunks = (nvec + span - 1) / span;
  const int items = first < pr.OC ? (pr.OC - first + stride - 1) / stride * chunks : 0;
  const uint4* w = reinterpret_cast<const uint4*>(pr.W);
  auto load = [&](uint4(&buf)[kLoads], int item) {
    const uint4* row = w + size_t(first + item / chunks * stride) * nvec;
    const int i0 = item % chunks * span + lane;
#pragma unroll
    for (int u = 0; u < kLoads; ++u)
      if (i0 + u * kWarp < nvec) buf[u] = __ldcs(row + i0 + u * kWarp);
  };
  float acc = 0.0f;
  auto use = [&](const uint4(&buf)[kLoads], int item) {
    const int i0 = item % chunks * span + lane;
#pragma unroll
    for (int u = 0; u < kLoads; ++u)
      if (i0 + u * kWarp < nvec) acc += dot8(buf[u], xs[i0 + u * kWarp]);
    if (item % chunks == chunks - 1) {
      for (int o = kWarp / 2; o > 0; o /= 2) acc += __shfl_xor_sync(~0u, acc, o);
      if (lane == 0) pr.out[first + item / chunks * stride] = __float2bfloat16(acc);
      acc = 0.0f;
    }
  };
  uint4 a[kLoads], b[kLoads];
  arrive_early();
  if (items > 0) load(a, 0);
  if (items > 1) load(b, 1);
  wait();
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) xs[i] = __ldcg(reinterpret_cast<const uint4*>(pr.in) + i);
  __syncthreads();
  for (int item = 0; item < items; item += 2) {
    use(a, item);
    if (item + 2 < items) load(a, item + 2);
    if (item + 1 < items) {
      use(b, item + 1);
      if (item + 3 < items) load(b, item + 3);
    }
  }
  __syncthreads();  // every warp is done with xs (and has written its outputs) before the next phase
}

// The products in order, one phase each, BARRIER between them.
template <typename Barrier>
__global__ void __launch_bounds__(kWarps * kWarp, kBlocksPerSM)
    persistent_chain_kernel(const Product* products, int count, Barrier barrier) {
  extern __shared__ uint4 xs[];
  for (int p = 0; p < count; ++p)
    stream_product(
        products[p], xs, [&] { if (p > 0) barrier.wait(p); },
        [&] { if (p > 0) barrier.arrive_early(); });
}

// One product of the chain a kernel, launched overlapped (programmatic dependent launch) after the
// one before. With kCounters, the kernel waits for the one before by its blocks' arrivals at
// counters[index - 1] (each kernel has the same grid) and arrives at counters[index] when done,
// rather than waiting for the whole previous grid to finish (griddepcontrol.wait).
template <bool kCounters>
__global__ void __launch_bounds__(kWarps * kWarp, kBlocksPerSM)
    chain_product_kernel(Product pr, unsigned* counters, int index) {
  extern __shared__ uint4 xs[];
  allow_next_kernel();
  stream_product(
      pr, xs,
      [&] {
        if (!kCounters) {
          wait_for_previous_kernel();
        } else if (index > 0) {
          if (threadIdx.x == 0) wait_for_count(counters + index - 1, gridDim.x);
          __syncthreads();
        }
      },
      [] {});
  if (kCounters && threadIdx.x == 0) arrive(counters + index);
}

// ---- the weights streamed ahead through a ring of shared memory ----------------------------------
//
// One block a multiprocessor, all resident (a cooperative launch). A producer lane requests the
// block's share of every product's weights in chain order, piece by piece, into a ring of shared
// memory slots (bulk copies completing on a slot's mbarrier), as far ahead as the ring allows: it
// waits only for a slot to be freed, never for a product's input, so the memory keeps streaming
// the next products' weights while the block waits for the one before. The consumer warps take
// the products in turn: wait for every block to be done with the product before (a counter that
// only grows, as CounterBarrier's), read its output through L2 as their input, then multiply their
// pieces as they land (piece_sums) and free their slots. A block's share of a
// product is a run of consecutive rows, and a piece is as many whole rows as fill a slot. Piece k
// goes to slot k % slots, and each slot has a consumer warp of its own, which waits for the
// slot's fills in order (a warp waiting on a slot that others also wait on could see the parity
// of a fill two behind as done).
// Slots of at least 8 KB: each copy takes the lone producer lane time of its own (an earlier,
// heavier loop issued one every 300 to 350 ns, and streamed 3 to 8 KB pieces at 1.4 to 2.5 TB/s
// on an H100).

constexpr int kMaxSlots = 16;  // and consumer warps
constexpr int kMaxRows = 8;    // rows a piece, at most
constexpr unsigned kLeastPiece = 8192;

struct RingChain {
  const Product* products;
  int count;
  unsigned* counter;  // zeroed before the launch
  unsigned slot;      // bytes a slot: a whole number of every product's rows
  int slots, max_in;  // slots (and consumer warps); the widest input, elements
  // What runs, to take a step apart: the waits for the product before, the multiplies, the copies
  // (without, the consumers multiply whatever their slots hold).
  bool wait, multiply, copy;
};

__device__ inline float lo_bf16(uint32_t v) { return __uint_as_float(v << 16); }
__device__ inline float hi_bf16(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
__device__ inline float dot8(uint4 w, float4 x0, float4 x1) {
  float s = lo_bf16(w.x) * x0.x;
  s = fmaf(hi_bf16(w.x), x0.y, s);
  s = fmaf(lo_bf16(w.y), x0.z, s);
  s = fmaf(hi_bf16(w.y), x0.w, s);
  s = fmaf(lo_bf16(w.z), x1.x, s);
  s = fmaf(hi_bf16(w.z), x1.y, s);
  s = fmaf(lo_bf16(w.w), x1.z, s);
  return fmaf(hi_bf16(w.w), x1.w, s);
}

// The first and last four of a vector's 8 bf16 values, in fp32.
__device__ inline float4 lo_half(uint4 v) {
  return make_float4(lo_bf16(v.x), hi_bf16(v.x), lo_bf16(v.y), hi_bf16(v.y));
}
__device__ inline float4 hi_half(uint4 v) {
  return make_float4(lo_bf16(v.z), hi_bf16(v.z), lo_bf16(v.w), hi_bf16(v.w));
}

// Thread T0's sums over the vectors T0, T0 + STRIDE, ... of the P rows of PIECE against X (bf16),
// the rows a compile-time count: a runtime count would leave the predicated-off rows' loads and
// multiply-adds in every iteration.
template <int P>
__device__ void piece_sums(float (&acc)[kMaxRows], const uint4* piece, const uint4* xs, int nvec, int t0, int stride) {
#pragma unroll 4
  for (int i = t0; i < nvec; i += stride) {
    const uint4 xv = xs[i];
    const float4 x0 = lo_half(xv), x1 = hi_half(xv);
#pragma unroll
    for (int rr = 0; rr < P; ++rr) acc[rr] += dot8(piece[rr * nvec + i], x0, x1);
  }
}

// piece_sums for the NR rows a piece holds (at most kMaxRows).
__device__ void piece_sums_of(int nr, float (&acc)[kMaxRows], const uint4* piece, const uint4* xs, int nvec, int t0,
                              int stride) {
  switch (nr) {
    case 1: return piece_sums<1>(acc, piece, xs, nvec, t0, stride);
    case 2: return piece_sums<2>(acc, piece, xs, nvec, t0, stride);
    case 3: return piece_sums<3>(acc, piece, xs, nvec, t0, stride);
    case 4: return piece_sums<4>(acc, piece, xs, nvec, t0, stride);
    case 5: return piece_sums<5>(acc, piece, xs, nvec, t0, stride);
    case 6: return piece_sums<6>(acc, piece, xs, nvec, t0, stride);
    case 7: return piece_sums<7>(acc, piece, xs, nvec, t0, stride);
    default: return piece_sums<8>(acc, piece, xs, nvec, t0, stride);
  }
}

// The bytes of a weight row of C elements, and the rows a slot of SLOT bytes holds.
__host__ __device__ unsigned row_bytes_of(int C) { return unsigned(C) * unsigned(sizeof(bf16)); }
__host__ __device__ int piece_rows(int C, unsigned slot) { return int(slot / row_bytes_of(C)); }

// Block B's rows [row_split(OC, B, G), row_split(OC, B + 1, G)) of a product of OC rows.
__device__ int row_split(int OC, int b, int G) { return int(int64_t(OC) * b / G); }

__device__ inline void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ inline void mbar_expect_bytes(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ inline void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// How long a waiting thread may stay suspended (ns) before try_wait returns false: it is woken when
// the phase completes, rather than spinning on the barrier and taking issue slots from the others.
constexpr unsigned kSuspendHint = 10000000;

// Waits until the barrier's phase of parity PARITY is complete (for a fresh barrier, parity 1
// counts as complete: the phase before its first).
__device__ inline void mbar_wait(uint64_t* bar, unsigned parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity), "r"(kSuspendHint)
        : "memory");
}
__device__ inline void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}

// The ring's barriers, a slot's "full" (its bytes landed) and "empty" (its consumer done), each
// completing on one arrival a phase; all the block's threads call it.
__device__ void init_ring_barriers(uint64_t* full, uint64_t* empty, int slots) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < slots; ++i) {
      mbar_init(full + i, 1);
      mbar_init(empty + i, 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
}

// Walks the ring: the slot of the next piece, and the parity of that slot's use.
struct RingCursor {
  int slot = 0;
  unsigned parity = 0;
  __device__ void next(int slots) {
    if (++slot == slots) {
      slot = 0;
      parity ^= 1;
    }
  }
};

__global__ void __launch_bounds__((kMaxSlots + 1) * kWarp, 1) ring_chain_kernel(const RingChain r) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* ring = smem;
  uint4* xs = reinterpret_cast<uint4*>(smem + size_t(r.slots) * r.slot);  // the input
  uint64_t* full = reinterpret_cast<uint64_t*>(xs + r.max_in / 8);
  uint64_t* empty = full + r.slots;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, G = gridDim.x, b = blockIdx.x;
  const int consumer_threads = r.slots * kWarp;
  init_ring_barriers(full, empty, r.slots);

  if (warp == r.slots) {  // the producer, one lane
    if (lane != 0 || !r.copy) return;
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    RingCursor at;
    for (int p = 0; p < r.count; ++p) {
      const Product pr = r.products[p];
      const unsigned row_bytes = row_bytes_of(pr.C);
      const int rows = piece_rows(pr.C, r.slot), r0 = row_split(pr.OC, b, G), r1 = row_split(pr.OC, b + 1, G);
      const unsigned char* w = reinterpret_cast<const unsigned char*>(pr.W) + size_t(r0) * row_bytes;
      for (int row = r0; row < r1; row += rows, w += size_t(rows) * row_bytes, at.next(r.slots)) {
        const unsigned bytes = unsigned(min(rows, r1 - row)) * row_bytes;
        mbar_wait(empty + at.slot, at.parity ^ 1);
        mbar_expect_bytes(full + at.slot, bytes);
        bulk_copy(ring + size_t(at.slot) * r.slot, w, bytes, full + at.slot, policy);
      }
    }
    return;
  }

  RingCursor at;  // the next piece's, whoever's it is
  for (int p = 0; p < r.count; ++p) {
    const Product pr = r.products[p];
    const int nvec = pr.C / 8, rows = piece_rows(pr.C, r.slot);
    if (p > 0 && r.wait) {
      if (threadIdx.x == 0) wait_for_count(r.counter, unsigned(p) * G);
      asm volatile("bar.sync 1, %0;" ::"r"(consumer_threads) : "memory");
    }
    for (int i = threadIdx.x; i < nvec; i += consumer_threads)
      xs[i] = __ldcg(reinterpret_cast<const uint4*>(pr.in) + i);
    asm volatile("bar.sync 1, %0;" ::"r"(consumer_threads) : "memory");
    const int r1 = row_split(pr.OC, b + 1, G);
    for (int row = row_split(pr.OC, b, G); row < r1; row += rows) {
      const int slot = at.slot;
      const unsigned parity = at.parity;
      at.next(r.slots);
      if (slot != warp) continue;
      if (r.copy) mbar_wait(full + slot, parity);
      const uint4* piece = reinterpret_cast<const uint4*>(ring + size_t(slot) * r.slot);
      const int nr = min(rows, r1 - row);
      if (r.multiply) {
        float acc[kMaxRows] = {};
        piece_sums_of(nr, acc, piece, xs, nvec, lane, kWarp);
#pragma unroll
        for (int o = kWarp / 2; o > 0; o /= 2) {
#pragma unroll
          for (int rr = 0; rr < kMaxRows; ++rr) acc[rr] += __shfl_xor_sync(~0u, acc[rr], o);
        }
#pragma unroll
        for (int rr = 0; rr < kMaxRows; ++rr)
          if (rr < nr && lane == rr) pr.out[row + rr] = __float2bfloat16(acc[rr]);
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(empty + slot);
    }
    asm volatile("bar.sync 1, %0;" ::"r"(consumer_threads) : "memory");  // every warp's outputs written
    if (threadIdx.x == 0) arrive(r.counter);
  }
}

// ---- each product a kernel of its own, streaming through a ring of shared memory ----------------
//
// One block a multiprocessor, small enough (registers and shared memory) that the next product's
// block fits beside it. A producer lane requests the block's rows, piece by piece, into a ring of
// shared-memory slots (bulk copies), from the moment the block starts; consumer warps, with one or
// two slots each, wait for the previous kernel (griddepcontrol.wait), read the input and multiply
// each piece as it lands. With EARLY the block lets the next kernel start at once
// (allow_next_kernel first), so that the next product's block starts beside this one and requests
// its first pieces while this one streams: the bytes in flight live in shared memory, not
// registers, and two kernels' worth of them cross every boundary.
// On an H100 (us a layer, GPT-2 124M / 1.5B / Llama 1B; small_linear 9.7 / 26.5 / 43.5 in the same
// runs): a slot a consumer warp, 10.5 / 27.5 / 47.0; two half-size slots a warp, so that its next
// piece lands while it multiplies one, 9.7 / 27.4 / 45.6; without the early start 11.8 / 30.9 /
// 50.5 and 10.6 / 30.3 / 49.9. The copies and waits alone take 7.3 / 23.3 / 41.5 (a slot a warp):
// the design's bound, 12% under small_linear at GPT-2 1.5B's shapes, which its consumers lose. Not
// what they lose it to: the tensor-core consumers of bulk_mma_kernel (a few instructions where the
// CUDA cores take dozens) take 10.3 to 10.5 / 28.3 to 31.6 / 49.6 to 50.9; four accumulators
// rather than one changed little; two warps a slot, each half of a piece's vectors, were slower;
// and so were three blocks a multiprocessor (two-thirds of the shared memory each): 10.8 / 28.1 /
// 48.8.

constexpr int kBulkWarps = 8;               // consumer warps, a slot each or two
constexpr size_t kBulkBudget = 108 * 1024;  // shared memory a block, so that two fit

// The producer lane: the rows [r0, r1) of W (ROW_BYTES each), ROWS a unit, each unit in PARTS
// pieces (a row's parts, when a row is longer than a slot), piece k into slot k % SLOTS once the
// consumer of its last use has freed it.
__device__ void produce_pieces(unsigned char* ring, unsigned slot, int slots, uint64_t* full, uint64_t* empty,
                               const bf16* W, unsigned row_bytes, int r0, int r1, int rows, int parts = 1) {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  const unsigned char* w = reinterpret_cast<const unsigned char*>(W) + size_t(r0) * row_bytes;
  const unsigned part_bytes = row_bytes / unsigned(parts);
  for (int k = 0; k / parts * rows < r1 - r0; ++k) {
    const int s = k % slots, use = k / slots, unit = k / parts, part = k % parts;
    if (use > 0) mbar_wait(empty + s, unsigned(use - 1) & 1);
    const unsigned bytes = unsigned(min(rows, r1 - r0 - unit * rows)) * part_bytes;
    mbar_expect_bytes(full + s, bytes);
    bulk_copy(ring + size_t(s) * slot, w + size_t(unit) * rows * row_bytes + size_t(part) * part_bytes, bytes,
              full + s, policy);
  }
}

// The consumers' start: the wait for the previous kernel (after which, without EARLY, the next
// may start) and the input into XS, all consumer threads.
__device__ void consume_input(uint4* xs, const Product& pr, bool early) {
  constexpr int T = kBulkWarps * kWarp;
  wait_for_previous_kernel();
  if (!early) allow_next_kernel();
  for (int i = threadIdx.x; i < pr.C / 8; i += T) xs[i] = __ldcg(reinterpret_cast<const uint4*>(pr.in) + i);
  asm volatile("bar.sync 1, %0;" ::"r"(T) : "memory");
}

// A unit is ROWS rows (the rows a slot holds) or, for rows longer than a slot, one row in PARTS
// pieces. Consumer warp w takes units w, w + W, ... (W = slots / PER_WARP consumer warps), so that
// each slot is waited on by one warp only and a warp has PER_WARP slots: at 2, its next piece is
// landing while it multiplies one. Lane l takes the vectors l, l + 32, ... of each of a piece's
// rows; after a unit's last piece, a sum a row over the warp. Without MULTIPLY, a warp only waits
// for each piece and frees its slot.
__global__ void __launch_bounds__((kBulkWarps + 1) * kWarp, 2)
    bulk_ring_kernel(const Product pr, unsigned slot, int slots, int per_warp, bool early, bool multiply) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* ring = smem;
  uint4* xs = reinterpret_cast<uint4*>(smem + size_t(slots) * slot);  // the input
  uint64_t* full = reinterpret_cast<uint64_t*>(xs + pr.C / 8);
  uint64_t* empty = full + slots;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps = slots / per_warp;
  if (early) allow_next_kernel();
  const unsigned row_bytes = row_bytes_of(pr.C);
  const int parts = row_bytes > slot ? int(row_bytes / slot) : 1, rows = parts > 1 ? 1 : piece_rows(pr.C, slot);
  const int r0 = row_split(pr.OC, blockIdx.x, gridDim.x), r1 = row_split(pr.OC, blockIdx.x + 1, gridDim.x);
  init_ring_barriers(full, empty, slots);
  if (warp == kBulkWarps) {
    if (lane == 0) produce_pieces(ring, slot, slots, full, empty, pr.W, row_bytes, r0, r1, rows, parts);
    return;
  }
  consume_input(xs, pr, early);
  if (warp >= warps) return;
  const int part_vecs = pr.C / 8 / parts, units = (r1 - r0 + rows - 1) / rows;
  for (int u = warp; u < units; u += warps) {
    const int row = r0 + u * rows, nr = min(rows, r1 - row);
    float acc[kMaxRows] = {};
    for (int part = 0; part < parts; ++part) {
      const int k = u * parts + part, s = k % slots;
      mbar_wait(full + s, unsigned(k / slots) & 1);
      if (multiply)
        piece_sums_of(nr, acc, reinterpret_cast<const uint4*>(ring + size_t(s) * slot), xs + part * part_vecs,
                      part_vecs, lane, kWarp);
      __syncwarp();
      if (lane == 0) mbar_arrive(empty + s);
    }
    if (!multiply) continue;
#pragma unroll
    for (int rr = 0; rr < kMaxRows; ++rr) {
      if (rr >= nr) break;
#pragma unroll
      for (int o = kWarp / 2; o > 0; o /= 2) acc[rr] += __shfl_xor_sync(~0u, acc[rr], o);
      if (lane == 0) pr.out[row + rr] = __float2bfloat16(acc[rr]);
    }
  }
}

// The same ring with tensor-core consumers (mma.sync, bf16 in, fp32 sums). A piece is P = E / C
// whole rows, seen as 8 lines: line n = (row r, segment s) of S = 8 / P segments a row, segment s
// being the row's 16-byte chunks s, s + S, s + 2 S, ... The multiply-accumulates take line n's
// chunks as column n of B and the input's matching chunks as row n of A (rows m and m + 8 alike),
// so that D[n][n] is line n's dot product; a row's output is the sum of its S lines'. Line n
// visits its chunks from chunk r on (rotated by its row), so that at each step the 8 lines'
// chunks, and the input's, fall in 8 different groups of banks for ldmatrix. One warp a slot, 4
// chunks of every line a step: two ldmatrix and two mma, into four accumulators in turn.
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
// D += A B for A's rows all (a_lo | a_hi) (16 x 16, rows m and m + 8 alike) and B (b0 | b1).
__device__ inline void mma_16x8x16(float (&d)[4], uint32_t a_lo, uint32_t a_hi, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %4, %5, %5}, {%6, %7}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a_lo), "r"(a_hi), "r"(b0), "r"(b1));
}

// Whether pieces of E elements suit rows of C: 1, 2, 4 or 8 whole rows, lines of a whole number of
// steps (4 chunks), rows a whole number of 128-byte bank cycles (the rotation's premise).
__host__ __device__ bool mma_pieces_fit(int E, int C) {
  if (E % C != 0 || 8 % (E / C) != 0) return false;
  const int S = 8 / (E / C);
  return C % (8 * S * 4) == 0 && row_bytes_of(C) % 128 == 0;
}

__global__ void __launch_bounds__((kBulkWarps + 1) * kWarp, 2)
    bulk_mma_kernel(const Product pr, int E, unsigned slot, int slots, bool early) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float line_sums[kBulkWarps][8];
  unsigned char* ring = smem;
  uint4* xs = reinterpret_cast<uint4*>(smem + size_t(slots) * slot);  // the input, a slot's room
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + size_t(slots + 1) * slot);
  uint64_t* empty = full + slots;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (early) allow_next_kernel();
  const int P = E / pr.C, S = 8 / P, K = pr.C / (8 * S);  // rows a piece, segments a row, chunks a line
  const unsigned row_bytes = row_bytes_of(pr.C);
  const int r0 = row_split(pr.OC, blockIdx.x, gridDim.x), r1 = row_split(pr.OC, blockIdx.x + 1, gridDim.x);
  init_ring_barriers(full, empty, slots);
  if (warp == kBulkWarps) {
    if (lane == 0) produce_pieces(ring, slot, slots, full, empty, pr.W, row_bytes, r0, r1, P);
    return;
  }
  consume_input(xs, pr, early);
  if (warp >= slots) return;
  // The lane's ldmatrix row: line n's chunk for matrix j (the step's 4 chunks).
  const int n = lane % 8, j = lane / 8, r = n / S, seg = n % S;
  const uint32_t x_base = smem_addr(xs);
  const int pieces = (r1 - r0 + P - 1) / P;
  for (int k = warp; k < pieces; k += slots) {
    const int s = k % slots, nr = min(P, r1 - r0 - k * P);
    mbar_wait(full + s, unsigned(k / slots) & 1);
    const uint32_t w_base = smem_addr(ring + size_t(s) * slot) + unsigned(r) * row_bytes;
    float acc[4][4] = {};
    int c = (j + r) % K;  // the line's chunk at this step, rotated by its row
    auto step = [&](float(&d0)[4], float(&d1)[4]) {
      const uint32_t offset = unsigned(S * c + seg) * 16u;
      uint32_t w4[4], x4[4];
      ldmatrix_x4(w4, w_base + offset);
      ldmatrix_x4(x4, x_base + offset);
      mma_16x8x16(d0, x4[0], x4[1], w4[0], w4[1]);
      mma_16x8x16(d1, x4[2], x4[3], w4[2], w4[3]);
      c += 4;
      if (c >= K) c -= K;
    };
    int q = 0;
    for (; q + 8 <= K; q += 8) {
      step(acc[0], acc[1]);
      step(acc[2], acc[3]);
    }
    if (q < K) step(acc[0], acc[1]);
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + s);
    // D[n][n] is in lane 4 n + n / 2, element n % 2.
    const int g = lane / 4, t = lane % 4;
    if (g / 2 == t) line_sums[warp][g] = (acc[0][g % 2] + acc[1][g % 2]) + (acc[2][g % 2] + acc[3][g % 2]);
    __syncwarp();
    if (lane < nr) {
      float sum = 0.0f;
      for (int i = 0; i < S; ++i) sum += line_sums[warp][lane * S + i];
      pr.out[r0 + k * P + lane] = __float2bfloat16(sum);
    }
    __syncwarp();
  }
}

// ---- the benchmark ------------------------------------------------------------------------------

// The median time of kRuns calls of LAUNCH, which queues work on STREAM, after kWarmup.
template <typename Launch>
double time_runs(cudaStream_t stream, Launch&& launch) {
  return meg::bench::median(meg::bench::time_calls(stream, kWarmup, kRuns, launch));
}

// The median time of kRuns replays, after kWarmup, of a CUDA graph of the launches LAUNCH queues
// on STREAM.
template <typename Launch>
double time_graph(cudaStream_t stream, Launch&& launch) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MEG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  launch();
  MEG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MEG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = time_runs(stream, [&] { MEG_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
  MEG_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MEG_CUDA_CHECK(cudaGraphDestroy(graph));
  return ms;
}

void print_row(const std::string& model, const char* variant, double ms, int layers, double layer_bytes) {
  const double us = ms * 1e3 / layers;
  std::printf("| %s | %s | %.2f | %.1f | %.2f | %.2f |\n", model.c_str(), variant, us, layer_bytes / 1e6,
              layer_bytes / (us * 1e-6) / 1e12, layer_bytes / (us * 1e-6) / bandwidth());
  std::fflush(stdout);
}

void bench(const Shape& m) {
  const std::string name = m.name;
  const int C = m.C, L = m.L;
  // Per layer: QKV, projection, FC1, FC2.
  const int in[4] = {C, C, C, m.FC2}, out[4] = {m.QKV, C, m.FC1, C};
  size_t per_layer = 0;
  for (int k = 0; k < 4; ++k) per_layer += size_t(in[k]) * out[k];

  // The chain's activations, each its own row: x -> qkv -> y (as if the attention's output) -> x,
  // x -> h -> x.
  const size_t width = size_t(std::max({C, m.QKV, m.FC1}));
  meg::cuda::DeviceAllocator alloc;
  meg::cuda::DeviceArray<bf16> weights(alloc, per_layer * L), acts(alloc, 4 * width), norm(alloc, 2 * size_t(C));
  fill(weights.get(), per_layer * L, 1);
  fill(acts.get(), 4 * width, 2);
  fill(norm.get(), 2 * size_t(C), 3);
  bf16 *x = acts.get(), *qkv = x + width, *y = qkv + width, *h = y + width;
  bf16* const ins[4] = {x, qkv, y, h};
  bf16* const outs[4] = {qkv, y, h, x};
  std::vector<Product> chain;
  const bf16* w = weights.get();
  for (int l = 0; l < L; ++l)
    for (int k = 0; k < 4; ++k) {
      chain.push_back({w, ins[k], outs[k], in[k], out[k]});
      w += size_t(in[k]) * out[k];
    }
  const double layer_bytes = double(per_layer) * sizeof(bf16);

  const meg::cuda::Stream owned_stream;
  const cudaStream_t stream = owned_stream.get();
  MEG_CUDA_CHECK(cudaDeviceSynchronize());  // the fills, on the default stream
  int sms = 0, device = 0;
  MEG_CUDA_CHECK(cudaGetDevice(&device));
  MEG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));

  // One layer's outputs from the same input, RUN queuing its four products; and how far a way's
  // outputs are from small_linear's (the largest root-mean-square relative difference of the
  // four; the sums run in other orders).
  auto layer_outputs = [&](auto run) {
    fill(acts.get(), 4 * width, 2);
    MEG_CUDA_CHECK(cudaDeviceSynchronize());
    run();
    MEG_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<bf16> host(4 * width);
    MEG_CUDA_CHECK(cudaMemcpy(host.data(), acts.get(), host.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
    return host;
  };
  const std::vector<bf16> reference = layer_outputs([&] {
    for (int i = 0; i < 4; ++i)
      if (!meg::cuda::small_linear<bf16>(chain[i].out, chain[i].in, chain[i].W, nullptr, 1, chain[i].C, chain[i].OC, {},
                                         meg::cuda::SmallLinearEpilogue::store, stream))
        throw std::runtime_error("small_linear declined a product of the chain");
  });
  auto layer_error = [&](auto run) {
    const std::vector<bf16> got = layer_outputs(run);
    double worst = 0.0;
    for (int i = 0; i < 4; ++i) {
      const size_t at = size_t(outs[i] - x);
      double d = 0.0, n = 0.0;
      for (int j = 0; j < out[i]; ++j) {
        const double a = __bfloat162float(got[at + j]), e = __bfloat162float(reference[at + j]);
        d += (a - e) * (a - e);
        n += e * e;
      }
      worst = std::max(worst, std::sqrt(d / n));
    }
    return worst;
  };

  for (const bool norms : {false, true}) {
    const double ms = time_graph(stream, [&] {
      for (size_t i = 0; i < chain.size(); ++i) {
        const Product& p = chain[i];
        meg::cuda::SmallLinearNorm<bf16> n{};
        if (norms && (i % 4 == 0 || i % 4 == 2)) n = {norm.get(), norm.get() + C, 1e-5f, false};
        if (!meg::cuda::small_linear<bf16>(p.out, p.in, p.W, nullptr, 1, p.C, p.OC, n,
                                           meg::cuda::SmallLinearEpilogue::store, stream))
          throw std::runtime_error("small_linear declined a product of the chain");
      }
    });
    print_row(name, norms ? "small_linear, norms" : "small_linear", ms, L, layer_bytes);
  }

  // As the model's blocks run them (CudaTransformer::blocks, the attention left out): the norms
  // (RMSNorm for Llama), GPT-2's biases, the QKV product's kv_append epilogue, the activation and
  // the residual adds; then each of these left out in turn (store in its place).
  {
    constexpr int kMaxLength = 1024, kPosition = 552;
    const int FC1 = m.FC1, Fh = m.FC2;
    const size_t layer_bias = size_t(m.QKV) + C + FC1 + C;
    meg::cuda::DeviceArray<bf16> biases(alloc, layer_bias * L), atty(alloc, size_t(C));
    const size_t cache = size_t(m.NKV) * kMaxLength * m.HS;  // one slot's
    meg::cuda::DeviceArray<bf16> kc(alloc, cache), vc(alloc, cache);
    meg::cuda::DeviceArray<int32_t> ints(alloc, 2);
    meg::cuda::DeviceArray<float> rope(alloc, size_t(kMaxLength) * m.HS);
    fill(biases.get(), layer_bias * L, 4);
    fill(atty.get(), size_t(C), 5);
    const int32_t host_ints[2] = {0, kPosition};  // slot, position
    MEG_CUDA_CHECK(cudaMemcpy(ints.get(), host_ints, sizeof(host_ints), cudaMemcpyHostToDevice));
    const std::vector<float> table = meg::cuda::rope_table(kMaxLength, m.HS, 500000.0);
    MEG_CUDA_CHECK(cudaMemcpy(rope.get(), table.data(), table.size() * sizeof(float), cudaMemcpyHostToDevice));
    const meg::cuda::SmallLinearKvAppend<bf16> append{kc.get(), vc.get(), ints.get(), ints.get() + 1,
                                                      m.llama ? rope.get() : nullptr, m.NH, m.NKV, m.HS, kMaxLength};
    struct Variant {
      const char* name;
      bool bias, kv_append, activation, residual;
    };
    using E = meg::cuda::SmallLinearEpilogue;
    for (const Variant& v : {Variant{"as the model", true, true, true, true},
                             Variant{"as the model, no biases", false, true, true, true},
                             Variant{"as the model, QKV stored", true, false, true, true},
                             Variant{"as the model, FC1 stored", true, true, false, true},
                             Variant{"as the model, no residual adds", true, true, true, false}}) {
      if (m.llama && !v.bias) continue;  // Llama has none
      const meg::cuda::SmallLinearNorm<bf16> n{norm.get(), m.llama ? nullptr : norm.get() + C, 1e-5f, m.llama};
      const E act = !v.activation ? E::store : m.llama ? E::swiglu : E::gelu;
      const E res = v.residual ? E::residual : E::store;
      const double ms = time_graph(stream, [&] {
        for (int l = 0; l < L; ++l) {
          const bf16* w = weights.get() + size_t(l) * per_layer;
          const bf16* b = biases.get() + size_t(l) * layer_bias;
          auto bias = [&](size_t at) { return v.bias && !m.llama ? b + at : nullptr; };
          bool ok = meg::cuda::small_linear<bf16>(qkv, x, w, bias(0), 1, C, m.QKV, n,
                                                  v.kv_append ? E::kv_append : E::store, stream,
                                                  v.kv_append ? &append : nullptr);
          w += size_t(C) * m.QKV;
          ok = ok && meg::cuda::small_linear<bf16>(x, atty.get(), w, bias(m.QKV), 1, C, C, {}, res, stream);
          w += size_t(C) * C;
          ok = ok && meg::cuda::small_linear<bf16>(h, x, w, bias(m.QKV + C), 1, C, FC1, n, act, stream);
          w += size_t(C) * FC1;
          ok = ok && meg::cuda::small_linear<bf16>(x, h, w, bias(m.QKV + C + FC1), 1, Fh, C, {}, res, stream);
          if (!ok) throw std::runtime_error("small_linear declined a product of the model's chain");
        }
      });
      print_row(name, v.name, ms, L, layer_bytes);
    }
  }

  const size_t smem = size_t(std::max(C, m.FC2)) * sizeof(bf16);
  // A grid of at most kBlocksPerSM blocks a multiprocessor, all resident.
  auto grid_of = [&](auto kernel) {
    MEG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    int per_sm = 0;
    MEG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * kWarp, smem));
    return std::min(per_sm, kBlocksPerSM) * sms;
  };
  meg::cuda::DeviceArray<unsigned> counters(alloc, chain.size());
  const size_t counter_bytes = chain.size() * sizeof(unsigned);

  // PER_SM blocks a multiprocessor: at 1, half the register file, so that the next kernel's block
  // starts beside this one's and requests its weights while this one streams. COUNTED: the kernels
  // hand over through the counters, which the graph then zeroes first (the others' time has no
  // memset in it).
  auto chain_of_kernels = [&](auto kernel, int per_sm, const char* variant, bool counted) {
    const int blocks = std::min(grid_of(kernel), per_sm * sms);
    const double ms = time_graph(stream, [&] {
      if (counted) MEG_CUDA_CHECK(cudaMemsetAsync(counters.get(), 0, counter_bytes, stream));
      for (size_t i = 0; i < chain.size(); ++i)
        launch_overlapped(kernel, dim3(blocks), dim3(kWarps * kWarp), smem, stream, chain[i], counters.get(), int(i));
    });
    print_row(name, variant, ms, L, layer_bytes);
  };
  chain_of_kernels(chain_product_kernel<false>, 2, "kernels, griddepcontrol.wait", false);
  chain_of_kernels(chain_product_kernel<true>, 2, "kernels, counters", true);
  chain_of_kernels(chain_product_kernel<false>, 1, "kernels 1/SM, griddepcontrol.wait", false);
  chain_of_kernels(chain_product_kernel<true>, 1, "kernels 1/SM, counters", true);

  meg::cuda::DeviceArray<Product> products(alloc, chain.size());
  MEG_CUDA_CHECK(cudaMemcpy(products.get(), chain.data(), chain.size() * sizeof(Product), cudaMemcpyHostToDevice));
  const Product* list = products.get();
  int count = int(chain.size());
  // COUNTED: the barrier counts arrivals over the whole launch, so each launch zeroes the counter
  // first; the generation barrier leaves its words as it found them and is zeroed once.
  auto persistent = [&](auto barrier, const char* variant, bool counted) {
    auto kernel = persistent_chain_kernel<decltype(barrier)>;
    const int blocks = grid_of(kernel);
    void* args[] = {&list, &count, &barrier};
    MEG_CUDA_CHECK(cudaMemsetAsync(counters.get(), 0, 2 * sizeof(unsigned), stream));
    const double ms = time_runs(stream, [&] {
      if (counted) MEG_CUDA_CHECK(cudaMemsetAsync(counters.get(), 0, 2 * sizeof(unsigned), stream));
      MEG_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(kernel), dim3(blocks), dim3(kWarps * kWarp),
                                                 args, smem, stream));
    });
    print_row(name, variant, ms, L, layer_bytes);
  };
  persistent(GridBarrier{counters.get()}, "persistent, grid barrier", false);
  persistent(CounterBarrier{counters.get()}, "persistent, counter barrier", true);
  persistent(SplitCounterBarrier{counters.get()}, "persistent, counter barrier, early arrival", true);

  // The ring: slots of a whole number of every product's rows and at least kLeastPiece bytes, as
  // many as fit beside the input row.
  unsigned longest = 0;
  int max_in = 0;
  for (const Product& p : chain) {
    longest = std::max(longest, row_bytes_of(p.C));
    max_in = std::max(max_in, p.C);
  }
  const unsigned slot = longest * ((kLeastPiece + longest - 1) / longest);
  for (const Product& p : chain)
    if (slot % row_bytes_of(p.C) != 0 || piece_rows(p.C, slot) > kMaxRows) {
      std::printf("| %s | ring: no slot size for its rows |\n", name.c_str());
      return;
    }
  int smem_optin = 0;
  MEG_CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const size_t row_smem = size_t(max_in) * sizeof(bf16);
  const int slots = std::min(int((size_t(smem_optin) - row_smem) / (slot + 2 * sizeof(uint64_t))), kMaxSlots);
  const size_t ring_smem = size_t(slots) * (slot + 2 * sizeof(uint64_t)) + row_smem;
  MEG_CUDA_CHECK(cudaFuncSetAttribute(ring_chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(ring_smem)));
  auto ring = [&](int n, bool wait, bool multiply, bool copy) {
    RingChain rc{list, n, counters.get(), slot, slots, max_in, wait, multiply, copy};
    void* args[] = {&rc};
    MEG_CUDA_CHECK(cudaMemsetAsync(counters.get(), 0, sizeof(unsigned), stream));
    MEG_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(ring_chain_kernel), dim3(sms),
                                               dim3((slots + 1) * kWarp), args, ring_smem, stream));
  };
  const double worst = layer_error([&] { ring(4, true, true, true); });
  if (!(worst < 2e-2)) {
    std::printf("| %s | ring: one layer's outputs differ from small_linear's (%.3g) |\n", name.c_str(), worst);
    return;
  }
  auto time_ring = [&](const char* variant, bool wait, bool multiply, bool copy) {
    const double ms = time_runs(stream, [&] { ring(count, wait, multiply, copy); });
    print_row(name, variant, ms, L, layer_bytes);
  };
  time_ring("ring", true, true, true);
  time_ring("ring, no waits", false, true, true);
  time_ring("ring, copies alone", false, false, true);
  time_ring("ring, copies and waits", true, false, true);
  time_ring("ring, multiplies alone", false, true, false);
  std::printf("| %s | (ring: %d slots of %u bytes; one layer within %.2g of small_linear's) |\n", name.c_str(), slots,
              slot, worst);

  // Each product a kernel of its own streaming through a ring (bulk_ring_kernel): slots of whole
  // rows, as the ring's, as many as leave room for a second block beside each, a consumer warp
  // each; then half as large, two a warp (each a whole number of rows, or of slots a row).
  const size_t xs_bytes = size_t(max_in) * sizeof(bf16);
  for (const int per_warp : {1, 2}) {
    const unsigned bulk_slot = slot / unsigned(per_warp);
    bool fits = bulk_slot % 16 == 0;
    for (const Product& p : chain) {
      const unsigned row = row_bytes_of(p.C);
      // A row longer than a slot is in parts that the same warp's slots hold.
      fits = fits && (row <= bulk_slot ? piece_rows(p.C, bulk_slot) <= kMaxRows
                                       : row % bulk_slot == 0 && per_warp % int(row / bulk_slot) == 0);
    }
    if (!fits) continue;
    const int most = kBulkWarps * per_warp;
    const int bulk_slots =
        std::min(most, int((kBulkBudget - xs_bytes) / (bulk_slot + 2 * sizeof(uint64_t))) / per_warp * per_warp);
    const size_t bulk_smem = size_t(bulk_slots) * (bulk_slot + 2 * sizeof(uint64_t)) + xs_bytes;
    MEG_CUDA_CHECK(cudaFuncSetAttribute(bulk_ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bulk_smem)));
    auto bulk = [&](size_t n, bool early, bool multiply) {
      for (size_t i = 0; i < n; ++i)
        launch_overlapped(bulk_ring_kernel, dim3(sms), dim3((kBulkWarps + 1) * kWarp), bulk_smem, stream, chain[i],
                          bulk_slot, bulk_slots, per_warp, early, multiply);
    };
    const std::string variant = per_warp == 1 ? "kernels, bulk ring" : "kernels, bulk ring, 2 slots a warp";
    std::printf("| %s | (%s: %d slots of %u bytes; one layer within %.2g of small_linear's) |\n", name.c_str(),
                variant.c_str(), bulk_slots, bulk_slot, layer_error([&] { bulk(4, true, true); }));
    print_row(name, (variant + ", early").c_str(), time_graph(stream, [&] { bulk(count, true, true); }), L,
              layer_bytes);
    print_row(name, variant.c_str(), time_graph(stream, [&] { bulk(count, false, true); }), L, layer_bytes);
    print_row(name, (variant + ", early, copies and waits").c_str(),
              time_graph(stream, [&] { bulk(count, true, false); }), L, layer_bytes);
  }

  // The same with tensor-core consumers (bulk_mma_kernel): E elements a piece, the widest input
  // doubled to at least kLeastPiece bytes, every product's rows a piece 1, 2, 4 or 8.
  int E = max_in;
  while (size_t(E) * sizeof(bf16) < kLeastPiece) E *= 2;
  for (const Product& p : chain)
    if (!mma_pieces_fit(E, p.C)) {
      std::printf("| %s | bulk mma: no piece size for its rows |\n", name.c_str());
      return;
    }
  const unsigned mma_slot = unsigned(E) * unsigned(sizeof(bf16));
  const int mma_slots = std::min(kBulkWarps, int((kBulkBudget - mma_slot) / (mma_slot + 2 * sizeof(uint64_t))));
  const size_t mma_smem = size_t(mma_slots + 1) * mma_slot + 2 * mma_slots * sizeof(uint64_t);
  MEG_CUDA_CHECK(cudaFuncSetAttribute(bulk_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(mma_smem)));
  auto mma = [&](size_t n, bool early) {
    for (size_t i = 0; i < n; ++i)
      launch_overlapped(bulk_mma_kernel, dim3(sms), dim3((kBulkWarps + 1) * kWarp), mma_smem, stream, chain[i], E,
                        mma_slot, mma_slots, early);
  };
  std::printf("| %s | (bulk mma: %d slots of %u bytes; one layer within %.2g of small_linear's) |\n", name.c_str(),
              mma_slots, mma_slot, layer_error([&] { mma(4, true); }));
  print_row(name, "kernels, bulk mma, early", time_graph(stream, [&] { mma(count, true); }), L, layer_bytes);
  print_row(name, "kernels, bulk mma", time_graph(stream, [&] { mma(count, false); }), L, layer_bytes);
}

// ---- the sweep ----------------------------------------------------------------------------------

constexpr int kSweepProducts = 32;
constexpr size_t kSweepReadBytes = size_t(1) << 30;

// Sums the 16-byte vectors of IN (N of them) with the products' streaming hint, grid-striding,
// into one float per thread, written only when it is exactly 12345 (never, for the fill's values)
// so that the loads are not dead code.
__global__ void read_kernel(const uint4* in, size_t n, float* sink) {
  float s = 0.0f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(in + i);
    s += __uint_as_float(v.x) + __uint_as_float(v.y) + __uint_as_float(v.z) + __uint_as_float(v.w);
  }
  if (s == 12345.0f) *sink = s;
}

void sweep() {
  struct Size {
    int C, OC;
  };
  const Size sizes[] = {{1600, 1600}, {1600, 3200}, {1600, 4800}, {1600, 6400}, {6400, 1600},
                        {1600, 12800}, {1600, 25600}, {768, 768}, {768, 3072}, {3072, 768}, {2048, 16384}};
  size_t most = 0;
  for (const Size& z : sizes) most = std::max(most, size_t(z.C) * z.OC);
  meg::cuda::DeviceAllocator alloc;
  meg::cuda::DeviceArray<bf16> weights(alloc, std::max(most * kSweepProducts, kSweepReadBytes / sizeof(bf16)));
  meg::cuda::DeviceArray<bf16> acts(alloc, 2 * 25600);
  meg::cuda::DeviceArray<float> sink(alloc, 1);
  fill(weights.get(), std::max(most * kSweepProducts, kSweepReadBytes / sizeof(bf16)), 1);
  fill(acts.get(), 2 * 25600, 2);
  const meg::cuda::Stream owned_stream;
  const cudaStream_t stream = owned_stream.get();
  MEG_CUDA_CHECK(cudaDeviceSynchronize());

  int sms = 0, device = 0;
  MEG_CUDA_CHECK(cudaGetDevice(&device));
  MEG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const double read_ms = meg::bench::median(meg::bench::time_calls(stream, 3, 20, [&] {
    read_kernel<<<4 * sms, 512, 0, stream>>>(reinterpret_cast<const uint4*>(weights.get()), kSweepReadBytes / 16,
                                             sink.get());
    MEG_CUDA_CHECK(cudaGetLastError());
  }));
  const double ceiling = double(kSweepReadBytes) / (read_ms * 1e-3);
  std::printf("plain streaming read of %zu MB: %.2f TB/s (%.2f of %.2f)\n\n", kSweepReadBytes >> 20, ceiling / 1e12,
              ceiling / bandwidth(), bandwidth() / 1e12);
  std::printf("| C | OC | MB | us/product | TB/s |\n|---|---|---|---|---|\n");
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const Size& z : sizes) {
    const size_t elems = size_t(z.C) * z.OC;
    const double ms = time_graph(stream, [&] {
      for (int k = 0; k < kSweepProducts; ++k)  // alternating between two rows, as a chain does
        if (!meg::cuda::small_linear<bf16>(acts.get() + (k % 2 ? 0 : 25600), acts.get() + (k % 2 ? 25600 : 0),
                                           weights.get() + size_t(k) * elems, nullptr, 1, z.C, z.OC, {},
                                           meg::cuda::SmallLinearEpilogue::store, stream))
          throw std::runtime_error("small_linear declined a product of the sweep");
    });
    const double us = ms * 1e3 / kSweepProducts, mb = double(elems) * sizeof(bf16) / 1e6;
    std::printf("| %d | %d | %.1f | %.2f | %.2f |\n", z.C, z.OC, mb, us, mb / us);
    sx += mb;
    sy += us;
    sxx += mb * mb;
    sxy += mb * us;
  }
  const double n = double(std::size(sizes)), slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  const double boundary = (sy - slope * sx) / n;
  std::printf("\nfit: %.2f us a boundary + bytes at %.2f TB/s (%.2f of the plain read)\n", boundary,
              1.0 / slope, 1e12 / slope / ceiling);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--sweep") == 0) {
    sweep();
    return 0;
  }
  std::vector<Shape> models;
  for (int i = 1; i < argc; ++i) {
    const auto it = std::find_if(std::begin(kShapes), std::end(kShapes),
                                 [&](const Shape& s) { return std::strcmp(s.name, argv[i]) == 0; });
    if (it == std::end(kShapes)) {
      std::fprintf(stderr, "usage: bench_decode_chain [gpt2-124m | gpt2-1.5b | llama-1b ...]\n");
      return 2;
    }
    models.push_back(*it);
  }
  if (models.empty()) models.assign(std::begin(kShapes), std::end(kShapes));
  cudaDeviceProp prop;
  MEG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s (%.2f TB/s), bf16, one row; median of %d runs of each model's whole chain\n\n", prop.name,
              bandwidth() / 1e12, kRuns);
  std::printf("| model | variant | us/layer | MB/layer | TB/s | of peak |\n|---|---|---|---|---|---|\n");
  for (const Shape& m : models) {
    try {
      bench(m);
    } catch (const std::exception& e) {
      std::printf("| %s | failed: %s |\n", m.name, e.what());
    }
  }
  return 0;
}
