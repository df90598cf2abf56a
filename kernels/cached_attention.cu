// Attention of single query rows against a KV cache (kernels/kv_cache.cu), for X = fp32, bf16 or
// fp16 with fp32 arithmetic: the decode step of the inference path, and any prompt tokens that
// follow tokens already cached.
//
// Query q (of Q) is row rows[q] of the fused projection qkv [N, (NH + 2*NKV) * HS]; its token sits
// at position p = positions[row] of slot slots[row], whose keys and values [0, p] are in the cache
// (this batch's included: they are appended first). With s = q.k / sqrt(HS),
//   out[row, h] = sum_t p_t v_t,  p = softmax(s) over the keys t <= p of kv head h / (NH / NKV).
// A query at position p sees exactly the keys up to p, so a prompt's tokens appended in one batch
// are causal among themselves without a mask. With a sliding window W (Megatron's --window-size
// (W, 0)) it sees the keys p - W .. p: the splits share those out, and the older keys stay in the
// cache unread (a staged block still copies them: it holds the keys from 0 on).
//
// Decoding reads the whole cache for one query, and at batch 1 there are few (query, head) pairs:
// too few blocks to keep the memory busy. So the keys are split (flash-decoding): block (split,
// head group, query) takes a contiguous share of the query's keys and keeps a partial result, the
// running max m, sum l and unnormalised output o of an online softmax, and the partials are merged
// in split order (the result does not depend on the order the blocks ran in), in two levels:
//   - where the grid has too few (query, head group) pairs to fill the device even with 8 splits
//     each (batch-1 decode), the splits come in thread block clusters of up to 8 (Hopper and
//     later), and a cluster's first block merges its blocks' partials: they write them into its
//     shared memory (distributed shared memory) and arrive on an mbarrier there, so that they leave
//     at once and only the first block waits (rather than the first block reading the others'
//     shared memory between two cluster barriers, which kept every block until it had read).
//     Grids of 4-warp blocks split two to five ways are a cluster a (query, head group) too, of
//     at most three blocks (kFewWarpCluster: four or five splits are cut to three); split more
//     ways, each block is a cluster of its own;
//   - when a query needs more than one cluster, the clusters' merged partials go to the scratch,
//     and the last cluster to finish merges them there. It knows it is last from a counter per
//     (query, head group) in the scratch, which it also sets back to zero for the next launch.
// Merging in the kernel rather than in one of its own saves a launch and a round trip through
// memory per layer; merging within a cluster, where the partials never leave the multiprocessors,
// also saves the fence, the counter and the reads from L2 of the merge through memory (at batch 1
// a cluster takes 1024 keys of HS 64 in one pass). A query uses no more clusters than it takes for
// each block to request all of its share at once (one pass), so short contexts run in one cluster,
// some of whose blocks may have no keys; the grid's split count depends only on Q
// (cached_attention_splits), less the clusters that no cache of max_length keys needs: a decode
// step's launches keep their shape as the context grows, which CUDA graphs need. Clusters past a
// query's own count return at once.
//
// Short contexts: the staged grid. Where a launch would run clusters (few queries) and no query
// attends to more than staged_keys() keys (320 keys times the block's query heads, and 20480
// elements of K and of V), it runs one block of 8 warps a (query, head group) with no split: the
// block copies its query's older keys and values into shared memory (cp.async) before it waits,
// the new ones after, and attends from there, with nothing to merge across blocks: at such lengths
// a cluster's launch, barriers and merge cost more than the keys. A single block reads its keys at
// one multiprocessor's rate, so longer contexts lose. The caller passes the launch's longest
// context, and a captured decode step is keyed by the grid it chose (cached_attention_staged).
//
// Streaming blocks. The grids of many queries (batched decode, prompts after cached tokens) run
// blocks of 4 warps that read many passes of keys each. A block of grouped-query heads (G of 2 or
// 4) holds G heads' q and o in registers, so only 2 or 3 fit on a multiprocessor, and has G times
// the arithmetic per key: waiting for each pass's keys, then working on them, then requesting the
// next, it left the memory idle about half the time. So each of its warps streams its keys
// through a ring of shared memory (cp.async) holding kRingPasses passes: it requests pass i + 2
// while it works on pass i, and reads pass i from the ring into the registers the other grids load
// directly. Blocks of one head (GPT-2's) do not stream: they have little to do between passes, 4
// fit on a multiprocessor, and the ring made their steps slower. A ring of 4 passes was slower
// than 3.
//
// Inside a block. A key row of HS elements is read by P lanes, each holding W consecutive elements
// (16 bytes for bf16 with W = 8); P is HS / W rounded up to a power of two, lanes past the row
// idle, so a warp reads 32 / P keys at once, kUnroll times over, before using any of them. The
// P lanes of a key add their partial dot products with xor shuffles, which leave the same sum in
// each of them; every lane then updates its own online softmax (m, l, and o for its W elements)
// once for its kUnroll keys, so the key groups never wait on each other. Grouped-query
// attention: a block takes G query heads of one kv head (G the largest of 4, 2, 1 dividing
// NH / NKV), so every key and value read serves G heads. At the end the key groups of a warp
// merge their partials with shuffles, the warps theirs through shared memory, in a fixed order.
//
// The launch overlaps the kernel before it (kernels/overlapped_launch.cuh): the decode step's
// kernels are short, and each one's ramp-up would otherwise wait for the previous one's tail. The
// previous kernel wrote this batch's q and its newest keys and values (at most new_keys of each
// slot); the rows, slots and positions were staged before the step's first kernel and the older
// keys by earlier launches. So a block finds its query and requests its first older keys and values
// before it waits, and only the query and the new keys come after: the wait then overlaps the
// block's first round trip to memory rather than preceding it.
//
// Scores are kept in base-2 units (q is pre-scaled by log2(e) / sqrt(HS)), so each exponential is
// one ex2 instruction.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

#include "async_copy.cuh"
#include "cluster.cuh"
#include "common.cuh"
#include "kernel_timeline.cuh"
#include "overlapped_launch.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

MEG_KERNEL_TIMELINE_TABLE(cached_attention)

namespace {

// A grid of (query, head group) blocks of which two splits fit one wave (splits_keys()) splits
// their keys, into as many blocks of 4 warps (kFewWarps) as the multiprocessors hold at once
// (few_warp_blocks_per_sm()). When even 8 such splits per (query, head group) fall short
// (batch-1 decode), the blocks have 8 warps (kManyWarps) and come in clusters, so that a cluster
// takes 1024 keys of HS 64 in one pass; 4-warp blocks come in clusters where they split two or
// three ways. Unsplit grids of one-head blocks a little past one wave have 2 (kTwoWarps).
constexpr int kWarpsPerSM = 16;
constexpr int kTwoWarps = 2, kFewWarps = 4, kManyWarps = 8;
// Blocks of one query head (GPT-2's) compile to 128 registers a thread, as kWarpsPerSM needs.
// Without the limit the kernel took 129, which left room for 3 blocks of 4 warps rather than 4,
// and the 800 blocks of a batch of 32 GPT-2 1.5B decode rows 3 waves rather than 2.
// Blocks of 2 and 4 heads keep their q and o in registers and take what they need.
//
// The 4-warp blocks a multiprocessor holds at once, by query heads a block: as many as their
// registers allow, the fewest over the element types for 16-byte lanes (one head: 128 registers a
// thread, 4 blocks; two: 117 to 152, 3; four: 179 to 212, 2). A split grid of more blocks than
// that runs a second, short wave, which takes about as long as the first.
int few_warp_blocks_per_sm(int G) { return G == 1 ? 4 : G == 2 ? 3 : 2; }

constexpr int kUnroll = 4;        // keys per lane group loaded before the first is used
constexpr int kMaxCluster = 8;    // blocks of a cluster (the portable most)
// A 4-warp grid split at most this many ways merges its splits within a cluster (on devices that
// have them, Hopper and later), not through memory: the partials never leave the multiprocessors.
// Clusters of 4 to 8 such blocks were slower.
// A grid that one wave would split four or five ways (kMostSplitsCut) splits three, in one cluster:
// fewer, longer splits, but no merge through memory. Grids of more splits lost either way (cut to
// three in one cluster, or in clusters of two or three merged through memory) and keep their
// splits.
constexpr int kFewWarpCluster = 3;
constexpr int kMostSplitsCut = 5;
constexpr int kMaxClusters = 64;  // the merge through memory reads up to this many partials per (query, head)
// A staged block (one per (query, head group), its keys in shared memory) holds at most this many
// keys times query heads, and this many keys times HS elements of K and of V (160 KB in fp32).
constexpr int kStagedKeyHeads = 320;
constexpr int kStagedElements = 20480;
// Passes of keys a streaming block's warp has requested or holds at once (its ring of shared
// memory; kernel comment "Streaming blocks").
constexpr int kRingPasses = 3;

// Query heads per block: the largest of 4, 2, 1 that divides the group NH / NKV. Not 8: the block
// would hold 8 heads' q and o in registers (over 200 with W = 8, two blocks per multiprocessor),
// while two blocks of 4 read the same keys mostly from L2.
int heads_per_block(int group) {
  for (int g : {4, 2})
    if (group % g == 0) return g;
  return 1;
}

// The lanes that read one key row of CHUNKS vectors (a power of two: lanes past the row idle),
// and the keys a block of WARPS warps requests in one pass with them.
__host__ __device__ int lanes_per_key(int chunks) {
  int P = 1;
  while (P < chunks) P *= 2;
  return P;
}
__host__ __device__ int pass_keys(int chunks, int warps) {
  return warps * (kWarp / lanes_per_key(chunks)) * kUnroll;
}

// A split's partial result for one (query, head): m, l, then o[HS] (base-2 units, unnormalised).
__host__ __device__ size_t partial_floats(int HS) { return size_t(HS) + 2; }

// The partials a block's shared memory holds: its warps', and in a cluster's blocks the cluster's
// blocks' (for its first block to merge).
__host__ __device__ constexpr int partial_slots(int warps, bool clustered) {
  return warps + (clustered ? kMaxCluster : 0);
}

// The floats of a block's shared memory before a staged block's keys or a streaming block's ring:
// its SLOTS partials, rounded up to 16 bytes.
__host__ __device__ size_t keys_offset(int slots, int G, int HS) {
  return (size_t(slots) * G * partial_floats(HS) + 3) / 4 * 4;
}

// The 16-byte vectors of a streaming block's ring of K, and again of V: kRingPasses passes of
// kUnroll vectors a lane for each of its WARPS warps.
__host__ __device__ constexpr int ring_vectors(int warps) { return warps * kRingPasses * kUnroll * kWarp; }

// The clusters query LEN keys use, within the grid's CLUSTERS of CLUSTER blocks: no more than it
// takes for each block to read its keys in one pass of PASS keys (every key requested before any
// is used).
__device__ int query_clusters(int len, int clusters, int cluster, int pass) {
  return min(clusters, ceil_div(len, cluster * pass));
}

// Merges the partial (m2, l2, o2) into (m, l, o). Two empty partials (m = -inf) stay empty.
template <int W>
__device__ void merge(float& m, float& l, float (&o)[W], float m2, float l2, const float (&o2)[W]) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;
  const float a = fast_exp2(m - mx), b = fast_exp2(m2 - mx);
  l = l * a + l2 * b;
#pragma unroll
  for (int w = 0; w < W; ++w) o[w] = o[w] * a + o2[w] * b;
  m = mx;
}

// Whether blocks of G query heads and WARPS warps stream their keys through a ring of shared memory
// (kernel comment "Streaming blocks"): the unstaged 4-warp grids of grouped-query heads,
// where a lane's vector is 16 bytes (what one asynchronous copy moves).
template <typename X, int W, int G, int Warps, bool Staged>
constexpr bool kStreams = !Staged && Warps == kFewWarps && G > 1 && W * sizeof(X) == 16;

// A launch's arrays and shapes, as cached_attention takes them.
template <typename X>
struct Args {
  X* out;
  // The scratch: the counters of clusters done, one per (query, head group) block of the grid's
  // first split: at most counters_held() whenever the keys are split, so the partials stay at
  // the same place whatever Q is; then the [Q, NH, grid clusters] partial results.
  unsigned* counters;
  float* partials;
  const X *qkv, *k_cache, *v_cache;
  const int32_t *rows, *slots, *positions;
  int Q, NH, NKV, HS, max_length;
  int new_keys;     // a slot's keys the previous kernel wrote, at most: the last new_keys of its query
  int cluster;      // blocks per cluster, along the splits
  int staged_keys;  // a staged block's keys in shared memory, at most (0 for the other grids)
  int window;       // the sliding window, -1 for none
};

template <typename X, int W, int G, int Warps, bool Staged, bool Clustered>
__global__ void __launch_bounds__(Warps * kWarp, G == 1 ? kWarpsPerSM / Warps : 1)
    cached_attention_kernel(const Args<X> a, float scale_log2) {
  using V = Vec<X, W>;
  const KernelStamps stamps(cached_attention_timeline, a.k_cache, int(TimelineKind::cached_attention));
  const int NH = a.NH, NKV = a.NKV, HS = a.HS;
  // The lane's place: chunk c of the key row (elements [c W, c W + W)), key `sub` of the warp's.
  const int chunks = HS / W, P = lanes_per_key(chunks);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int c = lane % P, sub = lane / P, per_warp = kWarp / P;
  const bool has_chunk = c < chunks;
  const int pass = pass_keys(chunks, Warps);  // the keys a block requests at once

  // The block is split `split` of the query's `splits`, block `rank` of cluster `unit` of its
  // `units` (a cluster's blocks are consecutive along x). Blocks of 8 warps (not staged) and
  // 4-warp blocks split two to five ways (in two or three) come in clusters of more than one
  // (grid_splits()): the others' code is that of a block of its own.
  static_assert(!(Staged && Clustered), "a staged block is a cluster of its own");
  constexpr bool kClustered = Clustered;
  const int cluster = kClustered ? a.cluster : 1;
  const int q = blockIdx.z, split = blockIdx.x;
  const int rank = split % cluster, unit = split / cluster;
  const int row = a.rows[q], len = a.positions[row] + 1;
  const int lo = a.window < 0 ? 0 : max(0, len - 1 - a.window);  // the first key of its window
  const int units = query_clusters(len - lo, gridDim.x / cluster, cluster, pass);
  if (unit >= units) return;  // the whole cluster: this query needs fewer
  // A cluster's blocks write their partials into its first block's shared memory, each thread that
  // wrote (one an element of the G heads' outputs, or the whole block) arriving on that block's
  // mbarrier; the cluster barrier's wait comes before the first write, long after the initialization.
  const int writers = min(G * HS, Warps * kWarp);
  __shared__ uint64_t partials_in;
  if constexpr (kClustered) {
    if (rank == 0 && threadIdx.x == 0) cluster_mbarrier_init(&partials_in, unsigned((cluster - 1) * writers));
    cluster_arrive_relaxed();
  }
  const int splits = units * cluster;
  // A split may be empty (a short context in a cluster of several blocks): k_end <= k_begin.
  const int per_split = ceil_div(len - lo, splits);
  const int k_begin = lo + split * per_split, k_end = min(len, k_begin + per_split);

  // The block's query heads h0 .. h0 + G - 1, all of kv head g (G divides the group NH / NKV).
  const int h0 = blockIdx.y * G, g = h0 / (NH / NKV);

  const size_t head_rows = (size_t(a.slots[row]) * NKV + g) * a.max_length;
  const X* kp = a.k_cache + head_rows * HS + c * W;
  const X* vp = a.v_cache + head_rows * HS + c * W;
  // A staged block's keys [0, staged) in shared memory, after the warps' partials.
  extern __shared__ float smem[];
  X* const ks = reinterpret_cast<X*>(smem + keys_offset(partial_slots(Warps, Clustered), G, HS));
  X* const vs = ks + size_t(a.staged_keys) * HS;
  const int staged = Staged ? min(len, a.staged_keys) : 0;
  // A streaming block's warps each hold kRingPasses passes of kUnroll vectors a lane, of K then V,
  // also after the warps' partials: [warp][pass % kRingPasses][u][lane].
  constexpr bool kStreamed = kStreams<X, W, G, Warps, Staged>;
  V* const ring_k = reinterpret_cast<V*>(ks);
  V* const ring_v = ring_k + ring_vectors(Warps);
  auto ring_slot = [&](int pass_index, int u) {
    return ((warp * kRingPasses + pass_index % kRingPasses) * kUnroll + u) * kWarp + lane;
  };
  // The keys [from, to) of the kUnroll groups of the warp's next keys from BASE; the lane's others
  // keep what they hold (zeros at first: a lane without a chunk adds nothing to a dot product).
  V kx[kUnroll], vx[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
    for (int w = 0; w < W; ++w) kx[u].v[w] = vx[u].v[w] = from_float<X>(0.0f);
  }
  auto load_keys = [&](int base, int from, int to) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = base + u * per_warp + sub;
      if (has_chunk && t >= from && t < to) {
        const bool in_smem = Staged && t < staged;
        kx[u] = *reinterpret_cast<const V*>((in_smem ? ks + c * W : kp) + size_t(t) * HS);
        vx[u] = *reinterpret_cast<const V*>((in_smem ? vs + c * W : vp) + size_t(t) * HS);
      }
    }
  };
  // Blocks that load their keys straight into registers (neither staged, streamed nor of 8 warps:
  // batched decode's blocks of one head, GPT-2's) have one pass of keys in flight a warp, too
  // little to keep the memory busy at the warps a multiprocessor holds; registers for a second
  // would cost them warps (they take 128 now). So each pass's loads are followed by a request for
  // the next pass's rows into L2, which costs no registers, and the next loads find them there or
  // on their way. One pass ahead is enough: two gained nothing more.
  constexpr bool kPrefetches = !Staged && !kStreamed && Warps != kManyWarps;
  auto prefetch_keys = [&](int base, int to) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = base + u * per_warp + sub;
      if (has_chunk && t < to) {
        prefetch_l2(kp + size_t(t) * HS);
        prefetch_l2(vp + size_t(t) * HS);
      }
    }
  };
  const int first_base = k_begin + warp * per_warp * kUnroll;
  const int old_end = min(k_end, len - a.new_keys);
  // Requests the lane's keys [from, to) of the warp's pass PASS_INDEX into its slots of the ring
  // (each lane copies only what it reads back, so no barrier is needed); commits nothing.
  auto request_pass = [&](int pass_index, int from, int to) {
    const int base = first_base + pass_index * pass;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = base + u * per_warp + sub;
      if (has_chunk && t >= from && t < to) {
        cp_async_16(smem_addr(ring_k + ring_slot(pass_index, u)), kp + size_t(t) * HS, true);
        cp_async_16(smem_addr(ring_v + ring_slot(pass_index, u)), vp + size_t(t) * HS, true);
      }
    }
  };
  if constexpr (kStreamed) {
    // The first passes' older keys before the wait (a group each), their new keys after (one
    // group): no slot is written twice, since two copies to one address are unordered.
    for (int i = 0; i < kRingPasses - 1; ++i) {
      request_pass(i, k_begin, old_end);
      cp_async_commit();
    }
    // The next kernel (the output projection) may start now, before this one's wait: until its own
    // wait it reads its weights and the residual stream, which no kernel still running writes. Only
    // after this block's first keys are requested, which its weights' requests would otherwise
    // queue ahead of (letting it start at the kernel's start was slower).
    allow_next_kernel();
    wait_for_previous_kernel();  // the projection (and kv_cache_append) that wrote q and the new keys
    stamps.waited();
    for (int i = 0; i < kRingPasses - 1; ++i) request_pass(i, old_end, k_end);
    cp_async_commit();
  } else if constexpr (Staged) {
    // Rows [from, to) of the head's keys and values into shared memory, 16 bytes a copy.
    const int row_vecs = HS * int(sizeof(X)) / 16;
    const X* kg = a.k_cache + head_rows * HS;
    const X* vg = a.v_cache + head_rows * HS;
    auto stage = [&](int from, int to) {
      constexpr int kPerVec = 16 / sizeof(X);
      for (int i = from * row_vecs + int(threadIdx.x); i < to * row_vecs; i += Warps * kWarp) {
        cp_async_16(smem_addr(ks + size_t(i) * kPerVec), kg + size_t(i) * kPerVec, true);
        cp_async_16(smem_addr(vs + size_t(i) * kPerVec), vg + size_t(i) * kPerVec, true);
      }
      cp_async_commit();
    };
    stage(0, min(old_end, staged));
    allow_next_kernel();  // as above
    wait_for_previous_kernel();  // the projection (and kv_cache_append) that wrote q and the new keys
    stamps.waited();
    stage(min(old_end, staged), staged);
    cp_async_wait<0>();
    __syncthreads();
    load_keys(first_base, k_begin, k_end);
  } else {
    load_keys(first_base, k_begin, old_end);
    if constexpr (kPrefetches) prefetch_keys(first_base + pass, k_end);
    allow_next_kernel();  // as above
    wait_for_previous_kernel();  // the projection (and kv_cache_append) that wrote q and the new keys
    stamps.waited();
    load_keys(first_base, old_end, k_end);
  }

  float qv[G][W] = {};
  const X* qrow = a.qkv + size_t(row) * (NH + 2 * NKV) * HS + size_t(h0) * HS + c * W;
  if (has_chunk) {
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const V x = *reinterpret_cast<const V*>(qrow + j * HS);
#pragma unroll
      for (int w = 0; w < W; ++w) qv[j][w] = to_float(x.v[w]) * scale_log2;
    }
  }

  float m[G], l[G], o[G][W];
#pragma unroll
  for (int j = 0; j < G; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.0f;
#pragma unroll
    for (int w = 0; w < W; ++w) o[j][w] = 0.0f;
  }

  // The loop condition depends on the warp only: every lane reaches the shuffles. Past k_end a
  // lane keeps its last keys, whose scores are left out.
  for (int base = first_base, i = 0; base < k_end; base += pass, ++i) {
    if constexpr (kStreamed) {
      // Pass i + kRingPasses - 1 into the slots pass i - 1 left (its keys are in registers and
      // used), then wait for pass i: at i = 0 for every group but this one (the first passes' new
      // keys came last), later for all but the kRingPasses - 1 newest.
      static_assert(kRingPasses == 3, "the waits below count groups for three passes");
      request_pass(i + kRingPasses - 1, k_begin, k_end);
      cp_async_commit();
      if (i == 0) cp_async_wait<1>();
      else cp_async_wait<kRingPasses - 1>();
      if (has_chunk) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          kx[u] = ring_k[ring_slot(i, u)];
          vx[u] = ring_v[ring_slot(i, u)];
        }
      }
    } else if (base != first_base) {
      load_keys(base, base, k_end);
      if constexpr (kPrefetches) prefetch_keys(base + pass, k_end);
    }
    // The kUnroll x G scores at once (independent dot products and shuffles), then one update of
    // each head's running max for all of them: the dependent chain is per pass, not per key.
    float s[kUnroll][G];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int j = 0; j < G; ++j) {
        s[u][j] = 0.0f;
#pragma unroll
        for (int w = 0; w < W; ++w) s[u][j] += qv[j][w] * to_float(kx[u].v[w]);
      }
    }
    for (int offset = P / 2; offset > 0; offset /= 2) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int j = 0; j < G; ++j) s[u][j] += __shfl_xor_sync(0xffffffffu, s[u][j], offset);
      }
    }
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) valid[u] = base + u * per_warp + sub < k_end;
    if (!valid[0]) continue;  // none of the lane's keys (they are in order)
#pragma unroll
    for (int j = 0; j < G; ++j) {
      float mx = m[j];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (valid[u]) mx = fmaxf(mx, s[u][j]);
      const float corr = fast_exp2(m[j] - mx);  // 0 at the first keys, where m is -inf
      l[j] *= corr;
#pragma unroll
      for (int w = 0; w < W; ++w) o[j][w] *= corr;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (!valid[u]) continue;
        const float p = fast_exp2(s[u][j] - mx);
        l[j] += p;
#pragma unroll
        for (int w = 0; w < W; ++w) o[j][w] += p * to_float(vx[u].v[w]);
      }
      m[j] = mx;
    }
  }

  // The warp's key groups merge: xor offsets of P and more pair lanes holding the same chunk.
  for (int offset = kWarp / 2; offset >= P; offset /= 2) {
#pragma unroll
    for (int j = 0; j < G; ++j) {
      float o2[W];
#pragma unroll
      for (int w = 0; w < W; ++w) o2[w] = __shfl_xor_sync(0xffffffffu, o[j][w], offset);
      const float m2 = __shfl_xor_sync(0xffffffffu, m[j], offset);
      const float l2 = __shfl_xor_sync(0xffffffffu, l[j], offset);
      merge<W>(m[j], l[j], o[j], m2, l2, o2);
    }
  }

  // Then the warps, through shared memory: [warp][head j][m, l, o[HS]]. A block of a cluster
  // keeps its partial after them, [head j][m, l, o[HS]], for the cluster's first block to read;
  // any other writes it to the scratch (its cluster is itself).
  const size_t rec = partial_floats(HS);
  const int grid_units = gridDim.x / cluster;
  float* block_partial = smem + size_t(Warps) * G * rec;
  if (sub == 0 && has_chunk) {
#pragma unroll
    for (int j = 0; j < G; ++j) {
      float* r = smem + (size_t(warp) * G + j) * rec;
      if (c == 0) {
        r[0] = m[j];
        r[1] = l[j];
      }
#pragma unroll
      for (int w = 0; w < W; ++w) r[2 + c * W + w] = o[j][w];
    }
  }
  __syncthreads();
  stamps.staged();  // the block's keys attended: what is left is merging
  // A clustered block's partial goes to its slot of the first block's [cluster][G][rec].
  float* cluster_slot = block_partial + size_t(rank) * G * rec;
  if constexpr (kClustered) {
    cluster_wait();  // the first block's mbarrier is initialized
    cluster_slot = cluster_shared(cluster_slot, cluster, 0);
  }
  for (int e = threadIdx.x; e < G * HS; e += Warps * kWarp) {
    const int j = e / HS, d = e % HS, h = h0 + j;
    float mx = -INFINITY;
    for (int w = 0; w < Warps; ++w) mx = fmaxf(mx, smem[(size_t(w) * G + j) * rec]);
    float sum = 0.0f, acc = 0.0f;
    for (int w = 0; w < Warps; ++w) {
      const float* r = smem + (size_t(w) * G + j) * rec;
      if (r[0] == -INFINITY) continue;  // a warp that saw no key
      const float f = fast_exp2(r[0] - mx);
      sum += r[1] * f;
      acc += r[2 + d] * f;
    }
    if (splits == 1) {
      a.out[(size_t(row) * NH + h) * HS + d] = from_float<X>(acc / sum);
    } else {
      float* p = kClustered ? cluster_slot + size_t(j) * rec
                            : a.partials + ((size_t(q) * NH + h) * grid_units + unit) * rec;
      if (d == 0) {
        p[0] = mx;
        p[1] = sum;
      }
      p[2 + d] = acc;
    }
  }
  if (splits == 1) return;

  // The cluster's partials, merged by its first block in rank order once the others' have
  // arrived; the others leave as soon as theirs are written.
  if constexpr (kClustered) {
    if (rank != 0) {
      if (int(threadIdx.x) < writers) cluster_mbarrier_arrive(&partials_in, 0);
      return;
    }
    __syncthreads();  // its own partial, which its threads wrote
    cluster_mbarrier_wait(&partials_in, 0);
    float* unit_partial = a.partials + ((size_t(q) * NH + h0) * grid_units + unit) * rec;
    for (int e = threadIdx.x; e < G * HS; e += Warps * kWarp) {
      const int j = e / HS, d = e % HS;
      float pm[kMaxCluster], pl[kMaxCluster], po[kMaxCluster];
#pragma unroll
      for (int r = 0; r < kMaxCluster; ++r) {
        if (r >= cluster) break;
        const float* p = block_partial + (size_t(r) * G + j) * rec;
        pm[r] = p[0];
        pl[r] = p[1];
        po[r] = p[2 + d];
      }
      float mx = -INFINITY;
#pragma unroll
      for (int r = 0; r < kMaxCluster; ++r)
        if (r < cluster) mx = fmaxf(mx, pm[r]);
      float sum = 0.0f, acc = 0.0f;
#pragma unroll
      for (int r = 0; r < kMaxCluster; ++r) {
        if (r >= cluster || pm[r] == -INFINITY) continue;  // past the cluster, or a block that saw no key
        const float f = fast_exp2(pm[r] - mx);
        sum += pl[r] * f;
        acc += po[r] * f;
      }
      if (units == 1) {
        a.out[(size_t(row) * NH + h0 + j) * HS + d] = from_float<X>(acc / sum);
      } else {
        float* p = unit_partial + size_t(j) * grid_units * rec;
        if (d == 0) {
          p[0] = mx;
          p[1] = sum;
        }
        p[2 + d] = acc;
      }
    }
    if (units == 1) return;
  }

  // Counted in once the partials are visible to every block; the last cluster in merges.
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) {
    unsigned* done = a.counters + size_t(q) * gridDim.y + blockIdx.y;
    last = atomicAdd(done, 1u) == unsigned(units - 1);
    if (last) *done = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // The clusters' partials, read from L2 (__ldcg: another block's writes are not in this
  // multiprocessor's L1) with many loads in flight at a time: first every cluster's m and l, then
  // a thread per (head j, element d) its column of o, kBatch clusters at a time, merged in cluster
  // order.
  __shared__ float unit_m[G][kMaxClusters], unit_l[G][kMaxClusters];
  const float* base = a.partials + (size_t(q) * NH + h0) * grid_units * rec;  // [G][grid clusters][rec]
  for (int e = threadIdx.x; e < G * units; e += Warps * kWarp) {
    const int j = e / units, u = e % units;
    const float* p = base + (size_t(j) * grid_units + u) * rec;
    unit_m[j][u] = __ldcg(p);
    unit_l[j][u] = __ldcg(p + 1);
  }
  __syncthreads();
  constexpr int kBatch = 8;
  for (int e = threadIdx.x; e < G * HS; e += Warps * kWarp) {
    const int j = e / HS, d = e % HS;
    const float* p = base + size_t(j) * grid_units * rec + 2 + d;
    float mx = -INFINITY;
    for (int u = 0; u < units; ++u) mx = fmaxf(mx, unit_m[j][u]);
    float sum = 0.0f, acc = 0.0f;
    for (int u0 = 0; u0 < units; u0 += kBatch) {
      float ov[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) ov[k] = u0 + k < units ? __ldcg(p + size_t(u0 + k) * rec) : 0.0f;
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int u = u0 + k;
        if (u >= units || unit_m[j][u] == -INFINITY) continue;  // past the clusters, or one that saw no key
        const float f = fast_exp2(unit_m[j][u] - mx);
        sum += unit_l[j][u] * f;
        acc += ov[k] * f;
      }
    }
    a.out[(size_t(row) * NH + h0 + j) * HS + d] = from_float<X>(acc / sum);
  }
}

// The grid's splits of a query's keys: `units` clusters of `cluster` blocks of `warps` warps;
// staged: one block of kManyWarps warps a (query, head group), its keys in shared memory.
struct Splits {
  int cluster = 1, units = 1, warps = kFewWarps;
  bool staged = false;
};

template <typename X, int W, int G, int Warps, bool Staged, bool Clustered>
void launch(const Args<X>& a, const Splits& s, cudaStream_t stream) {
  const auto kernel = cached_attention_kernel<X, W, G, Warps, Staged, Clustered>;
  const float scale_log2 = float(kLog2e / std::sqrt(double(a.HS)));
  // The warps' partials, and a clustered grid's cluster partials (kernel: its first block's).
  const size_t partials = partial_slots(Warps, Clustered);
  size_t smem = partials * G * partial_floats(a.HS) * sizeof(float);
  if constexpr (Staged)
    smem = keys_offset(partials, G, a.HS) * sizeof(float) + 2 * size_t(a.staged_keys) * a.HS * sizeof(X);
  if constexpr (kStreams<X, W, G, Warps, Staged>)
    smem = keys_offset(partials, G, a.HS) * sizeof(float) + 2 * size_t(ring_vectors(Warps)) * sizeof(Vec<X, W>);
  if constexpr (Staged || kStreams<X, W, G, Warps, Staged>) {
    static std::once_flag opted_in;  // to more than the default 48 KB of shared memory, once
    std::call_once(opted_in, [&] { grant_most_shared_memory(kernel); });
  }
  const dim3 grid(s.cluster * s.units, a.NH / G, a.Q);
  launch_overlapped_clusters(kernel, grid, unsigned(s.cluster), dim3(Warps * kWarp), smem, stream, a, scale_log2);
}

template <typename X, int W, int G>
void launch_warps(const Args<X>& a, const Splits& s, cudaStream_t stream) {
  if (s.staged) return launch<X, W, G, kManyWarps, true, false>(a, s, stream);
  if (s.warps == kManyWarps) return launch<X, W, G, kManyWarps, false, true>(a, s, stream);
  if constexpr (G == 1)
    if (s.warps == kTwoWarps) return launch<X, W, G, kTwoWarps, false, false>(a, s, stream);
  if (s.cluster > 1) return launch<X, W, G, kFewWarps, false, true>(a, s, stream);
  launch<X, W, G, kFewWarps, false, false>(a, s, stream);
}

template <typename X, int W>
void launch_heads(const Args<X>& a, const Splits& s, cudaStream_t stream) {
  switch (heads_per_block(a.NH / a.NKV)) {
    case 4: return launch_warps<X, W, 4>(a, s, stream);
    case 2: return launch_warps<X, W, 2>(a, s, stream);
    default: return launch_warps<X, W, 1>(a, s, stream);
  }
}

// The elements a lane holds: the widest of 8, 4, 2 that divides HS and leaves at most 32 lanes
// per key row; 0 when none does.
int lane_elements(int HS) {
  for (int w : {8, 4, 2})
    if (HS % w == 0 && HS / w <= kWarp) return w;
  return 0;
}

// The 4-warp blocks of G query heads that one wave holds.
long few_warp_wave(int G) { return long(few_warp_blocks_per_sm(G)) * multiprocessors(); }

// Whether a grid of BLOCKS (query, head group) blocks of G heads splits its keys: where two splits
// of every block fit one wave of 4-warp blocks. Larger grids run unsplit, a block a (query, head
// group), since a split's partials merged through memory (the fence, the counter, the last block's
// reads) cost more than a second wave of blocks or idle multiprocessors; grids of up to half a
// wave gain from the split.
bool splits_keys(long blocks, int G) { return 2 * blocks <= few_warp_wave(G); }

// The counters at the head of the scratch: one per (query, head group) block of a split grid,
// which holds at most half a wave of the smallest (one-head) blocks.
long counters_held() { return few_warp_wave(1) / 2; }

Splits grid_splits(int Q, int NH, int NKV) {
  const int G = heads_per_block(NH / NKV);
  const long blocks = long(Q) * NKV * (NH / NKV / G);
  Splits s;
  // Unsplit blocks of one head past a wave of 4-warp blocks have 2 warps while that keeps them in
  // one wave: the second, partial wave of 4-warp blocks read the cache more slowly than the first.
  const long wave = long(multiprocessors()) * kWarpsPerSM;  // warps
  if (G == 1 && blocks * kFewWarps > wave && blocks * kTwoWarps <= wave)
    s.warps = kTwoWarps;
  if (!splits_keys(blocks, G)) return s;
  const bool clusters = clusters_supported();
  const int warps = kWarpsPerSM * multiprocessors(), few = int(blocks);
  int splits = int(few_warp_wave(G) / few);  // one wave
  // 8-warp blocks only where a cluster of 8 for each pair is resident at once: one block of 4
  // query heads a multiprocessor (about 210 registers a thread), two of one head (128): two waves
  // of them were slower than 4-warp blocks.
  const int resident = multiprocessors() * (G == 1 ? 2 : 1);
  if (clusters && splits > kMaxCluster && blocks * kMaxCluster <= resident) {
    s.warps = kManyWarps;
    splits = ceil_div(warps, few * kManyWarps);
  }
  if (s.warps == kManyWarps) s.cluster = std::min(kMaxCluster, splits);
  else if (clusters && splits <= kMostSplitsCut) s.cluster = splits = std::min(splits, kFewWarpCluster);
  s.units = std::min(kMaxClusters, ceil_div(splits, s.cluster));
  return s;
}

// The keys a staged block holds in shared memory.
int staged_keys(int NH, int NKV, int HS) {
  return std::min(kStagedKeyHeads / heads_per_block(NH / NKV), kStagedElements / HS);
}

// The grid of a launch whose queries attend to at most LONGEST keys: a grid of clusters (few
// queries) becomes a staged one where its blocks' keys fit in shared memory.
Splits launch_splits(int Q, int NH, int NKV, int HS, int longest) {
  Splits s = grid_splits(Q, NH, NKV);
  if (s.warps == kManyWarps && HS % 8 == 0 && longest <= staged_keys(NH, NKV, HS)) s = {1, 1, kManyWarps, true};
  return s;
}

}  // namespace

bool cached_attention_staged(int Q, int NH, int NKV, int HS, int longest) {
  return launch_splits(Q, NH, NKV, HS, longest).staged;
}

int cached_attention_splits(int Q, int NH, int NKV) {
  const Splits s = grid_splits(Q, NH, NKV);
  return s.cluster * s.units;
}

size_t cached_attention_scratch(int Q, int NH, int NKV, int HS) {
  const int units = grid_splits(Q, NH, NKV).units;
  return units > 1 ? size_t(counters_held()) + size_t(Q) * NH * units * partial_floats(HS) : 0;
}

template <typename X>
void cached_attention(X* out, const X* qkv, const X* k_cache, const X* v_cache, const int32_t* rows,
                      const int32_t* slots, const int32_t* positions, int Q, int NH, int NKV,
                      int HS, int max_length, int longest, int new_keys, float* scratch, cudaStream_t stream,
                      int window) {
  if (NH <= 0 || NKV <= 0 || NH % NKV != 0)
    throw std::invalid_argument(
        "cached_attention: query heads must be a multiple of key/value heads");
  if (Q > 65535) throw std::invalid_argument("cached_attention: at most 65535 queries per launch");
  if (Q <= 0) return;
  if (new_keys < 1) throw std::invalid_argument("cached_attention: new_keys must be at least 1");
  const int w = lane_elements(HS);
  if (w == 0)
    throw std::invalid_argument("cached_attention: unsupported head size " + std::to_string(HS));
  // Head rows start at multiples of HS elements: aligned arrays keep every lane's loads aligned.
  for (const void* p : {static_cast<const void*>(qkv), static_cast<const void*>(k_cache),
                        static_cast<const void*>(v_cache)})
    if (!aligned(p, w * sizeof(X)))
      throw std::invalid_argument("cached_attention: misaligned array");
  // Staged blocks (head sizes that are multiples of 8) copy whole rows 16 bytes at a time.
  if (HS % 8 == 0 && !(aligned16(k_cache) && aligned16(v_cache)))
    throw std::invalid_argument("cached_attention: misaligned cache");
  if (longest < 1 || longest > max_length)
    throw std::invalid_argument("cached_attention: longest must be in [1, max_length]");
  Splits splits = launch_splits(Q, NH, NKV, HS, longest);
  // Clusters of 8-warp blocks past what a cache of max_length keys needs, each block reading in one
  // pass, would only return: the grid leaves them out (its scratch fits in the one sized for all).
  if (splits.warps == kManyWarps && !splits.staged)
    splits.units = std::min(splits.units, ceil_div(max_length, splits.cluster * pass_keys(HS / w, kManyWarps)));
  float* partials = scratch ? scratch + counters_held() : nullptr;
  const int staged = splits.staged ? staged_keys(NH, NKV, HS) : 0;
  const Args<X> a{out, reinterpret_cast<unsigned*>(scratch), partials, qkv, k_cache, v_cache, rows, slots, positions,
                  Q,   NH, NKV, HS, max_length, new_keys, splits.cluster, staged, window};
  switch (w) {
    case 8: return launch_heads<X, 8>(a, splits, stream);
    case 4: return launch_heads<X, 4>(a, splits, stream);
    default: return launch_heads<X, 2>(a, splits, stream);
  }
}

bool cached_attention_supports(int HS) { return lane_elements(HS) != 0; }

#define MEG_INSTANTIATE(X)                                                                   \
  template void cached_attention<X>(X*, const X*, const X*, const X*, const int32_t*,        \
                                    const int32_t*, const int32_t*, int, int, int, int, int, \
                                    int, int, float*, cudaStream_t, int);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
