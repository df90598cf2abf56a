// How the GPT model's parameters split over tensor-parallel ranks, as Megatron-LM's layers split
// them (each table entry's TpSplitOf, model/param_tensor.hpp), and the moves between the full flat
// array (model/param_table.hpp) and one rank's shard of it.
//
// With T ranks:
//   - column-parallel linear layers (linear_qkv, linear_fc1) split their output rows: rank r holds
//     the rows of its heads (NH/T query heads, NKV/T key/value groups) or its F/T MLP columns. The
//     stacked tensors split part by part: linear_qkv's [q; k; v] gives rank r its q rows, then its
//     k rows, then its v rows; SwiGLU's [gate; up] its gate rows then its up rows;
//   - row-parallel linear layers (linear_proj, linear_fc2) split their input columns the same way;
//     their biases, added once after the partial products are summed, are replicated;
//   - the word embedding and the output layer split the padded vocabulary's rows (vocabulary-
//     parallel), which is why the vocabulary pads to a multiple of 128 * T;
//   - norms and position embeddings are replicated.
// A rank's table has the full table's names and order with the local shapes, its offsets contiguous
// from 0. Every rank's initialisation is its slice of the full model's (model/init.hpp generates the
// slice directly), so a run gives the same model whatever T is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/config.hpp"
#include "model/param_table.hpp"

namespace meg {

// InputError (naming the sizes) unless CONFIG splits over TP ranks: heads, key/value heads, the MLP
// width and the padded vocabulary divisible by TP.
void check_tensor_parallel(const ModelConfig& config, int tp);

// How the tensor T splits: its table entry's split.
inline const TpSplitOf& tp_split_of(const ParamTensor& t) { return t.tp; }

// The table of one rank's shard (the same for every rank): the full table's entries with the local
// shapes and parts.
std::vector<ParamTensor> gpt_parameter_table(const ModelConfig& config, int tp);

// Where rank RANK's shard of the full tensor FULL (of a full table) comes from: calls
// RUN(full_index, local_index, length) for each contiguous run of the shard, indices counting the
// tensor's elements in the full and the local layout. A tensor is a [rows, cols] matrix (a vector
// [n, 1]); the split axis holds the parts back to back, and the rank owns the RANK-th TP-th of each
// part. The one definition of the split, which the copies below and the initialisation
// (model/init.hpp) share.
template <typename Run>
void for_each_shard_run(const ParamTensor& full, int tp, int rank, Run run) {
  const TpSplitOf& how = tp_split_of(full);
  if (how.split == TpSplit::replicated) {
    run(size_t(0), size_t(0), full.numel);
    return;
  }
  // Column-parallel and vocabulary-parallel tensors split their rows, row-parallel ones columns.
  const bool split_columns = how.split == TpSplit::row_parallel;
  const int64_t rows = full.shape[0];
  const int64_t cols = full.shape.size() > 1 ? full.shape[1] : 1;
  const int64_t local_cols = split_columns ? cols / tp : cols;
  int64_t part_start = 0, local_start = 0;  // along the split axis, in the full and local tensor
  for (const int64_t part : how.parts) {
    const int64_t piece = part / tp;
    const int64_t from = part_start + piece * rank;
    if (!split_columns) {
      run(size_t(from * cols), size_t(local_start * cols), size_t(piece * cols));
    } else {
      for (int64_t r = 0; r < rows; ++r)
        run(size_t(r * cols + from), size_t(r * local_cols + local_start), size_t(piece));
    }
    part_start += part;
    local_start += piece;
  }
}

// Rank RANK's shard (its table's layout) of the full flat array FULL (float or double).
template <typename F>
void shard_parameters(const ModelConfig& config, int tp, int rank, const F* full, F* local);

// The full flat array from every rank's shard, LOCALS[r] being rank r's (all TP of them).
template <typename F>
void unshard_parameters(const ModelConfig& config, int tp, const std::vector<const F*>& locals, F* full);

}  // namespace meg
