// The global gradient norm (for clipping and the logs) of a model whose parameters are spread over
// ranks: each rank sums the squares of the gradients it holds, and the sums are combined so that
// every parameter of the whole model counts exactly once, whatever the layout:
//   - tensors split over the tensor-parallel group (their table entry's split: rows or columns) are summed over
//     the group; replicated ones (norms, row-parallel biases, position embeddings) have the same
//     gradient on every member and count once;
//   - with the distributed optimizer a replica holds a shard of its flat array: shards are summed
//     over the data-parallel group;
//   - pipeline stages are summed over the pipeline; the last stage's copy of a tied word
//     embedding is left out (the first stage's counts).
// The CPU and CUDA backends both compute their per-range sums and combine them here. Megatron keeps
// this in its optimizer package too (clip_grads.py).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "model/param_tensor.hpp"
#include "parallel/comm.hpp"

namespace meg {

struct GradRange {
  size_t begin = 0, end = 0;  // offsets into the rank's flat gradient array
};

struct GradNormRanges {
  std::vector<GradRange> split;       // summed over the tensor-parallel group
  std::vector<GradRange> replicated;  // counted once
};

// The parts of [BEGIN, END) of a rank's flat array (laid out by TENSORS, its table) that count
// toward the norm, by kind; neighbouring tensors of one kind make one range. TP_SPLIT: the model
// is split over a tensor-parallel group of more than one rank (otherwise everything is
// "replicated"). SKIP (may be empty) leaves tensors out.
GradNormRanges grad_norm_ranges(const std::vector<ParamTensor>& tensors, bool tp_split, size_t begin, size_t end,
                                const std::function<bool(const ParamTensor&)>& skip = {});

// The whole model's sum of squares from this rank's SPLIT and REPLICATED sums (over its ranges),
// combined as described above over the groups given (null: a group of one): SHARDS, the
// data-parallel group when the distributed optimizer shards the gradients over it (null
// otherwise); TP, the tensor-parallel group; PP, the pipeline.
double global_sum_squares(double split, double replicated, Comm* shards, Comm* tp, Comm* pp);

}  // namespace meg
