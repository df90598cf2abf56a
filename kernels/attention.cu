// Causal attention with grouped-query support, forward and backward on the GPU: the flash-attention
// method, never materialising the T x T matrix of scores.
//
// The CPU reference is ops/cpu/attention.cpp; the launchers are declared in ops/cuda/ops.hpp. q, k
// and v are read straight out of the fused projection qkv [B, T, (NH + 2*NKV) * HS]; query head h
// reads key/value head g = h / (NH / NKV). With s = q.k / sqrt(HS) the scaled scores of one row,
//   forward:  out = sum_t2 p_t2 v_t2,  p = softmax(s) over t2 <= t,  lse = log sum_t2 exp(s_t2)
//   backward: dP = dO V^T,  D = rowsum(dO o O) (= rowsum(P o dP)),  dS = P o (dP - D),
//             dQ = dS K / sqrt(HS),  dK = dS^T Q / sqrt(HS),  dV = P^T dO.
//
// Attention dropout (p > 0) keeps P, the softmax, for the normalisation and the backward's dS, and
// drops from the product with V: out = (P o M') V with M' = M / (1 - p), M the CPU's counter-based
// mask (element (b, h, t, t2) is element ((b*NH + h)*T + t)*T + t2 of the key's stream). The
// backward becomes dV = (P o M')^T dO and dP = (dO V^T) o M', and D = rowsum(dO o O) is still
// rowsum(P o dP), since rowsum(dO o (P o M') V) = rowsum(P o M' o (dO V^T)). No mask is stored:
// every kernel that needs one hashes its elements again, so each kernel has a dropout variant (a
// template parameter), and p = 0 runs the plain kernels, untouched.
//
// Forward (FlashAttention-2). A block owns a tile of query rows of one head and walks the key
// tiles up to the diagonal; each warp owns 16 of the rows. For every key tile it computes the
// 16 x 64 scores with tensor cores, updates a running row maximum m and row sum l (the online
// softmax: older partial sums are rescaled by exp(m_old - m_new) when the maximum grows), and
// adds P V into an fp32 accumulator kept in registers. Only out and lse = m + log(l) are written.
//
// Backward, deterministic: no floating-point atomics, every sum in a fixed order.
//   1. D = rowsum(dO o O) into the scratch buffer, reading dO and O once.
//   2. dK, dV: a block owns a tile of keys of one kv head and loops over the query heads of the
//      group and, for each, the query tiles from the diagonal on. It recomputes P from lse (no
//      softmax statistics to redo: p = exp(s - lse)), and accumulates dV += P^T dO and
//      dK += dS^T Q in registers, written once at the end.
//   3. dQ: a block owns a tile of queries of one head and walks the key tiles up to the diagonal,
//      recomputing P and dP and accumulating dQ += dS K.
// Kernels 2 and 3 both recompute S and dP (7 matrix products instead of FlashAttention-2's 5);
// that is the price of writing dQ without atomics or a [T/64, T, HS] partial buffer.
//
// The tensor-core path (bf16 and fp16, head sizes 64 and 128). Tiles of q, k, v and dO move from
// global to shared memory with cp.async, double-buffered so that the next tile loads while this one
// is multiplied; rows past T are zero-filled by the copy itself. Warps read their operands with
// ldmatrix and multiply with mma.sync m16n8k16 (fp32 accumulation). Two product shapes cover
// every matrix product of the three kernels:
//   mma_abt: C[16 x N] += A[16 x HS] B[N x HS]^T, A and B row tiles in shared memory (S = Q K^T,
//            S^T = K Q^T, dP = dO V^T, dP^T = V dO^T);
//   mma_pb:  C[16 x HS] += P[16 x N] B[N x HS], P a previous product's accumulator, rounded to
//            the activation type in registers, B a row tile (O += P V, dV += P^T dO,
//            dK += dS^T Q, dQ += dS K).
// The accumulator layout of mma m16n8k16 (thread lane holds rows lane/4 and lane/4 + 8, columns
// 2*(lane%4) and +1 of each 8-column block) is exactly the layout of its A operand, which is what
// lets P feed the next product without a trip through shared memory.
// Shared-memory tiles are rows of HS 2-byte elements, i.e. 8 or 16 chunks of 16 bytes. ldmatrix
// reads one chunk from each of 8 consecutive rows; unswizzled, those 8 chunks would sit in the same
// banks (rows are 128 or 256 bytes long). Chunk c of row r is therefore stored at chunk position
// c ^ (r % 8), which spreads any 8 consecutive rows over all 32 banks.
//
// Everything else (fp32, other head sizes, misaligned arrays) takes the fallback: one warp per row,
// its lanes across the head dimension, fp32 arithmetic and an online softmax over single keys. It
// is exact but slow, made for the small models and for checking.
//
// Sliding window (Megatron's --window-size (W, 0)): query t sees the keys t - W .. t only. The
// kernels take W >= 0 always, full causal attention being W = T (no key is that far back). Key
// tiles wholly before a block's window are never loaded (the forward and dQ start their walk at
// the window of the block's first query, dK/dV end theirs at the last query that sees the block's
// last key), tiles wholly outside a warp's window are skipped, and tiles crossing its edge are
// masked as the diagonal is. So a long sequence costs about T x W, not T x T / 2. A query's row
// may then be wholly masked in a tile (its window starts after the tile while the warp's first
// row's does not); the online softmax leaves such a row as it is.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <type_traits>

#include "async_copy.cuh"
#include "common.cuh"
#include "ops/cpu/dropout_mask.hpp"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kMaxHS = 256;
constexpr float kLn2 = 0.6931471805599453f;

void check_shape(int NH, int NKV, int HS) {
  if (HS <= 0 || HS % 2 != 0 || HS > kMaxHS)
    throw std::invalid_argument("attention: the head size must be even and at most 256");
  if (NH <= 0 || NKV <= 0 || NH % NKV != 0)
    throw std::invalid_argument("attention: query heads must be a multiple of key/value heads");
}

// ---- conversions -------------------------------------------------------------------------------

// Two fp32 values rounded to X and packed into one 32-bit register, LO in the low half: the
// element order of mma operands and of a 4-byte store of two consecutive columns.
template <typename X>
__device__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<X, bf16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &v, sizeof(r));
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&r, &v, sizeof(r));
  }
  return r;
}

// ---- the dropout mask --------------------------------------------------------------------------

// cpu::dropout_bits(stream, index) hashes stream + (index + 1) * kIndexStride. The tensor-core
// kernels keep that input rather than the index: the inputs of a thread's elements are then one
// product per tile and 64-bit additions.
constexpr uint64_t kIndexStride = 0x9e3779b97f4a7c15ULL;

// Whether the element whose hash input is X is kept: cpu::dropout_bits's test.
__device__ bool kept(uint64_t x, uint32_t threshold) {
  return uint32_t(cpu::detail::splitmix64(x) >> 32) >= threshold;
}

// A launch's attention dropout (read by the kernels' dropout variants only).
struct Dropout {
  uint64_t stream;     // cpu::dropout_stream(key)
  uint32_t threshold;  // cpu::dropout_threshold(p): element kept iff its bits are >= this
  float scale;         // 1 / (1 - p) in fp32, as dropout_apply's

  __device__ uint64_t hash_input(uint64_t index) const {
    return stream + (index + 1) * kIndexStride;
  }
  __device__ bool keeps(uint64_t index) const { return kept(hash_input(index), threshold); }
};

// ---- D = rowsum(dO o O) ------------------------------------------------------------------------

constexpr int kRowWarps = 8;  // warps per block of the one-warp-per-row kernels

// Element (b, t, h) of D, [B, NH, T] like lse, from the row index (b*T + t)*NH + h of out.
__device__ long stats_index(long row, int T, int NH) {
  const int h = int(row % NH), t = int(row / NH % T), b = int(row / (long(NH) * T));
  return (long(b) * NH + h) * T + t;
}

// Any head size: one warp per row (b, t, h) of out.
template <typename X>
__global__ void attention_dout_dot_out_kernel(float* D, const X* dout, const X* out, int B, int T,
                                              int NH, int HS) {
  const long row = long(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;  // (b*T + t)*NH + h
  const int lane = threadIdx.x % kWarp;
  if (row >= long(B) * T * NH) return;
  const X* dy = dout + row * HS;
  const X* y = out + row * HS;
  float sum = 0.0f;
  for (int d = lane; d < HS; d += kWarp) sum += to_float(dy[d]) * to_float(y[d]);
  sum = warp_sum(sum);
  if (lane == 0) D[stats_index(row, T, NH)] = sum;
}

// Two 2-byte values of X packed in a register, as fp32.
template <typename X>
__device__ float2 unpack2(uint32_t v) {
  if constexpr (std::is_same_v<X, bf16>) {
    __nv_bfloat162 x;
    memcpy(&x, &v, sizeof(x));
    return __bfloat1622float2(x);
  } else {
    __half2 x;
    memcpy(&x, &v, sizeof(x));
    return __half22float2(x);
  }
}

// The tensor-core path's D (bf16/fp16, HS 64 or 128, 16-byte aligned rows): the warp-per-row
// kernel would read 2 bytes per lane and load, which leaves it far under the memory bandwidth.
// Here a group of HS/8 lanes takes a row, each lane one 16-byte chunk of dO and of O, and the
// group sums with shuffles inside itself (xor offsets below the group size stay in the group).
template <typename X, int HS>
__global__ void attention_dout_dot_out_vec_kernel(float* D, const X* dout, const X* out, int B,
                                                  int T, int NH) {
  constexpr int kLanes = HS / 8, kRowsPerBlock = kRowWarps * kWarp / kLanes;
  const long row = long(blockIdx.x) * kRowsPerBlock + threadIdx.x / kLanes;
  const int part = threadIdx.x % kLanes;
  const bool valid = row < long(B) * T * NH;
  float sum = 0.0f;
  if (valid) {  // no early return: the whole warp takes part in the shuffles
    const uint4 a = *reinterpret_cast<const uint4*>(dout + row * HS + part * 8);
    const uint4 c = *reinterpret_cast<const uint4*>(out + row * HS + part * 8);
    const uint32_t av[4] = {a.x, a.y, a.z, a.w}, cv[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = unpack2<X>(av[i]), y = unpack2<X>(cv[i]);
      sum += x.x * y.x + x.y * y.y;
    }
  }
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (valid && part == 0) D[stats_index(row, T, NH)] = sum;
}

// ---- the fallback: one warp per row, fp32 -----------------------------------------------------

// Lane i holds elements i, i + 32, ... of a row of the head dimension.
constexpr int kPerLane = kMaxHS / kWarp;

template <typename X>
__device__ void load_lane_row(float (&r)[kPerLane], const X* row, int HS, int lane) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * kWarp;
    r[i] = d < HS ? to_float(row[d]) : 0.0f;
  }
}

template <typename X>
__device__ void store_lane_row(X* row, const float (&r)[kPerLane], float mul, int HS, int lane) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * kWarp;
    if (d < HS) row[d] = from_float<X>(r[i] * mul);
  }
}

__device__ float lane_dot(const float (&a)[kPerLane], const float (&b)[kPerLane]) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) s += a[i] * b[i];
  return s;
}

// The row and column offsets of one head in qkv, whose rows are [q heads; k heads; v heads].
struct QkvLayout {
  long ld;  // (NH + 2*NKV) * HS
  int NH, NKV, HS;
  __device__ long q(int b, int t, int T, int h) const { return (long(b) * T + t) * ld + h * HS; }
  __device__ long k(int b, int t, int T, int g) const { return q(b, t, T, NH + g); }
  __device__ long v(int b, int t, int T, int g) const { return q(b, t, T, NH + NKV + g); }
};

// The first key the query at position T sees under the window W.
__host__ __device__ inline int window_start(int t, int window) { return t - window > 0 ? t - window : 0; }

// Warp per query row (b, h, t): keys one at a time with an online softmax. When a key raises the
// running maximum, the old sums are rescaled by exp(m_old - s); otherwise the key's weight is
// exp(s - m): one exponential per key either way. A dropped key still counts in the sum l.
template <typename X, bool kDrop>
__global__ void attention_forward_fallback_kernel(X* out, float* lse, const X* qkv, int B, int T,
                                                  int NH, int NKV, int HS, float scale,
                                                  Dropout drop, int window) {
  const long row = long(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;  // (b*NH + h)*T + t
  const int lane = threadIdx.x % kWarp;
  if (row >= long(B) * NH * T) return;
  const int t = int(row % T), h = int(row / T % NH), b = int(row / (long(T) * NH));
  const int g = h / (NH / NKV);
  const QkvLayout at{long(NH + 2 * NKV) * HS, NH, NKV, HS};

  float q[kPerLane], o[kPerLane] = {}, x[kPerLane];
  load_lane_row(q, qkv + at.q(b, t, T, h), HS, lane);
  for (float& e : q) e *= scale;
  float m = -INFINITY, l = 0.0f;
  for (int t2 = window_start(t, window); t2 <= t; ++t2) {
    load_lane_row(x, qkv + at.k(b, t2, T, g), HS, lane);
    const float s = warp_sum(lane_dot(q, x));  // the same in every lane: uniform branches below
    load_lane_row(x, qkv + at.v(b, t2, T, g), HS, lane);
    // the weight of v in o relative to its weight in l: 0 or 1, the 1 / (1 - p) comes at the end
    float keep = 1.0f;
    if constexpr (kDrop) keep = drop.keeps(uint64_t(row) * T + t2);
    if (s > m) {
      const float c = expf(m - s);  // 0 for the first key, where m is -inf
      l = l * c + 1.0f;
      for (int i = 0; i < kPerLane; ++i) o[i] = o[i] * c + keep * x[i];
      m = s;
    } else {
      const float p = expf(s - m);
      l += p;
      for (int i = 0; i < kPerLane; ++i) o[i] += keep * p * x[i];
    }
  }
  store_lane_row(out + ((long(b) * T + t) * NH + h) * HS, o, (kDrop ? drop.scale : 1.0f) / l, HS,
                 lane);
  if (lane == 0) lse[row] = m + logf(l);
}

// Warp per query row (b, h, t): dq = scale * sum_t2 p (dp - D) k over the keys t2 <= t, dp
// dropped and scaled by the mask.
template <typename X, bool kDrop>
__global__ void attention_backward_dq_fallback_kernel(X* dqkv, const X* dout, const X* qkv,
                                                      const float* lse, const float* D, int B,
                                                      int T, int NH, int NKV, int HS, float scale,
                                                      Dropout drop, int window) {
  const long row = long(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;  // (b*NH + h)*T + t
  const int lane = threadIdx.x % kWarp;
  if (row >= long(B) * NH * T) return;
  const int t = int(row % T), h = int(row / T % NH), b = int(row / (long(T) * NH));
  const int g = h / (NH / NKV);
  const QkvLayout at{long(NH + 2 * NKV) * HS, NH, NKV, HS};

  float q[kPerLane], dy[kPerLane], k[kPerLane], v[kPerLane], dq[kPerLane] = {};
  load_lane_row(q, qkv + at.q(b, t, T, h), HS, lane);
  load_lane_row(dy, dout + ((long(b) * T + t) * NH + h) * HS, HS, lane);
  const float lse_t = lse[row], D_t = D[row];
  for (int t2 = window_start(t, window); t2 <= t; ++t2) {
    load_lane_row(k, qkv + at.k(b, t2, T, g), HS, lane);
    load_lane_row(v, qkv + at.v(b, t2, T, g), HS, lane);
    const float p = expf(warp_sum(lane_dot(q, k)) * scale - lse_t);
    float dp = warp_sum(lane_dot(dy, v));
    if constexpr (kDrop)
      dp = drop.keeps(uint64_t(row) * T + t2) ? dp * drop.scale : 0.0f;
    const float ds = p * (dp - D_t);
    for (int i = 0; i < kPerLane; ++i) dq[i] += ds * k[i];
  }
  store_lane_row(dqkv + at.q(b, t, T, h), dq, scale, HS, lane);
}

// Warp per key row (b, g, t2): dk and dv summed over the query heads of group g, in head order,
// and for each over the queries t >= t2, in order.
template <typename X, bool kDrop>
__global__ void attention_backward_dkv_fallback_kernel(X* dqkv, const X* dout, const X* qkv,
                                                       const float* lse, const float* D, int B,
                                                       int T, int NH, int NKV, int HS, float scale,
                                                       Dropout drop, int window) {
  const long row = long(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;  // (b*NKV + g)*T + t2
  const int lane = threadIdx.x % kWarp;
  if (row >= long(B) * NKV * T) return;
  const int t2 = int(row % T), g = int(row / T % NKV), b = int(row / (long(T) * NKV));
  const int group = NH / NKV;
  const QkvLayout at{long(NH + 2 * NKV) * HS, NH, NKV, HS};

  float k[kPerLane], v[kPerLane], q[kPerLane], dy[kPerLane], dk[kPerLane] = {}, dv[kPerLane] = {};
  load_lane_row(k, qkv + at.k(b, t2, T, g), HS, lane);
  load_lane_row(v, qkv + at.v(b, t2, T, g), HS, lane);
  for (int h = g * group; h < (g + 1) * group; ++h) {
    const long stats = (long(b) * NH + h) * T;
    for (int t = t2; t < T && t - t2 <= window; ++t) {
      load_lane_row(q, qkv + at.q(b, t, T, h), HS, lane);
      load_lane_row(dy, dout + ((long(b) * T + t) * NH + h) * HS, HS, lane);
      const float p = expf(warp_sum(lane_dot(q, k)) * scale - lse[stats + t]);
      float dp = warp_sum(lane_dot(dy, v)), pv = p;  // pv: p's weight in dv
      if constexpr (kDrop) {
        const bool keep = drop.keeps(uint64_t(stats + t) * T + t2);
        dp = keep ? dp * drop.scale : 0.0f;
        pv = keep ? p * drop.scale : 0.0f;
      }
      const float ds = p * (dp - D[stats + t]);
      for (int i = 0; i < kPerLane; ++i) {
        dv[i] += pv * dy[i];
        dk[i] += ds * q[i];
      }
    }
  }
  store_lane_row(dqkv + at.k(b, t2, T, g), dk, scale, HS, lane);
  store_lane_row(dqkv + at.v(b, t2, T, g), dv, 1.0f, HS, lane);
}

// ---- the tensor-core path: PTX wrappers --------------------------------------------------------

// Four 8x8 matrices of 2-byte elements; lane i gives the address of row i % 8 of matrix i / 8 and
// receives, in r[j], its two elements of matrix j (row lane / 4, columns 2 * (lane % 4) and +1).
__device__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// The same with each matrix transposed on the way.
__device__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c[16 x 8] += a[16 x 16] b[16 x 8], fp32 accumulators, X = bf16 or fp16 operands.
template <typename X>
__device__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<X, bf16>)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- the tensor-core path: tiles and warp-level products ---------------------------------------

// Tile shapes, per head size. Every warp owns 16 rows of its kernel's "own" tile (queries in the
// forward and dQ kernels, keys in the dK/dV kernel) and sweeps the other side in tiles of 64 (32).
// Blocks are 4 warps. The MIN_BLOCKS figures (blocks per SM, for __launch_bounds__) cap the
// registers where the compiler would otherwise take more than that many blocks can share, as far as
// it can go without spilling: several resident blocks hide the latency of one block's barriers and
// copies. For HS 128 the swept tiles are halved in the backward, to keep the warp's fp32
// accumulators (16 x HS each for dK and dV) and two score tiles within 255 registers.
// 4-warp forward blocks at 3 per SM beat 8-warp ones (128-row tiles) at 2 or 1 per SM; 32-key tiles
// at 4 blocks per SM (fewer registers), 8-warp dK/dV blocks, and 32-query tiles there at 3 blocks
// per SM were slower.
template <int HS>
struct Flash {
  static_assert(HS == 64 || HS == 128, "the tensor-core path covers head sizes 64 and 128");
  static constexpr int kFwdWarps = 4, kFwdRows = 16 * kFwdWarps, kFwdKeys = 64;
  static constexpr int kDkvWarps = 4, kDkvKeys = 16 * kDkvWarps, kDkvQueries = HS == 64 ? 64 : 32;
  static constexpr int kDqWarps = 4, kDqRows = 16 * kDqWarps, kDqKeys = HS == 64 ? 64 : 32;
  static constexpr int kFwdMinBlocks = HS == 64 ? 3 : 2, kDkvMinBlocks = 2, kDqMinBlocks = 3;

  __host__ __device__ static constexpr int tile_bytes(int rows) { return rows * HS * 2; }
  __host__ __device__ static constexpr int fwd_smem() { return tile_bytes(kFwdRows) + 2 * 2 * tile_bytes(kFwdKeys); }
  // One stage of the dK/dV kernel: q and dO tiles, then lse and D of their rows.
  __host__ __device__ static constexpr int dkv_stage() { return 2 * tile_bytes(kDkvQueries) + 2 * 4 * kDkvQueries; }
  __host__ __device__ static constexpr int dkv_smem() { return 2 * tile_bytes(kDkvKeys) + 2 * dkv_stage(); }
  __host__ __device__ static constexpr int dq_smem() { return 2 * tile_bytes(kDqRows) + 2 * 2 * tile_bytes(kDqKeys); }
};

// Byte offset of chunk CHUNK (8 elements) of row ROW0 + R in a swizzled tile. ROW0 must be a
// multiple of 8, so that the swizzle depends on R alone (R is the lane-dependent part).
template <int HS>
__device__ uint32_t chunk_offset(int row0, int r, int chunk) {
  return uint32_t((row0 + r) * (HS * 2) + ((chunk ^ (r & 7)) << 4));
}

// Copies rows [row0, row0 + ROWS) of one head into a swizzled tile with cp.async. SRC points at
// the head's first element in row 0; rows are LD elements apart. Rows at or past T are
// zero-filled, so the last tile of a sequence needs no special case in the products (only masks).
template <int ROWS, int HS, int THREADS, typename X>
__device__ void load_tile_async(uint32_t tile, const X* src, long ld, int row0, int T) {
  constexpr int kChunks = HS / 8;
  static_assert(ROWS * kChunks % THREADS == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int it = 0; it < ROWS * kChunks / THREADS; ++it) {
    const int i = it * THREADS + int(threadIdx.x);
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = row0 + r < T;
    cp_async_16(tile + chunk_offset<HS>(0, r, c), valid ? src + (row0 + r) * ld + c * 8 : src,
                valid);
  }
}

// Copies ROWS floats src[row0 ..] into shared memory with cp.async, zeros past T.
template <int ROWS, int THREADS>
__device__ void load_vec_async(uint32_t dst, const float* src, int row0, int T) {
  for (int i = threadIdx.x; i < ROWS; i += THREADS) {
    const bool valid = row0 + i < T;
    cp_async_4(dst + 4 * i, valid ? src + row0 + i : src, valid);
  }
}

// acc[16 x N] += A[16 x HS] B[N x HS]^T: A is rows [a_row0, a_row0 + 16) of tile A_TILE, B rows
// [b_row0, b_row0 + N) of B_TILE. acc[n] is the accumulator of columns [8n, 8n + 8).
template <typename X, int N, int HS>
__device__ void mma_abt(float (&acc)[N / 8][4], uint32_t a_tile, int a_row0, uint32_t b_tile,
                        int b_row0, int lane) {
#pragma unroll
  for (int k = 0; k < HS / 16; ++k) {
    // A: matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) of the 16 x 16 block
    uint32_t a[4];
    ldmatrix_x4(a, a_tile + chunk_offset<HS>(a_row0, lane & 15, 2 * k + (lane >> 4)));
#pragma unroll
    for (int j = 0; j < N / 16; ++j) {
      // B^T for two 8-column blocks: rows of B (keys) 0-7 and 8-15, each with cols k..k+7, k+8..
      uint32_t b[4];
      ldmatrix_x4(b, b_tile + chunk_offset<HS>(b_row0 + 16 * j, (lane & 7) + ((lane >> 4) << 3),
                                               2 * k + ((lane >> 3) & 1)));
      mma_16816<X>(acc[2 * j], a, b[0], b[1]);
      mma_16816<X>(acc[2 * j + 1], a, b[2], b[3]);
    }
  }
}

// acc[16 x HS] += P[16 x N] B[N x HS]: P is the fp32 accumulator of an earlier product (rounded
// to X here), B rows [b_row0, b_row0 + N) of B_TILE, read transposed.
template <typename X, int N, int HS>
__device__ void mma_pb(float (&acc)[HS / 8][4], const float (&p)[N / 8][4], uint32_t b_tile,
                       int b_row0, int lane) {
#pragma unroll
  for (int k = 0; k < N / 16; ++k) {
    const uint32_t a[4] = {pack2<X>(p[2 * k][0], p[2 * k][1]), pack2<X>(p[2 * k][2], p[2 * k][3]),
                           pack2<X>(p[2 * k + 1][0], p[2 * k + 1][1]),
                           pack2<X>(p[2 * k + 1][2], p[2 * k + 1][3])};
#pragma unroll
    for (int j = 0; j < HS / 16; ++j) {
      // rows 16k + (0-7 | 8-15) of B, columns 16j + (0-7 | 8-15): the B operands of two
      // 8-column blocks of the output
      uint32_t b[4];
      ldmatrix_x4_trans(b, b_tile + chunk_offset<HS>(b_row0 + 16 * k, lane & 15, 2 * j + (lane >> 4)));
      mma_16816<X>(acc[2 * j], a, b[0], b[1]);
      mma_16816<X>(acc[2 * j + 1], a, b[2], b[3]);
    }
  }
}

// Sets to -inf the elements of a [16 x N] accumulator tile for which masked(row, col) holds. The
// thread's elements: acc[n][e] is row ROW + 8 * (e / 2), column COL + 8n + e % 2, where ROW and COL
// are its first row and column (lane / 4 and 2 * (lane % 4) from the tile's corner).
template <int N, typename Masked>
__device__ void mask_tile(float (&acc)[N / 8][4], int row, int col, Masked masked) {
#pragma unroll
  for (int n = 0; n < N / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (masked(row + 8 * (e >> 1), col + 8 * n + (e & 1))) acc[n][e] = -INFINITY;
}

// Bit 4n + e: whether element acc[n][e] of the thread's [16 x N] accumulator tile (layout as in
// mask_tile) is kept by the dropout. X0 is the hash input of element [0][0]; the next row (e / 2)
// adds ROW_STEP to it, the next column (e % 2) COL_STEP. The 8-column blocks are unrolled UNROLL
// at a time: the forward and dQ kernels, capped at 168 registers (3 blocks per SM), spill with
// every block's hashes in flight and hash one block (four independent hashes) at a time; the
// dK/dV kernel, with more registers, unrolls them all (a rolled loop made it spill).
template <int N, int UNROLL>
__device__ uint32_t keep_bits(uint64_t x0, uint64_t row_step, uint64_t col_step,
                              uint32_t threshold) {
  static_assert(N / 8 * 4 <= 32, "one bit per element of the thread");
  uint32_t bits = 0;
#pragma unroll UNROLL
  for (int n = 0; n < N / 8; ++n) {
    const uint64_t x = x0 + 8 * n * col_step;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (kept(x + (e >> 1 ? row_step : 0) + (e & 1 ? col_step : 0), threshold))
        bits |= 1u << (4 * n + e);
  }
  return bits;
}

__device__ bool bit(uint32_t bits, int i) { return (bits >> i) & 1u; }

// One step of the online softmax over a key tile of raw scores S, for the thread's two rows r (r
// = 0: elements 0 and 1 of each block, r = 1: elements 2 and 3): raises the running maxima M (raw
// units), rescales the partial sums L (this thread's columns only, the quad's sums are added at the
// end) and the output accumulator O by exp(scale * (m_old - m_new)), and turns S into
// exp(scale * (s - m_new)). A row's maximum is shared by its quad (4 lanes) through shuffles. A
// row all of whose keys so far are masked (a window starting after them) keeps m = -inf, l = 0
// and o = 0: its correction is 1 and its weights 0, never exp2(inf - inf).
template <int N, int HS>
__device__ void online_softmax(float (&s)[N / 8][4], float (&m)[2], float (&l)[2],
                               float (&o)[HS / 8][4], float scale_log2) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = m[r];
#pragma unroll
    for (int n = 0; n < N / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const bool empty = mx == -INFINITY;
    const float corr = empty ? 1.0f : fast_exp2((m[r] - mx) * scale_log2);
    const float offset = empty ? 0.0f : mx * scale_log2;
    m[r] = mx;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < N / 8; ++n)
#pragma unroll
      for (int e = 2 * r; e < 2 * r + 2; ++e) {
        s[n][e] = fast_exp2(fmaf(s[n][e], scale_log2, -offset));
        sum += s[n][e];
      }
    l[r] = l[r] * corr + sum;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      o[n][2 * r] *= corr;
      o[n][2 * r + 1] *= corr;
    }
  }
}

// Stores rows ROW and ROW + 8 (the thread's two rows) of a [16 x HS] accumulator times MUL[r]
// into DST (row 0 of the head, rows LD elements apart), two columns per 4-byte store; rows at or
// past T are skipped.
template <typename X, int HS>
__device__ void store_rows(X* dst, long ld, const float (&acc)[HS / 8][4], const float (&mul)[2],
                           int row, int T, int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row + 8 * r >= T) continue;
    X* p = dst + (row + 8 * r) * ld + 2 * (lane % 4);
#pragma unroll
    for (int n = 0; n < HS / 8; ++n)
      *reinterpret_cast<uint32_t*>(p + 8 * n) = pack2<X>(acc[n][2 * r] * mul[r], acc[n][2 * r + 1] * mul[r]);
  }
}

// ---- the tensor-core path: forward -------------------------------------------------------------

// Block (query tile, head h, batch b). Grid x runs backwards over the query tiles: the last ones
// have the most key tiles to visit, and starting them first shortens the tail of the launch. With
// dropout, the dropped probabilities are zeroed after the online softmax has summed them, before
// the product with V, and 1 / (1 - p) joins the final 1 / l.
template <typename X, int HS, bool kDrop>
__global__ void __launch_bounds__(Flash<HS>::kFwdWarps* kWarp, Flash<HS>::kFwdMinBlocks)
    flash_forward_kernel(X* out, float* lse, const X* qkv, int T, int NH, int NKV, float scale,
                         Dropout drop, int window) {
  using F = Flash<HS>;
  constexpr int kRows = F::kFwdRows, kKeys = F::kFwdKeys, kThreads = F::kFwdWarps * kWarp;
  constexpr int kKeyTile = F::tile_bytes(kKeys);
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t q_tile = smem_addr(smem);
  const uint32_t kv_tiles = q_tile + F::tile_bytes(kRows);  // stage s: K, then V
  auto k_tile = [&](int j) { return kv_tiles + (j & 1) * 2 * kKeyTile; };

  const int h = blockIdx.y, b = blockIdx.z, g = h / (NH / NKV);
  const long ld = long(NH + 2 * NKV) * HS;
  const X* rows = qkv + long(b) * T * ld;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;
  const int n_tiles = ceil_div(min(q0 + kRows, T), kKeys);  // up to the last query's key
  const int j0 = window_start(q0, window) / kKeys;           // from the first query's window

  auto load_kv = [&](int j) {
    load_tile_async<kKeys, HS, kThreads>(k_tile(j), rows + (NH + g) * HS, ld, j * kKeys, T);
    load_tile_async<kKeys, HS, kThreads>(k_tile(j) + kKeyTile, rows + (NH + NKV + g) * HS, ld,
                                         j * kKeys, T);
    cp_async_commit();
  };
  load_tile_async<kRows, HS, kThreads>(q_tile, rows + h * HS, ld, q0, T);
  load_kv(j0);

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int wrow = 16 * warp;          // the warp's first row in the tile
  const int wq = q0 + wrow;            // and its query position
  const int qrow = wq + lane / 4;      // the thread's rows: qrow and qrow + 8
  const int kcol = 2 * (lane % 4);     // the thread's first column in a key tile
  const float scale_log2 = scale * kLog2e;

  float o[HS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int j = j0; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) {  // prefetch the next tile into the other stage, then wait for this one
      load_kv(j + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int k0 = j * kKeys;
    // else every key of the tile is after every query of the warp, or before its windows
    if (k0 <= wq + 15 && k0 + kKeys - 1 >= wq - window) {
      // The mask bits come first, while the scores hold no registers yet.
      uint32_t keep = 0;
      if constexpr (kDrop) {
        // element (query, key) of the mask: the next query is T indices on, the next key 1
        const uint64_t row = (uint64_t(b) * NH + h) * T + qrow;
        keep = keep_bits<kKeys, 1>(drop.hash_input(row * T + k0 + kcol),
                                   8 * uint64_t(T) * kIndexStride, kIndexStride, drop.threshold);
      }
      float s[kKeys / 8][4] = {};
      mma_abt<X, kKeys, HS>(s, q_tile, wrow, k_tile(j), 0, lane);
      // the tile crosses the warp's diagonal or the start of a window
      if (k0 + kKeys - 1 > wq || k0 < wq + 15 - window)
        mask_tile<kKeys>(s, qrow, k0 + kcol, [window](int q, int k) { return k > q || q - k > window; });
      online_softmax<kKeys, HS>(s, m, l, o, scale_log2);
      if constexpr (kDrop) {
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (!bit(keep, 4 * n + e)) s[n][e] = 0.0f;
      }
      mma_pb<X, kKeys, HS>(o, s, k_tile(j) + kKeyTile, 0, lane);
    }
    __syncthreads();  // the stage just read is the one the next iteration's prefetch overwrites
  }

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    inv[r] = (kDrop ? drop.scale : 1.0f) / l[r];
    const int q = qrow + 8 * r;
    if (lane % 4 == 0 && q < T) lse[(long(b) * NH + h) * T + q] = (m[r] * scale_log2 + log2f(l[r])) * kLn2;
  }
  store_rows<X, HS>(out + long(b) * T * NH * HS + h * HS, long(NH) * HS, o, inv, qrow, T, lane);
}

// ---- the tensor-core path: backward ------------------------------------------------------------

// Block (key tile, kv head g, batch b): dK and dV of the tile's keys. Iteration i visits query
// head g * group + i / n_q and its query tile q_first + i % n_q; the head and tile loops are one
// flat loop so that the double buffering runs on across heads. The warp works on S^T (its 16 keys
// as rows, the tile's queries as columns), so that dV += P^T dO and dK += dS^T Q are products of
// the mma_pb shape. With dropout, dS^T needs the undropped P^T, which is dropped only after it (and
// 1 / (1 - p) of dV waits for the store).
template <typename X, int HS, bool kDrop>
__global__ void __launch_bounds__(Flash<HS>::kDkvWarps* kWarp, Flash<HS>::kDkvMinBlocks)
    flash_backward_dkv_kernel(X* dqkv, const X* dout, const X* qkv, const float* lse,
                              const float* D, int T, int NH, int NKV, float scale, Dropout drop,
                              int window) {
  using F = Flash<HS>;
  constexpr int kKeys = F::kDkvKeys, kQueries = F::kDkvQueries, kThreads = F::kDkvWarps * kWarp;
  constexpr int kQTile = F::tile_bytes(kQueries);
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t k_tile = smem_addr(smem), v_tile = k_tile + F::tile_bytes(kKeys);
  const int stages = 2 * F::tile_bytes(kKeys);  // byte offset of stage 0
  // stage s: q tile, dO tile, lse[kQueries], D[kQueries]
  auto stage = [&](int i) { return stages + (i & 1) * F::dkv_stage(); };

  const int g = blockIdx.y, b = blockIdx.z, group = NH / NKV;
  const long ld = long(NH + 2 * NKV) * HS, ldo = long(NH) * HS;
  const X* rows = qkv + long(b) * T * ld;
  const X* dout_rows = dout + long(b) * T * ldo;
  const int k0 = blockIdx.x * kKeys;
  const int q_first = k0 / kQueries;  // queries before k0 see none of the tile's keys
  // and queries after the last key's window see none either
  const int n_q = min(ceil_div(T, kQueries), (k0 + kKeys - 1 + window) / kQueries + 1) - q_first;
  const int n_iter = group * n_q;

  auto load_stage = [&](int i) {
    const int h = g * group + i / n_q, q0 = (q_first + i % n_q) * kQueries;
    const uint32_t s = k_tile + stage(i);
    load_tile_async<kQueries, HS, kThreads>(s, rows + h * HS, ld, q0, T);
    load_tile_async<kQueries, HS, kThreads>(s + kQTile, dout_rows + h * HS, ldo, q0, T);
    const long stats = (long(b) * NH + h) * T;
    load_vec_async<kQueries, kThreads>(s + 2 * kQTile, lse + stats, q0, T);
    load_vec_async<kQueries, kThreads>(s + 2 * kQTile + 4 * kQueries, D + stats, q0, T);
    cp_async_commit();
  };
  load_tile_async<kKeys, HS, kThreads>(k_tile, rows + (NH + g) * HS, ld, k0, T);
  load_tile_async<kKeys, HS, kThreads>(v_tile, rows + (NH + NKV + g) * HS, ld, k0, T);
  load_stage(0);  // one group with K and V

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int wrow = 16 * warp, wk = k0 + wrow;
  const int krow = wk + lane / 4;   // the thread's keys: krow and krow + 8
  const int qcol = 2 * (lane % 4);  // its first column in a query tile
  const float scale_log2 = scale * kLog2e;

  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  for (int i = 0; i < n_iter; ++i) {
    if (i + 1 < n_iter) {
      load_stage(i + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int q0 = (q_first + i % n_q) * kQueries;
    // else every query of the tile is before every key of the warp, or after their windows
    if (wk <= q0 + kQueries - 1 && q0 - (wk + 15) <= window) {
      // The mask bits first, as in the forward. The thread's tile is transposed: its rows are keys
      // (the next one 1 index on), its columns queries (T indices on).
      uint32_t keep = 0;
      if constexpr (kDrop) {
        const int h = g * group + i / n_q;
        const uint64_t row = (uint64_t(b) * NH + h) * T + q0 + qcol;
        keep = keep_bits<kQueries, kQueries / 8>(drop.hash_input(row * T + krow), 8 * kIndexStride,
                                                 uint64_t(T) * kIndexStride, drop.threshold);
      }
      const uint32_t q_tile = k_tile + stage(i), do_tile = q_tile + kQTile;
      const float* lse_s = reinterpret_cast<const float*>(smem + stage(i) + 2 * kQTile);
      const float* D_s = lse_s + kQueries;

      // P^T = exp(scale * S^T - lse), zero where the key is after the query or before its
      // window, or the query is past T (lse and D were zero-filled there)
      float p[kQueries / 8][4] = {};
      mma_abt<X, kQueries, HS>(p, k_tile, wrow, q_tile, 0, lane);
      if (wk + 15 > q0 || q0 + kQueries > T || q0 + kQueries - 1 - wk > window)
        mask_tile<kQueries>(p, krow, q0 + qcol,
                            [T, window](int k, int q) { return k > q || q >= T || q - k > window; });
#pragma unroll
      for (int n = 0; n < kQueries / 8; ++n) {
        const float2 lse2 = *reinterpret_cast<const float2*>(lse_s + 8 * n + qcol);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          p[n][e] = fast_exp2(fmaf(p[n][e], scale_log2, -(e & 1 ? lse2.y : lse2.x) * kLog2e));
      }

      // dP^T = V dO^T, then dS^T = P^T o (dP^T - D) in place
      float ds[kQueries / 8][4] = {};
      mma_abt<X, kQueries, HS>(ds, v_tile, wrow, do_tile, 0, lane);
      if constexpr (kDrop) {
#pragma unroll
        for (int n = 0; n < kQueries / 8; ++n) {
          const float2 d2 = *reinterpret_cast<const float2*>(D_s + 8 * n + qcol);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const bool kept_e = bit(keep, 4 * n + e);
            ds[n][e] = p[n][e] * ((kept_e ? ds[n][e] * drop.scale : 0.0f) - (e & 1 ? d2.y : d2.x));
            if (!kept_e) p[n][e] = 0.0f;
          }
        }
        mma_pb<X, kQueries, HS>(dv, p, do_tile, 0, lane);
      } else {
        mma_pb<X, kQueries, HS>(dv, p, do_tile, 0, lane);
#pragma unroll
        for (int n = 0; n < kQueries / 8; ++n) {
          const float2 d2 = *reinterpret_cast<const float2*>(D_s + 8 * n + qcol);
#pragma unroll
          for (int e = 0; e < 4; ++e) ds[n][e] = p[n][e] * (ds[n][e] - (e & 1 ? d2.y : d2.x));
        }
      }
      mma_pb<X, kQueries, HS>(dk, ds, q_tile, 0, lane);
    }
    __syncthreads();
  }

  const float drop_scale = kDrop ? drop.scale : 1.0f;
  const float mul_k[2] = {scale, scale}, mul_v[2] = {drop_scale, drop_scale};
  store_rows<X, HS>(dqkv + long(b) * T * ld + (NH + g) * HS, ld, dk, mul_k, krow, T, lane);
  store_rows<X, HS>(dqkv + long(b) * T * ld + (NH + NKV + g) * HS, ld, dv, mul_v, krow, T, lane);
}

// Block (query tile, head h, batch b): dQ of the tile's queries, the key tiles up to the diagonal
// in order. Grid x runs backwards, as in the forward.
template <typename X, int HS, bool kDrop>
__global__ void __launch_bounds__(Flash<HS>::kDqWarps* kWarp, Flash<HS>::kDqMinBlocks)
    flash_backward_dq_kernel(X* dqkv, const X* dout, const X* qkv, const float* lse,
                             const float* D, int T, int NH, int NKV, float scale, Dropout drop,
                             int window) {
  using F = Flash<HS>;
  constexpr int kRows = F::kDqRows, kKeys = F::kDqKeys, kThreads = F::kDqWarps * kWarp;
  constexpr int kKeyTile = F::tile_bytes(kKeys);
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t q_tile = smem_addr(smem), do_tile = q_tile + F::tile_bytes(kRows);
  const uint32_t kv_tiles = do_tile + F::tile_bytes(kRows);  // stage s: K, then V
  auto k_tile = [&](int j) { return kv_tiles + (j & 1) * 2 * kKeyTile; };

  const int h = blockIdx.y, b = blockIdx.z, g = h / (NH / NKV);
  const long ld = long(NH + 2 * NKV) * HS, ldo = long(NH) * HS;
  const X* rows = qkv + long(b) * T * ld;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;
  const int n_tiles = ceil_div(min(q0 + kRows, T), kKeys);
  const int j0 = window_start(q0, window) / kKeys;

  auto load_kv = [&](int j) {
    load_tile_async<kKeys, HS, kThreads>(k_tile(j), rows + (NH + g) * HS, ld, j * kKeys, T);
    load_tile_async<kKeys, HS, kThreads>(k_tile(j) + kKeyTile, rows + (NH + NKV + g) * HS, ld,
                                         j * kKeys, T);
    cp_async_commit();
  };
  load_tile_async<kRows, HS, kThreads>(q_tile, rows + h * HS, ld, q0, T);
  load_tile_async<kRows, HS, kThreads>(do_tile, dout + long(b) * T * ldo + h * HS, ldo, q0, T);
  load_kv(j0);

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int wrow = 16 * warp, wq = q0 + wrow;
  const int qrow = wq + lane / 4, kcol = 2 * (lane % 4);
  const float scale_log2 = scale * kLog2e;
  // The thread's rows' lse (base 2) and D; rows past T take 0 (their dq is never stored).
  float lse2[2], Dr[2];
  for (int r = 0; r < 2; ++r) {
    const int q = qrow + 8 * r;
    const long idx = (long(b) * NH + h) * T + q;
    lse2[r] = q < T ? lse[idx] * kLog2e : 0.0f;
    Dr[r] = q < T ? D[idx] : 0.0f;
  }

  float dq[HS / 8][4] = {};
  for (int j = j0; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) {
      load_kv(j + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int k0 = j * kKeys;
    if (k0 <= wq + 15 && k0 + kKeys - 1 >= wq - window) {
      // The mask bits first, as in the forward.
      uint32_t keep = 0;
      if constexpr (kDrop) {
        const uint64_t row = (uint64_t(b) * NH + h) * T + qrow;
        keep = keep_bits<kKeys, 1>(drop.hash_input(row * T + k0 + kcol),
                                   8 * uint64_t(T) * kIndexStride, kIndexStride, drop.threshold);
      }
      // P = exp(scale * S - lse), zero after the diagonal and before the window
      float p[kKeys / 8][4] = {};
      mma_abt<X, kKeys, HS>(p, q_tile, wrow, k_tile(j), 0, lane);
      if (k0 + kKeys - 1 > wq || k0 < wq + 15 - window)
        mask_tile<kKeys>(p, qrow, k0 + kcol, [window](int q, int k) { return k > q || q - k > window; });
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) p[n][e] = fast_exp2(fmaf(p[n][e], scale_log2, -lse2[e >> 1]));

      // dP = dO V^T (dropped and scaled by the mask), then dS = P o (dP - D) in place; dQ += dS K
      float ds[kKeys / 8][4] = {};
      mma_abt<X, kKeys, HS>(ds, do_tile, wrow, k_tile(j) + kKeyTile, 0, lane);
      if constexpr (kDrop) {
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            ds[n][e] = bit(keep, 4 * n + e) ? ds[n][e] * drop.scale : 0.0f;
      }
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) ds[n][e] = p[n][e] * (ds[n][e] - Dr[e >> 1]);
      mma_pb<X, kKeys, HS>(dq, ds, k_tile(j), 0, lane);
    }
    __syncthreads();
  }

  const float mul[2] = {scale, scale};
  store_rows<X, HS>(dqkv + long(b) * T * ld + h * HS, ld, dq, mul, qrow, T, lane);
}

// ---- launchers ---------------------------------------------------------------------------------

template <typename Kernel>
void allow_smem(Kernel kernel, int bytes) {
  MEG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <typename X, int HS, bool kDrop>
void flash_forward(X* out, float* lse, const X* qkv, int B, int T, int NH, int NKV, float scale,
                   const Dropout& drop, int window, cudaStream_t stream) {
  using F = Flash<HS>;
  const auto kernel = flash_forward_kernel<X, HS, kDrop>;
  allow_smem(kernel, F::fwd_smem());
  kernel<<<dim3(ceil_div(T, F::kFwdRows), NH, B), F::kFwdWarps * kWarp, F::fwd_smem(), stream>>>(
      out, lse, qkv, T, NH, NKV, scale, drop, window);
  MEG_CUDA_CHECK(cudaGetLastError());
}

template <typename X, int HS, bool kDrop>
void flash_backward(X* dqkv, const X* dout, const X* qkv, const X* out, const float* lse, float* D,
                    int B, int T, int NH, int NKV, float scale, const Dropout& drop, int window,
                    cudaStream_t stream) {
  using F = Flash<HS>;
  constexpr int kRowsPerBlock = kRowWarps * kWarp / (HS / 8);
  attention_dout_dot_out_vec_kernel<X, HS>
      <<<unsigned((long(B) * T * NH + kRowsPerBlock - 1) / kRowsPerBlock), kRowWarps * kWarp, 0,
         stream>>>(D, dout, out, B, T, NH);
  MEG_CUDA_CHECK(cudaGetLastError());
  const auto dkv = flash_backward_dkv_kernel<X, HS, kDrop>;
  allow_smem(dkv, F::dkv_smem());
  dkv<<<dim3(ceil_div(T, F::kDkvKeys), NKV, B), F::kDkvWarps * kWarp, F::dkv_smem(), stream>>>(
      dqkv, dout, qkv, lse, D, T, NH, NKV, scale, drop, window);
  MEG_CUDA_CHECK(cudaGetLastError());
  const auto dq = flash_backward_dq_kernel<X, HS, kDrop>;
  allow_smem(dq, F::dq_smem());
  dq<<<dim3(ceil_div(T, F::kDqRows), NH, B), F::kDqWarps * kWarp, F::dq_smem(), stream>>>(
      dqkv, dout, qkv, lse, D, T, NH, NKV, scale, drop, window);
  MEG_CUDA_CHECK(cudaGetLastError());
}

// The tensor-core path takes bf16/fp16, head sizes 64 and 128, and arrays whose rows start on
// 16-byte boundaries (cp.async copies 16 bytes); a view starting mid-row takes the fallback.
template <typename X>
bool use_flash(int HS, std::initializer_list<const void*> arrays) {
  if constexpr (std::is_same_v<X, float>) {
    return false;
  } else {
    if (HS != 64 && HS != 128) return false;
    for (const void* p : arrays)
      if (!aligned16(p)) return false;
    return true;
  }
}

unsigned row_blocks(long rows) { return unsigned((rows + kRowWarps - 1) / kRowWarps); }

float score_scale(int HS) { return float(1.0 / std::sqrt(double(HS))); }

// The kernels' window: WINDOW, or T (no key that far back) for full causal attention (-1).
int kernel_window(int window, int T) {
  if (window < -1) throw std::invalid_argument("attention: the window must be at least 0 (or -1, none)");
  return window < 0 || window > T ? T : window;
}

Dropout make_dropout(double p, uint64_t stream) {
  if (!(p >= 0 && p < 1)) throw std::invalid_argument("attention: dropout must be in [0, 1)");
  return {stream, uint32_t(cpu::dropout_threshold(p)), float(1.0 / (1.0 - p))};
}

template <bool kDrop, typename X>
void forward(X* out, float* lse, const X* qkv, int B, int T, int NH, int NKV, int HS,
             const Dropout& drop, int window, cudaStream_t stream) {
  const float scale = score_scale(HS);
  if (use_flash<X>(HS, {out, qkv})) {
    if constexpr (!std::is_same_v<X, float>) {
      if (HS == 64) flash_forward<X, 64, kDrop>(out, lse, qkv, B, T, NH, NKV, scale, drop, window, stream);
      else flash_forward<X, 128, kDrop>(out, lse, qkv, B, T, NH, NKV, scale, drop, window, stream);
    }
    return;
  }
  attention_forward_fallback_kernel<X, kDrop>
      <<<row_blocks(long(B) * NH * T), kRowWarps * kWarp, 0, stream>>>(out, lse, qkv, B, T, NH, NKV,
                                                                       HS, scale, drop, window);
  MEG_CUDA_CHECK(cudaGetLastError());
}

template <bool kDrop, typename X>
void backward(X* dqkv, const X* dout, const X* qkv, const X* out, const float* lse, int B, int T,
              int NH, int NKV, int HS, float* scratch, const Dropout& drop, int window,
              cudaStream_t stream) {
  const float scale = score_scale(HS);
  float* D = scratch;  // [B, NH, T]
  if (use_flash<X>(HS, {dqkv, dout, qkv, out})) {
    if constexpr (!std::is_same_v<X, float>) {
      if (HS == 64)
        flash_backward<X, 64, kDrop>(dqkv, dout, qkv, out, lse, D, B, T, NH, NKV, scale, drop,
                                     window, stream);
      else
        flash_backward<X, 128, kDrop>(dqkv, dout, qkv, out, lse, D, B, T, NH, NKV, scale, drop,
                                      window, stream);
    }
    return;
  }
  const unsigned threads = kRowWarps * kWarp;
  attention_dout_dot_out_kernel<X><<<row_blocks(long(B) * T * NH), threads, 0, stream>>>(
      D, dout, out, B, T, NH, HS);
  MEG_CUDA_CHECK(cudaGetLastError());
  attention_backward_dq_fallback_kernel<X, kDrop>
      <<<row_blocks(long(B) * NH * T), threads, 0, stream>>>(dqkv, dout, qkv, lse, D, B, T, NH,
                                                              NKV, HS, scale, drop, window);
  MEG_CUDA_CHECK(cudaGetLastError());
  attention_backward_dkv_fallback_kernel<X, kDrop>
      <<<row_blocks(long(B) * NKV * T), threads, 0, stream>>>(dqkv, dout, qkv, lse, D, B, T, NH,
                                                               NKV, HS, scale, drop, window);
  MEG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

template <typename X>
void attention_forward(X* out, float* lse, const X* qkv, int B, int T, int NH, int NKV, int HS,
                       cudaStream_t stream, double dropout_p, uint64_t dropout_stream, int window) {
  check_shape(NH, NKV, HS);
  const Dropout drop = make_dropout(dropout_p, dropout_stream);
  const int w = kernel_window(window, T);
  if (B <= 0 || T <= 0) return;
  if (dropout_p > 0) forward<true>(out, lse, qkv, B, T, NH, NKV, HS, drop, w, stream);
  else forward<false>(out, lse, qkv, B, T, NH, NKV, HS, drop, w, stream);
}

template <typename X>
void attention_backward(X* dqkv, const X* dout, const X* qkv, const X* out, const float* lse,
                        int B, int T, int NH, int NKV, int HS, float* scratch, cudaStream_t stream,
                        double dropout_p, uint64_t dropout_stream, int window) {
  check_shape(NH, NKV, HS);
  const Dropout drop = make_dropout(dropout_p, dropout_stream);
  const int w = kernel_window(window, T);
  if (B <= 0 || T <= 0) return;
  if (dropout_p > 0)
    backward<true>(dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS, scratch, drop, w, stream);
  else
    backward<false>(dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS, scratch, drop, w, stream);
}

size_t attention_backward_scratch(int B, int T, int NH) { return size_t(B) * NH * T; }

#define MEG_INSTANTIATE(X)                                                                        \
  template void attention_forward<X>(X*, float*, const X*, int, int, int, int, int, cudaStream_t, \
                                     double, uint64_t, int);                                      \
  template void attention_backward<X>(X*, const X*, const X*, const X*, const float*, int, int,   \
                                      int, int, int, float*, cudaStream_t, double, uint64_t, int);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(bf16)
MEG_INSTANTIATE(fp16)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
