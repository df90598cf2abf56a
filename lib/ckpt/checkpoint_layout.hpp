// The parallel layout of a native checkpoint (ckpt/checkpoint.hpp, ckpt/sharded_checkpoint.hpp):
// which files hold which part of the model's parameters and AdamW moments.
//
// One process (or data parallelism without the distributed optimizer) writes the unsharded form,
// model.safetensors + optimizer.safetensors, which is the sharded form of tp 1, pp 1 under other
// file names; every other layout writes a file per shard. The record of checkpoint.json holds the
// layout ("parallel", "sharded", "distributed_optimizer") and the model config, whose padded
// vocabulary follows the tensor-parallel size (Megatron's rule: a multiple of 128 * tp).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.hpp"

namespace meg {

// The names of a sharded checkpoint's files (ckpt/sharded_checkpoint.hpp lists what each holds).
std::string shard_model_file(int tp, int pp);
std::string shard_optimizer_file(int tp, int pp);
std::string shard_optimizer_file(int tp, int pp, int dp);

// The three arrays of a model's training state, each laid out by the parameter table.
enum class StateKind { param, exp_avg, exp_avg_sq };
inline constexpr StateKind kStateKinds[] = {StateKind::param, StateKind::exp_avg, StateKind::exp_avg_sq};
const char* to_string(StateKind kind);  // "param", "exp_avg", "exp_avg_sq"

struct NativeLayout {
  int tp = 1, pp = 1, dp = 1;
  int virtual_stages = 1;              // model chunks per pipeline rank
  bool distributed_optimizer = false;  // moments in data-parallel shards; only ever set with dp > 1

  // The layout of --tp/--pp/--dp/--virtual-stages/--use-distributed-optimizer, as the trainer
  // records it (the distributed optimizer shards nothing with one data-parallel rank); InputError
  // naming the option for a size below 1.
  static NativeLayout of(int tp, int pp, int dp, int virtual_stages, bool distributed_optimizer);

  bool sharded() const { return tp > 1 || pp > 1 || distributed_optimizer; }
  // The parameters of tensor-parallel rank TP_RANK of pipeline rank PP_RANK.
  std::string model_file(int tp_rank, int pp_rank) const;
  // Their moments as named tensors; without the distributed optimizer.
  std::string optimizer_file(int tp_rank, int pp_rank) const;
  // Data-parallel rank DP_RANK's shard of their moments; with the distributed optimizer.
  std::string optimizer_shard_file(int tp_rank, int pp_rank, int dp_rank) const;
  // True for a file of any layout's that holds parameters (not moments).
  static bool holds_parameters(const std::string& file);
  // Every file a checkpoint of this layout holds.
  std::vector<std::string> file_names() const;
  // "tp 2, pp 2 (2 virtual stages), dp 2, distributed optimizer"
  std::string describe() const;

  bool operator==(const NativeLayout&) const = default;
};

// The layout RECORD holds; InputError prefixed with WHERE (the record's file) when it is missing,
// malformed or inconsistent ("sharded" against the sizes, cp or ep other than 1).
NativeLayout layout_of_record(const nlohmann::ordered_json& record, const std::string& where);

// RECORD's "parallel", "sharded" and "distributed_optimizer" set to LAYOUT's, as the trainer
// writes them.
void set_record_layout(nlohmann::ordered_json& record, const NativeLayout& layout);

// InputError naming the option unless CONFIG's model divides over LAYOUT: heads, key/value heads,
// MLP width and padded vocabulary over tp, blocks over pp x virtual stages.
void check_layout(const ModelConfig& config, const NativeLayout& layout);

// CONFIG with its vocabulary padded for LAYOUT's tensor-parallel size, as meg-pretrain pads it.
ModelConfig config_for_layout(ModelConfig config, const NativeLayout& layout);

}  // namespace meg
