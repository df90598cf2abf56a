// The mixture-of-experts settings of a model: Megatron-LM's --num-experts and --moe-* options, with
// its names and semantics, as one part of ModelConfig (model/config.hpp). JSON keys (in a model
// config file and the checkpoint record) are the option names without dashes; a model without
// them is dense, so records written before MoE load as before.
//
//   num-experts                         E experts per MoE layer; 0 (Megatron's None): no MoE
//   moe-layer-freq                      which blocks are MoE ('E' instead of the MLP '-'): an
//                                       integer N (block i is MoE when i % N == 0; default 1, all),
//                                       or a Python list expression of one 0/1 per block,
//                                       "[1,0,1]", "([0]*3+[1]*11)", "([1]*3+[0]*1)*3" (parse_layer_freq)
//   moe-ffn-hidden-size                 each expert's MLP width; 0: ffn-hidden-size
//   moe-router-topk                     k experts per token (default 2)
//   moe-router-score-function           "softmax" | "sigmoid" (moe/router.hpp)
//   moe-router-pre-softmax              softmax over all experts before the top-k (softmax only)
//   moe-router-topk-scaling-factor      the routing weights' factor; null: none
//   moe-router-num-groups, moe-router-group-topk   group-limited routing; 0: off
//   moe-router-load-balancing-type      "aux_loss" | "seq_aux_loss" | "none" (moe/aux_losses.hpp;
//                                       Megatron's "global_aux_loss" is refused for now)
//   moe-aux-loss-coeff                  its coefficient (default 0: no loss)
//   moe-z-loss-coeff                    the router z-loss's (default 0: none)
//   moe-router-enable-expert-bias       aux-loss-free balancing (sigmoid only, as Megatron):
//                                       decoder.layers.i.mlp.router.expert_bias [E], fp32, which
//                                       shifts the selection only (moe/expert_bias.hpp)
//   moe-router-bias-update-rate         its update rate (default 1e-3)
//   moe-router-dtype                    "fp32" | "fp64": the router's precision, at least fp32.
//                                       The CPU router computes in fp64 for both (it is cheap).
//   moe-expert-capacity-factor          capacity of each expert, a factor of N k / E; null: dropless
//   moe-token-drop-policy               "probs" | "position": which tokens an expert keeps
//   moe-pad-expert-input-to-capacity    pad every expert's input to its capacity
//   moe-shared-expert-intermediate-size the shared experts' MLP width (all of them); 0: none
//   moe-shared-expert-gate              a sigmoid gate on the shared experts' output
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace meg {

enum class MoeScoreFunction { softmax, sigmoid };
enum class MoeLoadBalancing { aux_loss, seq_aux_loss, global_aux_loss, none };
enum class MoeDropPolicy { probs, position };
enum class MoeRouterDtype { fp32, fp64 };

std::string to_string(MoeScoreFunction f);
std::string to_string(MoeLoadBalancing b);
std::string to_string(MoeDropPolicy p);
std::string to_string(MoeRouterDtype d);

// The 0/1 flags of moe-layer-freq FREQ for BLOCKS blocks (1: MoE). InputError (prefixed with
// WHERE) for anything but an integer >= 1 or a list expression of brackets, parentheses, 0/1
// lists, "+" and "* N", or a list whose length is not BLOCKS.
std::vector<bool> parse_layer_freq(const std::string& freq, int64_t blocks, const std::string& where);

struct MoeConfig {
  int64_t num_experts = 0;
  std::string layer_freq = "1";
  int64_t ffn_hidden_size = 0;
  int64_t router_topk = 2;
  MoeScoreFunction score_function = MoeScoreFunction::softmax;
  bool router_pre_softmax = false;
  std::optional<double> router_topk_scaling_factor;
  int64_t router_num_groups = 0;
  int64_t router_group_topk = 0;
  MoeLoadBalancing load_balancing = MoeLoadBalancing::aux_loss;
  double aux_loss_coeff = 0.0;
  double z_loss_coeff = 0.0;
  bool router_enable_expert_bias = false;
  double router_bias_update_rate = 1e-3;
  MoeRouterDtype router_dtype = MoeRouterDtype::fp32;
  std::optional<double> expert_capacity_factor;
  MoeDropPolicy token_drop_policy = MoeDropPolicy::probs;
  bool pad_expert_input_to_capacity = false;
  int64_t shared_expert_intermediate_size = 0;
  bool shared_expert_gate = false;

  bool enabled() const { return num_experts > 0; }
  // An expert's MLP width, given the model's dense one.
  int64_t expert_ffn(int64_t dense_ffn) const { return ffn_hidden_size > 0 ? ffn_hidden_size : dense_ffn; }
  bool has_shared_experts() const { return shared_expert_intermediate_size > 0; }
  // Whether the load-balancing loss and the z-loss are computed (and their gradients injected).
  bool aux_loss_on() const { return load_balancing != MoeLoadBalancing::none && aux_loss_coeff > 0; }
  bool z_loss_on() const { return z_loss_coeff > 0; }

  // InputError (prefixed with WHERE) naming the first problem.
  void validate(const std::string& where) const;

  // The keys above, in the order write_json writes them.
  static const std::vector<std::string>& json_keys();
  void write_json(nlohmann::ordered_json& j) const;
  // Reads the keys of J that are MoE keys (the others are left alone), errors prefixed with WHERE.
  void read_json(const nlohmann::json& j, const std::string& where);

  bool operator==(const MoeConfig&) const = default;
};

}  // namespace meg
