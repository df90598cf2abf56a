// Sums over the members of a tensor-parallel group on one host, each member's GPU writing into the
// others' memory (ops/cuda/ops.hpp's peer_sum; parallel/peer_sums.hpp sets the memory up): the
// all-reduce of a decode step's few rows, where NCCL's ring costs a launch and several round trips
// over the links for a few kilobytes.
//
// One shot. Every member's block b takes slice b of the values: it copies its own slice into its
// row of every member's receive area, then raises its flag in every member's flags for that block;
// then it waits until every member's flag for the block is up in its own flags, and sums the
// members' rows of the slice, in member order, in fp32. Every member sums the same values in the
// same order, so the results are the same bits everywhere (and at two members, a + b, NCCL's).
//
// A flag is raised by writing the call's epoch, the count of calls so far (every call launches
// the same grid, and every member makes the same calls, so each block's count is the same on every
// member); each block keeps its count in EPOCHS. The receive areas and flags come in two halves by
// the epoch's parity, so that a member that has run ahead writes into the half no member reads any
// more: member r in call k + 2 has waited, in call k + 1, for member j's flags of call k + 1, which j
// raises only after its call k is done.
//
// The launch overlaps the kernel before it (kernels/overlapped_launch.cuh): the blocks are in
// place when it ends, and wait for it before anything else; the kernel after this one may start
// its blocks (and request its weights) while this one waits for the other members.
//
// Ordering: a block's copies are made before its barrier, and its flag is written after the
// barrier with release semantics at system scope, which publishes the whole block's copies to
// the member whose flag it is; the waiting threads read flags with acquire semantics at system
// scope, and the block's barrier after the wait passes that on to every thread, which then reads
// the rows through L2 (.cg: nothing this kernel cached in L1 is read).
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

#include "common.cuh"
#include "overlapped_launch.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kThreads = 256;

__device__ inline void raise_flag(unsigned* flag, unsigned epoch) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(flag), "r"(epoch) : "memory");
}

__device__ inline void wait_for_flag(const unsigned* flag, unsigned epoch) {
  unsigned seen;
  do {
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
  } while (seen != epoch);
}

// N vectors of X (kVecWidth<X> values each) from IN into OUT, summed over the members; with ADD,
// OUT's own values plus the rounded sum.
template <typename X>
__global__ void __launch_bounds__(kThreads) peer_sum_kernel(X* out, const X* in, size_t nvec, bool add,
                                                            PeerSumBuffers b) {
  constexpr int W = kVecWidth<X>;
  using V = Vec<X, W>;
  __shared__ unsigned epoch_shared;
  allow_next_kernel();
  wait_for_previous_kernel();  // which wrote IN; and every earlier call of this kernel is done
  if (threadIdx.x == 0) epoch_shared = b.epochs[blockIdx.x] + 1;
  __syncthreads();
  const unsigned epoch = epoch_shared;
  const int half = epoch & 1;
  const size_t per_block = (nvec + gridDim.x - 1) / gridDim.x;
  const size_t first = blockIdx.x * per_block, last = first + per_block < nvec ? first + per_block : nvec;
  // The receive area's row of member R in half HALF, in vectors: [half][member][capacity].
  const auto row = [&](int member, int r) {
    return reinterpret_cast<V*>(b.data[member]) + (size_t(half) * b.size + r) * b.capacity_vecs;
  };
  // Member R's flag for this block in MEMBER's flags: [half][block][member].
  const auto flag = [&](int member, int r) {
    return b.flags[member] + (half * kPeerSumBlocks + blockIdx.x) * kMaxPeers + r;
  };

  for (size_t i = first + threadIdx.x; i < last; i += kThreads) {
    const V v = reinterpret_cast<const V*>(in)[i];
    for (int m = 0; m < b.size; ++m) row(m, b.rank)[i] = v;
  }
  __syncthreads();
  if (threadIdx.x < b.size) {
    raise_flag(flag(threadIdx.x, b.rank), epoch);
    wait_for_flag(flag(b.rank, threadIdx.x), epoch);
  }
  __syncthreads();

  for (size_t i = first + threadIdx.x; i < last; i += kThreads) {
    float sum[W];
    for (int r = 0; r < b.size; ++r) {
      V v;
      *reinterpret_cast<uint4*>(&v) = __ldcg(reinterpret_cast<const uint4*>(row(b.rank, r) + i));
#pragma unroll
      for (int j = 0; j < W; ++j) sum[j] = r == 0 ? float(v.v[j]) : sum[j] + float(v.v[j]);
    }
    V o;
    if (add) {
      const V x = reinterpret_cast<const V*>(out)[i];
#pragma unroll
      for (int j = 0; j < W; ++j) o.v[j] = X(float(x.v[j]) + float(X(sum[j])));
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) o.v[j] = X(sum[j]);
    }
    reinterpret_cast<V*>(out)[i] = o;
  }
  if (threadIdx.x == 0) b.epochs[blockIdx.x] = epoch;
}

}  // namespace

template <typename X>
bool peer_sum(X* out, const X* in, size_t n, bool add, const PeerSumBuffers& buffers, cudaStream_t stream) {
  constexpr int W = kVecWidth<X>;
  // Decided by N alone, the same on every member: no member falls back while another waits.
  if (n % W != 0 || n / W > buffers.capacity_vecs) return false;
  if (!aligned16(out) || !aligned16(in)) throw std::invalid_argument("peer_sum: arrays not 16-byte aligned");
  launch_overlapped(peer_sum_kernel<X>, dim3(kPeerSumBlocks), dim3(kThreads), 0, stream, out, in, n / W, add, buffers);
  return true;
}

#define MEG_INSTANTIATE(X) \
  template bool peer_sum<X>(X*, const X*, size_t, bool, const PeerSumBuffers&, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(__nv_bfloat16)
MEG_INSTANTIATE(__half)
#undef MEG_INSTANTIATE

}  // namespace meg::cuda
