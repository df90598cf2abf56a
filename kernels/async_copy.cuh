// Asynchronous copies from global to shared memory (cp.async, compute capability 8.0 and later):
// the copy is requested now and waited for later, so that a kernel can overlap the round trip to
// memory with other work without holding the data in registers. And requests into L2 alone
// (prefetch_l2), which hold nothing at all: a later load finds the line there or on its way.
#pragma once

#include <cstdint>

namespace meg::cuda {

__device__ inline uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Asynchronous global -> shared copies; with VALID false nothing is read and the destination is
// zero-filled (the source-size operand is 0).
__device__ inline void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ inline void cp_async_4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 4 : 0));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Requests the line holding P from memory into L2; nothing waits for it, and it changes no value.
__device__ inline void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

}  // namespace meg::cuda
