// The second stage of meg's deterministic column sums: the parameter gradients that sum over every
// row of a batch (the norms' dweight and dbias, bias_backward's dbias).
//
// fp32 atomics would add the rows in whatever order the blocks arrive, and meg is reproducible bit
// for bit. So those sums take two stages instead: a first kernel, the op's own, writes G partial
// rows (each the sum of a fixed range of rows, added in a fixed order) into scratch memory, and
// accumulate_column_sums adds the G partial rows in a fixed order into the gradient. The order
// depends on G and kLanes alone, never on the GPU or the timing, so the result is the same on
// every run.
#pragma once

#include <cuda_runtime.h>

namespace meg::cuda {

// out0[c] += the sum over g in [0, G) of partial0[g * C + c], for c in [0, C); and the same from
// partial1 into out1 in the same launch, unless out1 is null. kLanes row lanes each add a
// contiguous range of the partial rows, which are then added in lane order: more lanes for more
// partial rows (kernels/column_sums.cu has 16 and 32).
template <int kLanes>
void accumulate_column_sums(float* out0, const float* partial0, float* out1,
                            const float* partial1, int G, int C, cudaStream_t stream);

}  // namespace meg::cuda
