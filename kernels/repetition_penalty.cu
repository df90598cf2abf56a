// The repetition penalty on the device (penalise_rows, ops/cuda/ops.hpp): meg-generate's sampler
// applies it before greedy, top-k or softmax choices (infer/sampler.hpp), and with it done here,
// those choices stay on the device (argmax_rows, top_k_rows and sample_rows over the fp32 rows)
// instead of every logit of the row crossing to the host.
//
// A block a row. A slot's history may repeat a token many times, and the penalty applies once per
// distinct token: the block marks the tokens it has seen in a bitmap of the vocabulary in shared
// memory, and the thread whose atomicOr set a token's bit is the one that penalises it. No other
// thread reads or writes that logit, so the rows are penalised in place, and the result does not
// depend on which thread got there first.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>

#include "common.cuh"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace meg::cuda {

namespace {

constexpr int kBlock = 512;

// infer/sampler.hpp's penalised_logit, in the same fp32 operations (IEEE division and product,
// rounded to nearest), so that the host and the device penalise a logit to the same bits.
__device__ float penalised_logit(float l, float r) { return l > 0 ? __fdiv_rn(l, r) : __fmul_rn(l, r); }

__global__ void __launch_bounds__(kBlock) penalise_rows_kernel(float* rows, const int32_t* history,
                                                               const int32_t* slots, const int32_t* positions,
                                                               const int32_t* last, const float* penalties, int V,
                                                               int max_length, int first) {
  extern __shared__ uint32_t seen[];  // [ceil(V / 32)]: the tokens some thread has taken
  const int r = blockIdx.x;
  const float penalty = penalties[r];
  if (penalty == 1.0f) return;
  const int row = last ? last[r] : r;
  const int32_t* tokens = history + size_t(slots[row]) * max_length;
  const int length = positions[row] + 1;
  for (int i = threadIdx.x; i < ceil_div(V, 32); i += kBlock) seen[i] = 0;
  __syncthreads();
  float* logits = rows + size_t(r) * V;
  for (int i = threadIdx.x; i < length; i += kBlock) {
    const int t = tokens[i] - first;  // its column
    if (t < 0 || t >= V) continue;    // another member's token
    const uint32_t bit = 1u << (t % 32);
    if (atomicOr(&seen[t / 32], bit) & bit) continue;  // another thread has this token
    logits[t] = penalised_logit(logits[t], penalty);
  }
}

}  // namespace

void penalise_rows(float* rows, const int32_t* history, const int32_t* slots, const int32_t* positions,
                   const int32_t* last, const float* penalties, int N, int V, int max_length, cudaStream_t stream,
                   int first) {
  if (N <= 0 || V <= 0) return;
  const size_t smem = size_t(ceil_div(V, 32)) * sizeof(uint32_t);
  static std::once_flag opted_in;  // a vocabulary past 393,216 tokens needs more than the default 48 KB
  std::call_once(opted_in, [] { grant_most_shared_memory(penalise_rows_kernel); });
  penalise_rows_kernel<<<N, kBlock, smem, stream>>>(rows, history, slots, positions, last, penalties, V, max_length,
                                                    first);
  MEG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meg::cuda
