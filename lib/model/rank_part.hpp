// A rank's part of a whole-model array: what set_state() keeps of a checkpoint's full parameters
// and moments on a rank of a tensor-parallel group and a pipeline.
#pragma once

#include <vector>

#include "model/config.hpp"
#include "model/param_tensor.hpp"
#include "model/pipeline.hpp"
#include "model/tensor_parallel.hpp"

namespace meg {

// FULL is laid out by gpt_parameter_table(CONFIG); the result by LOCAL_TABLE: rank TP_RANK's
// shard of a TP-way split (model/tensor_parallel.hpp), cut to the tensors of LOCAL_TABLE (a
// pipeline stage's, model/pipeline.hpp, or all of them).
template <typename F>
std::vector<F> rank_part(const ModelConfig& config, int tp, int tp_rank, const std::vector<ParamTensor>& local_table,
                         const std::vector<F>& full) {
  std::vector<F> tp_local = full;
  auto tp_table = gpt_parameter_table(config);
  if (tp > 1) {
    tp_table = gpt_parameter_table(config, tp);
    tp_local.assign(table_size(tp_table), F(0));
    shard_parameters(config, tp, tp_rank, full.data(), tp_local.data());
  }
  if (tp_table.size() == local_table.size()) return tp_local;  // the whole stage: nothing to cut
  std::vector<F> local(table_size(local_table));
  copy_stage(tp_table, local_table, tp_local.data(), local.data(), true);
  return local;
}

}  // namespace meg
