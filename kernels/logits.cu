// What the inference paths read off the logits [N, Vp] (X = fp32, bf16 or fp16; the real
// vocabulary is columns [0, V), the rest is padding):
//   - logits_to_float: the real columns in fp32, what meg-generate samples from on the host;
//   - argmax_rows: each row's greedy token, what meg-eval compares its targets with (their
//     log-probabilities come from cross_entropy_fused, kernels/cross_entropy.cu), so that no
//     [N, V] array crosses to the host; merge_argmax_rows, the argmax of a vocabulary split over
//     a tensor-parallel group from its members' (so that no member gathers the others' logits);
//   - top_k_rows: each row's K largest logits and their columns, from which meg-generate's top-k
//     sampling draws on the host, so that K values a row cross rather than V;
//   - sample_rows: each row's draw from the softmax of its logits (temperature and top-p), so
//     that a token a row crosses.
// The launchers are declared in ops/cuda/ops.hpp.
#include <cuda_runtime.h>

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "cluster.cuh"
#include "common.cuh"
#include "overlapped_launch.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kArgmaxBlock = 512;  // threads per row: ~12 packs each for 50304 bf16 columns

// out[r, j] = logits[r, j] for j < V. Rows of V values need not be 16-byte aligned (V is the
// tokenizer's, often odd), so this moves one value per thread and step; it runs on a handful of
// rows (a decode step's), small next to the product that made them.
template <typename X>
__global__ void logits_to_float_kernel(float* out, const X* logits, int N, int V, int Vp) {
  const size_t total = size_t(N) * V;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const size_t r = idx / V, j = idx % V;
    out[idx] = to_float(logits[r * Vp + j]);
  }
}

// A candidate for the maximum: its value and column. NaN logits never win (every comparison with
// NaN is false).
struct Best {
  float value;
  int index;
};

// Whether a beats b: a larger value, or an equal one at a lower column (torch.argmax's choice
// among equal maxima).
__device__ bool beats(Best a, Best b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

__device__ Best warp_best(Best b) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const Best o{__shfl_xor_sync(0xffffffffu, b.value, offset),
                 __shfl_xor_sync(0xffffffffu, b.index, offset)};
    if (beats(o, b)) b = o;
  }
  return b;
}

// Block per row. Each thread scans its packs of W columns in column order, keeping the first
// maximum it meets (from no candidate at all, so that a row whose largest value is -inf gives its
// first -inf column, as the host's greedy choice does); then the block's candidates are reduced
// through shuffles and shared memory. A row of NaN everywhere gives column 0 (and value NaN).
template <typename X, int W>
__global__ void __launch_bounds__(kArgmaxBlock)
    argmax_kernel(int32_t* out, float* values, const X* logits, int V, int Vp) {
  const X* x = logits + size_t(blockIdx.x) * Vp;
  Best best{-INFINITY, INT_MAX};
  for (int p = threadIdx.x; p < Vp / W; p += kArgmaxBlock) {
    const Vec<X, W> v = reinterpret_cast<const Vec<X, W>*>(x)[p];
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const int j = p * W + k;
      const float f = to_float(v.v[k]);
      if (j < V && beats({f, j}, best)) best = {f, j};
    }
  }
  __shared__ Best warps[kArgmaxBlock / kWarp];
  best = warp_best(best);
  if (threadIdx.x % kWarp == 0) warps[threadIdx.x / kWarp] = best;
  __syncthreads();
  if (threadIdx.x < kWarp) {
    best = threadIdx.x < kArgmaxBlock / kWarp ? warps[threadIdx.x] : Best{-INFINITY, INT_MAX};
    best = warp_best(best);
    if (threadIdx.x == 0) {
      out[blockIdx.x] = best.index == INT_MAX ? 0 : best.index;
      if (values) values[blockIdx.x] = best.index == INT_MAX ? NAN : best.value;
    }
  }
}

// Thread per row: the members' candidates in member order, each column numbered in the whole row.
// A NaN value is a member without one, which beats() never lets win.
__global__ void merge_argmax_kernel(int32_t* out, const int32_t* parts, int P, int N, int shard) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= N) return;
  Best best{-INFINITY, INT_MAX};
  for (int m = 0; m < P; ++m) {
    const int32_t* part = parts + size_t(m) * 2 * N;
    const Best b{__int_as_float(part[N + r]), m * shard + part[r]};
    if (beats(b, best)) best = b;
  }
  out[r] = best.index == INT_MAX ? 0 : best.index;
}

// Radix select over a row's keys. A logit's key orders like its value (-0 as +0, so that they
// tie, as they compare); NaN has none and never takes part.
__device__ uint32_t order_key(float f) {
  const uint32_t b = __float_as_uint(f == 0.0f ? 0.0f : f);
  return b & 0x80000000u ? ~b : b | 0x80000000u;
}

// The value of key K (+0 for a zero).
__device__ float key_value(uint32_t k) {
  return __uint_as_float(k & 0x80000000u ? k & 0x7fffffffu : ~k);
}

__device__ unsigned long long umax64(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
__device__ unsigned long long umin64(unsigned long long a, unsigned long long b) { return a < b ? a : b; }

constexpr int kRowBlock = 1024;  // threads a block of top_k_kernel and sample_kernel
// Blocks a row at a decode step's few rows: up to 16 (a size Hopper allows a kernel that asks for
// it), where the device places that many clusters of 16; else up to 8 (the portable size).
constexpr int kRowCluster = 16, kPortableRowCluster = 8;
static_assert(kRowBlock == kWarp * kWarp, "cluster_scan scans a block's warps with one warp's lanes");
constexpr int kDigitBits = 8, kDigits = 1 << kDigitBits;
// 32-bit words of a warp's histogram of kDigits weights W (warp_histogram_add's).
template <typename W>
constexpr int kHistogramWords = int(sizeof(W) / sizeof(unsigned)) * kDigits;

// A row split over a cluster of PARTS blocks (1: a block a row): block PART's columns [begin,
// end), contiguous, and of each warp a contiguous piece of those, [warp_begin, warp_end), whose
// lanes take consecutive columns a step at a time (loads a warp makes at once, where a thread's
// own piece would spread them over 32 sectors). Column order is then the order of (block, warp,
// step, lane), for what is counted in column order.
struct RowShare {
  int begin, end, warp_begin, warp_end;
  __device__ RowShare(int V, int parts, int part) {
    const int per_block = ceil_div(V, parts);
    begin = min(V, part * per_block);
    end = min(V, begin + per_block);
    const int per_warp = ceil_div(end - begin, kRowBlock) * kWarp;  // whole steps
    warp_begin = min(end, begin + int(threadIdx.x) / kWarp * per_warp);
    warp_end = min(end, warp_begin + per_warp);
  }
};

// The values of a block's share of a row, read through value(j) for its columns j: staged in
// shared memory once, all loads in flight together, where they fit (RowStage), so that each pass
// over them waits on shared memory rather than on a round trip to L2 for every few columns; else
// read from the row itself.
template <typename X>
struct RowValues {
  const X* values;
  int first;  // the column of values[0]
  __device__ float operator()(int j) const { return to_float(values[j - first]); }
};

// The dynamic shared memory of a block of top_k_kernel or sample_kernel, in this order:
//   - a histogram of kDigits weights W for each of its warps (select_key's), always;
//   - its share's values (RowValues), where they fit;
//   - for sample_kernel (MASSES), its share's masses (RowMasses, 8 bytes a column), where they
//     fit after the values (which every pass reads, the masses only some).
// BYTES in all, at most LIMIT: the device's limit for a block less the kernel's static shared memory.
struct RowStage {
  size_t bytes = 0, masses_offset = 0, values_offset = 0;
  bool masses = false, values = false;
};

template <typename X, typename W>
RowStage row_stage(int V, int parts, size_t limit, bool masses) {
  const size_t share = size_t(ceil_div(V, parts));
  RowStage stage;
  stage.bytes = size_t(kRowBlock / kWarp) * kHistogramWords<W> * sizeof(unsigned);
  if (stage.bytes + share * sizeof(X) <= limit) {
    stage.values = true;
    stage.values_offset = stage.bytes;
    stage.bytes += share * sizeof(X);
  }
  const size_t mass_bytes = share * sizeof(unsigned long long);
  if (masses && stage.values && (stage.bytes + 7) / 8 * 8 + mass_bytes <= limit) {
    stage.masses = true;
    stage.masses_offset = (stage.bytes + 7) / 8 * 8;
    stage.bytes = stage.masses_offset + mass_bytes;
  }
  return stage;
}

// The part of a block's dynamic shared memory SHARED at byte OFFSET (RowStage's).
template <typename T>
__device__ T* stage_part(uint4* shared, size_t offset) {
  return reinterpret_cast<T*>(reinterpret_cast<char*>(shared) + offset);
}

// After the wait for the kernel that wrote ROW: the block's share staged in STAGE, if any (a
// barrier, so every thread then reads every value).
template <typename X>
__device__ RowValues<X> stage_row(const X* row, const RowShare& share, X* stage) {
  if (!stage) return {row, 0};
#pragma unroll 8
  for (int j = share.begin + int(threadIdx.x); j < share.end; j += kRowBlock) stage[j - share.begin] = row[j];
  __syncthreads();
  return {stage, share.begin};
}

// A warp's histogram of kDigits weights W (select_key's) is in 32-bit words (kHistogramWords): for
// a 64-bit W, the low words of the kDigits weights, then their high words. Shared memory has
// 32-bit additions in one instruction, whose lanes at one address the hardware queues, but a
// 64-bit addition is a compare-and-swap loop that such lanes retry in turn, which the crowded
// digits of a row's keys made the better part of sample_kernel's time.
// Adds WEIGHT to HISTOGRAM's DIGIT, where DIGIT is below kDigits: a 64-bit weight as its low word,
// then its high word with the carry out of the low word's addition (which the addition's old value
// shows), so that the two words hold the exact sum in any order of additions.
template <typename W>
__device__ void warp_histogram_add(unsigned* histogram, unsigned digit, W weight) {
  if (digit >= kDigits) return;
  if constexpr (sizeof(W) == sizeof(unsigned)) {
    atomicAdd(&histogram[digit], weight);
  } else {
    const unsigned low = unsigned(weight), before = atomicAdd(&histogram[digit], low);
    const unsigned high = unsigned(weight >> 32) + (before + low < before ? 1u : 0u);
    if (high != 0) atomicAdd(&histogram[kDigits + digit], high);
  }
}

template <typename W>
__device__ W warp_histogram_value(const unsigned* histogram, int digit) {
  if constexpr (sizeof(W) == sizeof(unsigned))
    return histogram[digit];
  else
    return (W(histogram[kDigits + digit]) << 32) + histogram[digit];
}

// Leading bytes of the order keys of X's values (a float's key, in order_key, has the value's
// bits: bf16 and fp16 values leave the last 16 and 13 of them 0).
template <typename X>
constexpr int kKeyBytes = sizeof(X) == 4 ? 4 : std::is_same_v<X, bf16> ? 2 : 3;

// V (in this block's shared memory) of each of the cluster's PARTS blocks, in VALUES (0 past
// PARTS): the remote reads issued together rather than one after another's return.
template <typename W>
__device__ void cluster_values(W* v, int parts, W (&values)[kRowCluster]) {
#pragma unroll
  for (int r = 0; r < kRowCluster; ++r) values[r] = r < parts ? *cluster_shared(v, parts, r) : W(0);
}

// The sum of V over the cluster's PARTS blocks.
template <typename W>
__device__ W cluster_total(W* v, int parts) {
  W values[kRowCluster];
  cluster_values(v, parts, values);
  W total = 0;
#pragma unroll
  for (int r = 0; r < kRowCluster; ++r) total += values[r];
  return total;
}

// By the 32 lanes of a warp: the digit where the running sum of TOTALS [kDigits] from the top
// reaches WANTED (0 if none does: a top-k row with fewer than K values), and in ABOVE, the sum of
// the digits above it. Each lane adds its 8 digits, a suffix sum over the lanes finds the lane
// where WANTED is reached, and that lane finds the digit among its own.
template <typename W>
__device__ int find_digit(const W* totals, W wanted, W& above) {
  constexpr int kPerLane = kDigits / kWarp;
  const int lane = threadIdx.x % kWarp;
  W mine = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) mine += totals[lane * kPerLane + i];
  W from_here = mine;  // this lane's digits and those of the lanes above
  for (int offset = 1; offset < kWarp; offset *= 2) {
    const W o = __shfl_down_sync(0xffffffffu, from_here, offset);
    if (lane + offset < kWarp) from_here += o;
  }
  const W above_lane = from_here - mine;
  const unsigned reached = __ballot_sync(0xffffffffu, from_here >= wanted);
  const int last = reached ? kWarp - 1 - __clz(reached) : 0;  // the highest lane whose sum reaches it
  int digit = 0;
  W sum = 0;
  if (lane == last) {
    sum = above_lane;
    digit = last * kPerLane + kPerLane - 1;
    while (digit > last * kPerLane && sum + totals[digit] < wanted) sum += totals[digit--];
  }
  above = __shfl_sync(0xffffffffu, sum, last);
  return __shfl_sync(0xffffffffu, digit, last);
}

// The key T of the row's keys (with their weights W > 0: a count of 1, or a probability mass)
// where the weight of the keys from the largest down reaches WANTED, which then becomes the weight
// still wanted of the keys equal to T (at least 1, at most theirs). KEY_WEIGHT(j) gives column
// j's key and weight (weight 0: none, as for NaN). T is found a byte at a time from the top: each
// block's histogram of the next byte over its share of the keys that share the bytes found so
// far, the cluster's histograms added up (through distributed shared memory) by every block
// alike, and the byte where the weight from the top reaches what is still wanted (integers: the
// same at any thread order).
//
// Each warp counts into a histogram of its own (WARP_HISTOGRAMS, kHistogramWords<W> words a warp),
// and the block's is their sum: the keys of a row crowd into few bytes (the top byte of most
// logits is one of a handful), and with one histogram for the block every warp's additions queued
// at the same few digits.
//
// The keys of X's values have only kKeyBytes<X> leading bytes that differ: the rest of a key is
// all 0 (for a positive value) or all 1 (negative), and is filled in rather than searched.
template <typename X, typename W, typename KeyWeight>
__device__ uint32_t select_key(const RowShare& share, int parts, W& wanted, unsigned* warp_histograms,
                               KeyWeight key_weight) {
  __shared__ W histogram[kDigits], totals[kDigits];
  __shared__ uint32_t prefix_found;
  __shared__ W wanted_left;
  unsigned* own = warp_histograms + threadIdx.x / kWarp * kHistogramWords<W>;
  uint32_t prefix = 0, mask = 0;
  constexpr int kLastShift = 32 - kDigitBits * kKeyBytes<X>;
  for (int shift = 32 - kDigitBits; shift >= kLastShift; shift -= kDigitBits) {
    for (int i = threadIdx.x % kWarp; i < kHistogramWords<W>; i += kWarp) own[i] = 0;
    __syncwarp();
    for (int j = share.begin + int(threadIdx.x); j < share.end; j += kRowBlock) {
      uint32_t key = 0;
      W weight = 0;
      key_weight(j, key, weight);
      if (weight > 0 && (key & mask) == prefix) warp_histogram_add(own, (key >> shift) & (kDigits - 1), weight);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kDigits; i += kRowBlock) {
      W sum = 0;
#pragma unroll 8
      for (int w = 0; w < kRowBlock / kWarp; ++w)
        sum += warp_histogram_value<W>(warp_histograms + w * kHistogramWords<W>, i);
      histogram[i] = sum;
    }
    __syncthreads();
    cluster_barrier(parts);  // every block's histogram complete
    for (int i = threadIdx.x; i < kDigits; i += kRowBlock) totals[i] = cluster_total(histogram + i, parts);
    __syncthreads();
    if (threadIdx.x < kWarp) {
      W above = 0;
      const int digit = find_digit(totals, wanted, above);
      if (threadIdx.x == 0) {
        prefix_found = prefix | uint32_t(digit) << shift;
        wanted_left = wanted - above;
      }
    }
    cluster_barrier(parts);  // every block has read the histograms before they are cleared
    __syncthreads();
    prefix = prefix_found;
    wanted = wanted_left;
    mask |= uint32_t(kDigits - 1) << shift;
  }
  if constexpr (kLastShift > 0) {
    if (!(prefix & 0x80000000u)) prefix |= (1u << kLastShift) - 1;
  }
  return prefix;
}

// Over the cluster, the warps in column order (RowShare's): the sum of every warp's WARP_VALUE
// (the same in all its lanes), to every thread, and with BEFORE, the sum of those of the warps
// before this one. BLOCK_SUM: a __shared__ word for this scan alone, read by the other blocks: it
// must outlive their reads (a cluster barrier before the block exits). Integer sums: the same in
// any order.
template <typename W>
__device__ W cluster_scan(W warp_value, W* block_sum, int parts, int part, W* before = nullptr) {
  __shared__ W warp_values[kRowBlock / kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) warp_values[warp] = warp_value;
  __syncthreads();
  // Every warp scans the block's warp values alike, lane w holding warp w's (a shuffle scan, where
  // a loop over them would be a chain of 32 dependent additions in every thread).
  W inclusive = warp_values[lane];
  for (int offset = 1; offset < kWarp; offset *= 2) {
    const W o = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += o;
  }
  W earlier = __shfl_sync(0xffffffffu, inclusive, warp) - warp_value;
  const W block = __shfl_sync(0xffffffffu, inclusive, kWarp - 1);
  if (threadIdx.x == 0) *block_sum = block;
  __syncthreads();  // every thread has read warp_values before another scan writes them
  cluster_barrier(parts);
  W sums[kRowCluster];
  cluster_values(block_sum, parts, sums);
  W total = 0;
#pragma unroll
  for (int r = 0; r < kRowCluster; ++r) {
    if (r < part) earlier += sums[r];
    total += sums[r];
  }
  if (before) *before = earlier;
  return total;
}

// The sum of VALUE(j) over the warp's piece of the row, to every lane.
template <typename W, typename Value>
__device__ W warp_piece_sum(const RowShare& share, Value value) {
  W sum = 0;
  for (int j = share.warp_begin + int(threadIdx.x % kWarp); j < share.warp_end; j += kWarp) sum += value(j);
  return warp_sum(sum);
}

// By a warp, over its piece of the row: the first column j where RUNNING plus the sum of VALUE
// over the piece's columns up to j reaches TARGET, and that sum (RUNNING + ..., in REACHED), or
// -1 where the piece's sum falls short. VALUE(j) >= 0.
template <typename W, typename Value>
__device__ int warp_find(const RowShare& share, W running, W target, W& reached, Value value) {
  const int lane = threadIdx.x % kWarp;
  for (int base = share.warp_begin; base < share.warp_end; base += kWarp) {
    const int j = base + lane;
    W inclusive = j < share.warp_end ? value(j) : W(0);
    for (int offset = 1; offset < kWarp; offset *= 2) {
      const W o = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= offset) inclusive += o;
    }
    const unsigned hit = __ballot_sync(0xffffffffu, running + inclusive >= target);
    if (hit) {
      reached = running + __shfl_sync(0xffffffffu, inclusive, __ffs(hit) - 1);
      return base + __ffs(hit) - 1;
    }
    running += __shfl_sync(0xffffffffu, inclusive, kWarp - 1);
  }
  return -1;
}

// Top-k: row blockIdx.x / PARTS, by a cluster of PARTS consecutive blocks. The K-th largest key T
// is found by select_key with weights of 1; every key above T is a candidate, and of the keys
// equal to T the ones with the lowest columns, as many as are still wanted, ranked in column
// order (cluster_scan over the warps' pieces, a ballot a step within them). Candidates are
// written in no particular order (the caller sorts K values); where a row has fewer than K values
// that are not NaN, the rest of its K are column -1.
template <typename X>
__global__ void __launch_bounds__(kRowBlock)
    top_k_kernel(int32_t* columns, float* values, const X* logits, int V, int Vp, int K, int parts, RowStage stage) {
  const int row = blockIdx.x / parts, part = blockIdx.x % parts;
  extern __shared__ uint4 shared_stage[];
  int32_t* row_columns = columns + size_t(row) * K;
  float* row_values = values + size_t(row) * K;
  __shared__ unsigned written, block_equal;
  const RowShare share(V, parts, part);
  wait_for_previous_kernel();
  X* staged_values = stage.values ? stage_part<X>(shared_stage, stage.values_offset) : nullptr;
  const RowValues<X> value = stage_row(logits + size_t(row) * Vp, share, staged_values);

  unsigned wanted = unsigned(K);
  unsigned* warp_histograms = stage_part<unsigned>(shared_stage, 0);
  const auto key_count = [&](int j, uint32_t& key, unsigned& weight) {
    const float f = value(j);
    key = order_key(f);
    weight = f == f;
  };
  const uint32_t threshold = select_key<X>(share, parts, wanted, warp_histograms, key_count);
  // Keys above T: K - wanted of them. Keys equal to T: the first `wanted` by column, ranked by
  // the equal keys before them (a ballot a step).
  const unsigned above = unsigned(K) - wanted;
  const int lane = threadIdx.x % kWarp;
  const unsigned lanes_before = (1u << lane) - 1;
  unsigned equal = 0;
  for (int base = share.warp_begin; base < share.warp_end; base += kWarp) {
    const int j = base + lane;
    const float f = j < share.warp_end ? value(j) : NAN;
    equal += __popc(__ballot_sync(0xffffffffu, f == f && order_key(f) == threshold));
  }
  if (threadIdx.x == 0) written = 0;  // read by the other blocks only after the scan's cluster barrier
  unsigned rank = 0;
  const unsigned equal_total = cluster_scan(equal, &block_equal, parts, part, &rank);
  unsigned* slots_written = cluster_shared(&written, parts, 0);
  for (int base = share.warp_begin; base < share.warp_end; base += kWarp) {
    const int j = base + lane;
    const float f = j < share.warp_end ? value(j) : NAN;
    const uint32_t key = f == f ? order_key(f) : 0;
    const unsigned equals = __ballot_sync(0xffffffffu, f == f && key == threshold);
    int slot = -1;
    if (f == f && key > threshold) {
      slot = int(atomicAdd(slots_written, 1u));
    } else if (equals >> lane & 1) {
      const unsigned r = rank + __popc(equals & lanes_before);
      if (r < wanted) slot = int(above + r);
    }
    rank += __popc(equals);
    if (slot >= 0) {
      row_columns[slot] = j;
      row_values[slot] = f;
    }
  }
  if (part == 0)
    for (int slot = int(above + min(wanted, equal_total) + threadIdx.x); slot < K; slot += kRowBlock)
      row_columns[slot] = -1;
  cluster_barrier(parts);  // block 0's `written` outlives every block's additions
}

// A logit's probability relative to the row's largest, in units of 2^-kMassBits: exp((f - max) /
// t) rounded to an integer (0 for NaN, and below 2^-(kMassBits + 1)). In integers, the sums of a
// row's masses are exact, the same in any order, and at most 2^63 for rows of up to 2^23 columns.
constexpr int kMassBits = 40;
constexpr int kMaxSampleColumns = 1 << 23;

__device__ unsigned long long mass(float f, float largest, float t) {
  if (f != f) return 0;
  return __float2ull_rn(ldexpf(expf((f - largest) / t), kMassBits));
}

// The masses of a block's share of a row, read through operator()(j) for its columns j: kept in
// shared memory by the pass that sums them, where the launcher gave room for them, so that each
// later pass reads a mass rather than computing its division, exponential and conversion again
// (most of a pass's instructions); else computed again from the values.
template <typename X>
struct RowMasses {
  unsigned long long* kept;  // null: none kept
  int first;                 // the column of kept[0]
  RowValues<X> value;
  float largest, t;
  __device__ unsigned long long operator()(int j) const {
    return kept ? kept[j - first] : mass(value(j), largest, t);
  }
};

// One draw a row from the softmax of its logits over its temperature, kept to the nucleus of
// top_p (Sampler::sample's draw with top-k off and no penalty): row blockIdx.x / PARTS, by a
// cluster of PARTS consecutive blocks. In passes over the row:
//   1. the largest key and its lowest column (NaN never): at temperature 0, or when the largest
//      logit is infinite (all the probability), that column is the choice; a row of NaN gives 0;
//   2. the masses' total Q;
//   3. for top_p < 1, the nucleus: of the keys from the largest down, the fewest whose masses
//      reach top_p Q (rounded up), equal keys taken by column: select_key finds the last key T
//      in, then the equal keys' masses in column order (cluster_scan over the warps' pieces,
//      warp_find within one) find the last column of T's in, and the nucleus's mass S (Q
//      without top-p);
//   4. the draw: r = u S rounded down, and the column where the running sum of the nucleus's
//      masses, in column order, passes r (found alike).
// STAGE: what the block's shared memory holds.
template <typename X>
__global__ void __launch_bounds__(kRowBlock)
    sample_kernel(int32_t* out, const X* logits, const RowDraw* draws, int V, int Vp, int parts, RowStage stage) {
  using Mass = unsigned long long;
  const int row = blockIdx.x / parts, part = blockIdx.x % parts;
  extern __shared__ uint4 shared_stage[];
  const RowShare share(V, parts, part);
  __shared__ unsigned long long block_best;
  __shared__ Mass block_total, block_equal, block_nucleus, cut_mass;
  __shared__ int cut_column;
  wait_for_previous_kernel();
  const RowDraw draw = draws[row];
  Mass* staged_masses = stage.masses ? stage_part<Mass>(shared_stage, stage.masses_offset) : nullptr;
  X* staged_values = stage.values ? stage_part<X>(shared_stage, stage.values_offset) : nullptr;
  const RowValues<X> value = stage_row(logits + size_t(row) * Vp, share, staged_values);

  // 1. The largest key, the lowest column among equal ones: the largest of (key, ~column).
  if (threadIdx.x == 0) block_best = 0;
  __syncthreads();
  unsigned long long best = 0;  // none: every key is above 0
  for (int j = share.begin + int(threadIdx.x); j < share.end; j += kRowBlock) {
    const float f = value(j);
    if (f == f) best = umax64(best, (unsigned long long)(order_key(f)) << 32 | ~uint32_t(j));
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) best = umax64(best, __shfl_xor_sync(0xffffffffu, best, offset));
  if (threadIdx.x % kWarp == 0) atomicMax(&block_best, best);
  __syncthreads();
  cluster_barrier(parts);
  unsigned long long bests[kRowCluster];
  cluster_values(&block_best, parts, bests);
  best = 0;
#pragma unroll
  for (int r = 0; r < kRowCluster; ++r) best = umax64(best, bests[r]);
  const float largest = key_value(uint32_t(best >> 32));
  if (best == 0 || draw.temperature == 0 || !isfinite(largest)) {
    if (part == 0 && threadIdx.x == 0) out[row] = best == 0 ? 0 : int32_t(~uint32_t(best));
    cluster_barrier(parts);  // block_best outlives the other blocks' reads
    return;
  }
  // A temperature under the smallest normal float divides as that does.
  const float t = fmaxf(float(draw.temperature), FLT_MIN);

  // 2. The total, keeping the masses (cluster_scan's barrier orders their writes before any read).
  Mass sum = 0;
  for (int j = share.begin + int(threadIdx.x); j < share.end; j += kRowBlock) {
    const Mass m = mass(value(j), largest, t);
    if (staged_masses) staged_masses[j - share.begin] = m;
    sum += m;
  }
  const Mass total = cluster_scan(warp_sum(sum), &block_total, parts, part);
  const RowMasses<X> masses{staged_masses, share.begin, value, largest, t};

  // 3. The nucleus: keys above T, and T's keys up to column `cut`.
  uint32_t threshold = 0;  // top_p = 1: every key (all are above 0)
  int cut = V;
  Mass nucleus = total;
  if (draw.top_p < 1) {
    const Mass target = umax64(1, umin64(total, Mass(ceil(draw.top_p * double(total)))));
    Mass wanted = target;
    unsigned* warp_histograms = stage_part<unsigned>(shared_stage, 0);
    threshold = select_key<X>(share, parts, wanted, warp_histograms, [&](int j, uint32_t& key, Mass& weight) {
      key = order_key(value(j));
      weight = masses(j);  // 0 for NaN
    });
    const auto equal_mass = [&](int j) {
      const float f = value(j);
      return f == f && order_key(f) == threshold ? masses(j) : Mass(0);
    };
    const Mass equal = warp_piece_sum<Mass>(share, equal_mass);
    Mass before = 0;
    cluster_scan(equal, &block_equal, parts, part, &before);
    if (before < wanted && wanted <= before + equal) {  // the warp where T's masses reach `wanted`
      Mass reached = 0;
      const int j = warp_find(share, before, wanted, reached, equal_mass);
      if (threadIdx.x % kWarp == 0) {
        *cluster_shared(&cut_column, parts, 0) = j;
        *cluster_shared(&cut_mass, parts, 0) = target - wanted + reached;
      }
    }
    cluster_barrier(parts);
    __syncthreads();
    cut = *cluster_shared(&cut_column, parts, 0);
    nucleus = *cluster_shared(&cut_mass, parts, 0);
  }
  const auto kept_mass = [&](int j) {
    const float f = value(j);
    if (f != f) return Mass(0);
    const uint32_t key = order_key(f);
    return key > threshold || (key == threshold && j <= cut) ? masses(j) : Mass(0);
  };

  // 4. The draw.
  const Mass r = umin64(nucleus - 1, Mass(draw.u * double(nucleus)));
  const Mass kept = warp_piece_sum<Mass>(share, kept_mass);
  Mass before = 0;
  cluster_scan(kept, &block_nucleus, parts, part, &before);
  if (before <= r && r < before + kept) {  // the warp where the running sum passes r
    Mass reached = 0;
    const int j = warp_find(share, before, r + 1, reached, kept_mass);
    if (threadIdx.x % kWarp == 0) out[row] = j;
  }
  cluster_barrier(parts);  // the block sums and the cut outlive the other blocks' reads
}

// The most clusters of 16 blocks of KERNEL, with BYTES of dynamic shared memory each, that the
// device runs at once (0: none, as before Hopper or where no 16 multiprocessors are together).
template <auto kernel>
int resident_clusters_of_16(size_t bytes) {
  if (!clusters_supported()) return 0;
  MEG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim = {unsigned(kRowCluster), 1, 1};
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(kRowCluster));
  config.blockDim = dim3(kRowBlock);
  config.dynamicSmemBytes = bytes;
  config.attrs = &cluster;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    cudaGetLastError();  // a device that cannot: clusters of 8 at most
    return 0;
  }
  return clusters;
}

// What a row kernel may ask for: its blocks' dynamic shared memory at most (the device's limit
// for a block less the kernel's own), and how many clusters of 16 blocks run at once.
struct RowKernelLimits {
  size_t shared_bytes = 0;
  int clusters_of_16 = 0;
};

template <auto kernel>
const RowKernelLimits& row_kernel_limits() {
  static RowKernelLimits limits;
  static std::once_flag configured;
  std::call_once(configured, [] {
    limits.shared_bytes = grant_most_shared_memory(kernel);
    limits.clusters_of_16 = resident_clusters_of_16<kernel>(limits.shared_bytes);
  });
  return limits;
}

// Blocks a row of a row kernel over N rows: a cluster of 16 where the device runs N such clusters
// at once, else of up to 8 (a power of two) while the rows' blocks still fit one a multiprocessor
// (a block of kRowBlock threads takes one), so that every block runs in the first wave.
int row_parts(int N, const RowKernelLimits& limits) {
  if (N <= limits.clusters_of_16) return kRowCluster;
  int parts = clusters_supported() ? kPortableRowCluster : 1;
  while (parts > 1 && N * parts > multiprocessors()) parts /= 2;
  return parts;
}

// KERNEL over N rows, PARTS blocks a row, with the shared memory STAGE says, launched overlapped
// with the kernel before it.
template <auto kernel, typename... Args>
void launch_row_kernel(int N, int parts, const RowStage& stage, cudaStream_t stream, Args&&... args) {
  launch_overlapped_clusters(kernel, dim3(unsigned(N) * parts), unsigned(parts), dim3(kRowBlock), stage.bytes, stream,
                             std::forward<Args>(args)..., parts, stage);
}

}  // namespace

template <typename X>
void logits_to_float(float* out, const X* logits, int N, int V, int Vp, cudaStream_t stream) {
  if (N <= 0 || V <= 0) return;
  logits_to_float_kernel<X>
      <<<grid_stride_blocks(size_t(N) * V, kBlock), kBlock, 0, stream>>>(out, logits, N, V, Vp);
  MEG_CUDA_CHECK(cudaGetLastError());
}

template <typename X>
void argmax_rows(int32_t* out, const X* logits, int N, int V, int Vp, cudaStream_t stream, float* values) {
  if (N <= 0) return;
  constexpr int W = kVecWidth<X>;
  if (Vp % W == 0 && aligned16(logits))
    argmax_kernel<X, W><<<N, kArgmaxBlock, 0, stream>>>(out, values, logits, V, Vp);
  else
    argmax_kernel<X, 1><<<N, kArgmaxBlock, 0, stream>>>(out, values, logits, V, Vp);
  MEG_CUDA_CHECK(cudaGetLastError());
}

void merge_argmax_rows(int32_t* out, const int32_t* parts, int P, int N, int shard, cudaStream_t stream) {
  if (N <= 0) return;
  merge_argmax_kernel<<<ceil_div(N, kBlock), kBlock, 0, stream>>>(out, parts, P, N, shard);
  MEG_CUDA_CHECK(cudaGetLastError());
}

template <typename X>
void top_k_rows(int32_t* columns, float* values, const X* logits, int N, int V, int Vp, int K, cudaStream_t stream) {
  if (N <= 0) return;
  if (K < 1 || K > kMaxTopK || V < 1 || V > Vp)
    throw std::invalid_argument("top_k_rows: K must be in [1, kMaxTopK] and V in [1, Vp]");
  const RowKernelLimits& limits = row_kernel_limits<top_k_kernel<X>>();
  const int parts = row_parts(N, limits);
  const RowStage stage = row_stage<X, unsigned>(V, parts, limits.shared_bytes, false);
  launch_row_kernel<top_k_kernel<X>>(N, parts, stage, stream, columns, values, logits, V, Vp, K);
}

template <typename X>
void sample_rows(int32_t* out, const X* logits, const RowDraw* draws, int N, int V, int Vp, cudaStream_t stream) {
  if (N <= 0) return;
  if (V < 1 || V > Vp || V > kMaxSampleColumns)
    throw std::invalid_argument("sample_rows: V must be in [1, Vp] and at most 2^23");
  const RowKernelLimits& limits = row_kernel_limits<sample_kernel<X>>();
  const int parts = row_parts(N, limits);
  const RowStage stage = row_stage<X, unsigned long long>(V, parts, limits.shared_bytes, true);
  launch_row_kernel<sample_kernel<X>>(N, parts, stage, stream, out, logits, draws, V, Vp);
}

#define MEG_INSTANTIATE(X)                                                                          \
  template void logits_to_float<X>(float*, const X*, int, int, int, cudaStream_t);                  \
  template void argmax_rows<X>(int32_t*, const X*, int, int, int, cudaStream_t, float*);            \
  template void top_k_rows<X>(int32_t*, float*, const X*, int, int, int, int, cudaStream_t);         \
  template void sample_rows<X>(int32_t*, const X*, const RowDraw*, int, int, int, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
