// How the GPT model's parameters split over tensor-parallel ranks, as Megatron-LM's layers split
// them, and the moves between the full flat array (gpt.hpp's table) and one rank's shard of it.
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
// from 0. Every rank starts from the same full initialisation, sliced (Megatron's CPU
// initialisation), so a run gives the same model whatever T is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/config.hpp"
#include "model/gpt.hpp"

namespace meg {

enum class TpSplit { replicated, rows, columns };

struct TpSplitOf {
  TpSplit split = TpSplit::replicated;
  // Sizes along the split axis of the stacked sub-tensors, each cut into T equal pieces.
  std::vector<int64_t> parts;
};

// InputError (naming the sizes) unless CONFIG splits over TP ranks: heads, key/value heads, the MLP
// width and the padded vocabulary divisible by TP.
void check_tensor_parallel(const ModelConfig& config, int tp);

// How the full tensor T of CONFIG's table splits.
TpSplitOf tp_split_of(const ModelConfig& config, const ParamTensor& t);

// The table of one rank's shard (the same for every rank).
std::vector<ParamTensor> gpt_parameter_table(const ModelConfig& config, int tp);

// Rank RANK's shard (its table's layout) of the full flat array FULL (float or double).
template <typename F>
void shard_parameters(const ModelConfig& config, int tp, int rank, const F* full, F* local);

// The full flat array from every rank's shard, LOCALS[r] being rank r's (all TP of them).
template <typename F>
void unshard_parameters(const ModelConfig& config, int tp, const std::vector<const F*>& locals, F* full);

}  // namespace meg
