// The MoE command-line options (see moe_options.hpp).
#include "moe/moe_options.hpp"

#include <cstdint>
#include <string>

namespace meg::cli {

namespace {

enum class Kind { integer, real, flag, text };
struct MoeOption {
  const char* key;
  Kind kind;
  const char* help;
};

const MoeOption kOptions[] = {
    {"num-experts", Kind::integer, "MoE: experts per MoE layer (0: a dense model)"},
    {"moe-layer-freq", Kind::text, "MoE: N (block i is MoE when i % N == 0) or a list such as \"([0]*1+[1]*3)\""},
    {"moe-ffn-hidden-size", Kind::integer, "MoE: each expert's MLP width (default --ffn-hidden-size)"},
    {"moe-router-topk", Kind::integer, "MoE: experts per token"},
    {"moe-router-score-function", Kind::text, "MoE: softmax or sigmoid"},
    {"moe-router-pre-softmax", Kind::flag, "MoE: softmax over all experts before the top-k"},
    {"moe-router-topk-scaling-factor", Kind::real, "MoE: factor of the routing weights"},
    {"moe-router-num-groups", Kind::integer, "MoE: expert groups of group-limited routing"},
    {"moe-router-group-topk", Kind::integer, "MoE: groups each token may use"},
    {"moe-router-load-balancing-type", Kind::text, "MoE: aux_loss, seq_aux_loss or none"},
    {"moe-aux-loss-coeff", Kind::real, "MoE: coefficient of the load-balancing loss"},
    {"moe-z-loss-coeff", Kind::real, "MoE: coefficient of the router z-loss"},
    {"moe-router-enable-expert-bias", Kind::flag, "MoE: aux-loss-free balancing by an expert bias (sigmoid)"},
    {"moe-router-bias-update-rate", Kind::real, "MoE: the expert bias's update rate"},
    {"moe-router-dtype", Kind::text, "MoE: the router's precision, fp32 or fp64"},
    {"moe-expert-capacity-factor", Kind::real, "MoE: expert capacity, a factor of tokens x topk / experts"},
    {"moe-token-drop-policy", Kind::text, "MoE: probs or position, the tokens an expert over capacity keeps"},
    {"moe-pad-expert-input-to-capacity", Kind::flag, "MoE: pad every expert's input to its capacity"},
    {"moe-shared-expert-intermediate-size", Kind::integer, "MoE: the shared experts' MLP width"},
    {"moe-shared-expert-gate", Kind::flag, "MoE: a sigmoid gate on the shared experts"},
};

}  // namespace

void add_moe_options(CLI::App& app, nlohmann::ordered_json& given) {
  for (const MoeOption& o : kOptions) {
    const std::string name = std::string("--") + o.key, key = o.key;
    switch (o.kind) {
      case Kind::integer:
        app.add_option_function<int64_t>(name, [&given, key](const int64_t& v) { given[key] = v; }, o.help);
        break;
      case Kind::real:
        app.add_option_function<double>(name, [&given, key](const double& v) { given[key] = v; }, o.help);
        break;
      case Kind::text:
        app.add_option_function<std::string>(name, [&given, key](const std::string& v) { given[key] = v; }, o.help);
        break;
      case Kind::flag:
        app.add_flag_function(name, [&given, key](int64_t) { given[key] = true; }, o.help);
        break;
    }
  }
}

}  // namespace meg::cli
