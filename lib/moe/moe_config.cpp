// The mixture-of-experts settings (see moe_config.hpp): names, moe-layer-freq, validation, JSON.
#include "moe/moe_config.hpp"

#include <cctype>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/json_file.hpp"

namespace meg {

namespace {

const std::vector<std::string> kScoreFunctions = {"softmax", "sigmoid"};
const std::vector<std::string> kLoadBalancing = {"aux_loss", "seq_aux_loss", "global_aux_loss", "none"};
const std::vector<std::string> kDropPolicies = {"probs", "position"};
const std::vector<std::string> kRouterDtypes = {"fp32", "fp64"};

template <typename E>
E parse_name(const std::vector<std::string>& names, const std::string& name, const std::string& key,
             const std::string& where) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<E>(i);
  input_error("{}: {} '{}' is not one of {}", where, key, name, fmt::join(names, ", "));
}

// A recursive-descent reader of the list expressions moe-layer-freq takes, Python's semantics:
//   expr := term ('+' term)*     list concatenation
//   term := atom ('*' N)*        repetition
//   atom := '[' (0|1) (',' (0|1))* ']' | '(' expr ')'
class FreqParser {
 public:
  FreqParser(const std::string& text, const std::string& where) : s_(text), where_(where) {}
  std::vector<bool> parse() {
    std::vector<bool> out = expr();
    skip();
    if (i_ != s_.size()) fail("unexpected '" + std::string(1, s_[i_]) + "'");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    input_error("{}: moe-layer-freq \"{}\": {} at position {} (give an integer N or a list expression such as "
                "\"([0]*3+[1]*11)\")",
                where_, s_, why, i_ + 1);
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  int64_t number() {
    skip();
    const size_t start = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (i_ == start || i_ - start > 6) fail("expected a number");
    return std::stoll(s_.substr(start, i_ - start));
  }
  std::vector<bool> expr() {
    std::vector<bool> out = term();
    while (eat('+')) {
      const std::vector<bool> more = term();
      out.insert(out.end(), more.begin(), more.end());
    }
    return out;
  }
  std::vector<bool> term() {
    std::vector<bool> out = atom();
    while (eat('*')) {
      const int64_t n = number();
      if (out.size() * size_t(n) > kMaxLayers) fail("a list longer than any model");
      std::vector<bool> rep;
      for (int64_t r = 0; r < n; ++r) rep.insert(rep.end(), out.begin(), out.end());
      out = std::move(rep);
    }
    return out;
  }
  std::vector<bool> atom() {
    if (eat('(')) {
      std::vector<bool> out = expr();
      if (!eat(')')) fail("expected ')'");
      return out;
    }
    if (!eat('[')) fail("expected '[' or '('");
    std::vector<bool> out;
    do {
      const int64_t v = number();
      if (v > 1) fail("a layer flag is 0 (dense) or 1 (MoE)");
      out.push_back(v == 1);
    } while (eat(','));
    if (!eat(']')) fail("expected ']'");
    return out;
  }

  static constexpr size_t kMaxLayers = 1 << 20;
  const std::string& s_;
  const std::string& where_;
  size_t i_ = 0;
};

}  // namespace

std::string to_string(MoeScoreFunction f) { return kScoreFunctions.at(size_t(f)); }
std::string to_string(MoeLoadBalancing b) { return kLoadBalancing.at(size_t(b)); }
std::string to_string(MoeDropPolicy p) { return kDropPolicies.at(size_t(p)); }
std::string to_string(MoeRouterDtype d) { return kRouterDtypes.at(size_t(d)); }

std::vector<bool> parse_layer_freq(const std::string& freq, int64_t blocks, const std::string& where) {
  std::string text = freq;
  // A shell may leave the quotes of Megatron's "'([1]*48)'" around the expression.
  if (text.size() >= 2 && (text.front() == '\'' || text.front() == '"') && text.back() == text.front())
    text = text.substr(1, text.size() - 2);
  const bool integer = !text.empty() && text.size() <= 6 &&
                       text.find_first_not_of("0123456789") == std::string::npos;
  if (integer) {
    const int64_t n = std::stoll(text);
    if (n < 1) input_error("{}: moe-layer-freq {} must be at least 1", where, n);
    std::vector<bool> out(static_cast<size_t>(blocks));
    for (int64_t b = 0; b < blocks; ++b) out[size_t(b)] = b % n == 0;
    return out;
  }
  std::vector<bool> out = FreqParser(text, where).parse();
  if (int64_t(out.size()) != blocks)
    input_error("{}: moe-layer-freq \"{}\" has {} entries for {} blocks (num-layers)", where, freq, out.size(),
                blocks);
  return out;
}

void MoeConfig::validate(const std::string& where) const {
  if (num_experts < 0 || num_experts > 65536)
    input_error("{}: num-experts must be from 0 (dense) to 65536, got {}", where, num_experts);
  if (!enabled()) return;
  const auto positive = [&](const char* key, int64_t v) {
    if (v <= 0 || v > std::numeric_limits<int32_t>::max())
      input_error("{}: {} must be positive, got {}", where, key, v);
  };
  if (ffn_hidden_size != 0) positive("moe-ffn-hidden-size", ffn_hidden_size);
  positive("moe-router-topk", router_topk);
  if (router_topk > num_experts)
    input_error("{}: moe-router-topk {} exceeds num-experts {}", where, router_topk, num_experts);
  if (router_topk == 1 && score_function == MoeScoreFunction::softmax && !router_pre_softmax)
    input_error("{}: moe-router-topk 1 with the softmax after the top-k gives every token weight 1 (no gradient "
                "to the router): use moe-router-pre-softmax",
                where);
  if (router_pre_softmax && score_function != MoeScoreFunction::softmax)
    input_error("{}: moe-router-pre-softmax needs moe-router-score-function softmax", where);
  if (router_topk_scaling_factor && !(*router_topk_scaling_factor > 0 && std::isfinite(*router_topk_scaling_factor)))
    input_error("{}: moe-router-topk-scaling-factor must be positive, got {}", where, *router_topk_scaling_factor);
  if ((router_num_groups > 0) != (router_group_topk > 0))
    input_error("{}: group-limited routing needs both moe-router-num-groups and moe-router-group-topk ({} and {})",
                where, router_num_groups, router_group_topk);
  if (router_num_groups < 0 || router_group_topk < 0)
    input_error("{}: moe-router-num-groups and moe-router-group-topk must not be negative", where);
  if (router_num_groups > 0) {
    if (num_experts % router_num_groups != 0)
      input_error("{}: num-experts {} is not divisible by moe-router-num-groups {}", where, num_experts,
                  router_num_groups);
    if (router_group_topk > router_num_groups || router_topk < router_group_topk ||
        router_topk > router_group_topk * (num_experts / router_num_groups))
      input_error("{}: moe-router-group-topk {} must be at most moe-router-num-groups {} and moe-router-topk {}, "
                  "and its groups must hold the top-k experts",
                  where, router_group_topk, router_num_groups, router_topk);
  }
  if (load_balancing == MoeLoadBalancing::global_aux_loss)
    input_error("{}: moe-router-load-balancing-type global_aux_loss is not implemented (use aux_loss or "
                "seq_aux_loss)",
                where);
  if (!(aux_loss_coeff >= 0 && std::isfinite(aux_loss_coeff)))
    input_error("{}: moe-aux-loss-coeff must be at least 0, got {}", where, aux_loss_coeff);
  if (!(z_loss_coeff >= 0 && std::isfinite(z_loss_coeff)))
    input_error("{}: moe-z-loss-coeff must be at least 0, got {}", where, z_loss_coeff);
  if (router_enable_expert_bias && score_function != MoeScoreFunction::sigmoid)
    input_error("{}: moe-router-enable-expert-bias needs moe-router-score-function sigmoid (as Megatron)", where);
  if (!(router_bias_update_rate >= 0 && std::isfinite(router_bias_update_rate)))
    input_error("{}: moe-router-bias-update-rate must be at least 0, got {}", where, router_bias_update_rate);
  if (expert_capacity_factor && !(*expert_capacity_factor > 0 && std::isfinite(*expert_capacity_factor)))
    input_error("{}: moe-expert-capacity-factor must be positive (or null: dropless), got {}", where,
                *expert_capacity_factor);
  if (pad_expert_input_to_capacity && !expert_capacity_factor)
    input_error("{}: moe-pad-expert-input-to-capacity needs moe-expert-capacity-factor", where);
  if (shared_expert_intermediate_size != 0)
    positive("moe-shared-expert-intermediate-size", shared_expert_intermediate_size);
  if (shared_expert_gate && !has_shared_experts())
    input_error("{}: moe-shared-expert-gate needs moe-shared-expert-intermediate-size", where);
}

const std::vector<std::string>& MoeConfig::json_keys() {
  static const std::vector<std::string> keys = {
      "num-experts",
      "moe-layer-freq",
      "moe-ffn-hidden-size",
      "moe-router-topk",
      "moe-router-score-function",
      "moe-router-pre-softmax",
      "moe-router-topk-scaling-factor",
      "moe-router-num-groups",
      "moe-router-group-topk",
      "moe-router-load-balancing-type",
      "moe-aux-loss-coeff",
      "moe-z-loss-coeff",
      "moe-router-enable-expert-bias",
      "moe-router-bias-update-rate",
      "moe-router-dtype",
      "moe-expert-capacity-factor",
      "moe-token-drop-policy",
      "moe-pad-expert-input-to-capacity",
      "moe-shared-expert-intermediate-size",
      "moe-shared-expert-gate"};
  return keys;
}

void MoeConfig::write_json(nlohmann::ordered_json& j) const {
  j["num-experts"] = num_experts;
  j["moe-layer-freq"] = layer_freq;
  j["moe-ffn-hidden-size"] = ffn_hidden_size;
  j["moe-router-topk"] = router_topk;
  j["moe-router-score-function"] = to_string(score_function);
  j["moe-router-pre-softmax"] = router_pre_softmax;
  j["moe-router-topk-scaling-factor"] = json_or_null(router_topk_scaling_factor);
  j["moe-router-num-groups"] = router_num_groups;
  j["moe-router-group-topk"] = router_group_topk;
  j["moe-router-load-balancing-type"] = to_string(load_balancing);
  j["moe-aux-loss-coeff"] = aux_loss_coeff;
  j["moe-z-loss-coeff"] = z_loss_coeff;
  j["moe-router-enable-expert-bias"] = router_enable_expert_bias;
  j["moe-router-bias-update-rate"] = router_bias_update_rate;
  j["moe-router-dtype"] = to_string(router_dtype);
  j["moe-expert-capacity-factor"] = json_or_null(expert_capacity_factor);
  j["moe-token-drop-policy"] = to_string(token_drop_policy);
  j["moe-pad-expert-input-to-capacity"] = pad_expert_input_to_capacity;
  j["moe-shared-expert-intermediate-size"] = shared_expert_intermediate_size;
  j["moe-shared-expert-gate"] = shared_expert_gate;
}

void MoeConfig::read_json(const nlohmann::json& j, const std::string& where) {
  const auto has = [&](const char* key) { return j.contains(key); };
  const auto get_int = [&](const char* key, int64_t& v) {
    if (has(key)) v = json_get<int64_t>(j, key, where);
  };
  const auto get_bool = [&](const char* key, bool& v) {
    if (has(key)) v = json_get<bool>(j, key, where);
  };
  const auto get_double = [&](const char* key, double& v) {
    if (has(key)) v = json_get<double>(j, key, where);
  };
  const auto get_optional = [&](const char* key, std::optional<double>& v) {
    if (has(key)) v = j.at(key).is_null() ? std::nullopt : std::optional<double>(json_get<double>(j, key, where));
  };
  const auto get_name = [&](const char* key, const std::vector<std::string>& names, auto& v) {
    if (has(key)) v = parse_name<std::decay_t<decltype(v)>>(names, json_get<std::string>(j, key, where), key, where);
  };
  get_int("num-experts", num_experts);
  if (has("moe-layer-freq")) {
    const auto& f = j.at("moe-layer-freq");
    layer_freq = f.is_number_integer() ? std::to_string(f.get<int64_t>()) : json_get<std::string>(j, "moe-layer-freq", where);
  }
  get_int("moe-ffn-hidden-size", ffn_hidden_size);
  get_int("moe-router-topk", router_topk);
  get_name("moe-router-score-function", kScoreFunctions, score_function);
  get_bool("moe-router-pre-softmax", router_pre_softmax);
  get_optional("moe-router-topk-scaling-factor", router_topk_scaling_factor);
  get_int("moe-router-num-groups", router_num_groups);
  get_int("moe-router-group-topk", router_group_topk);
  get_name("moe-router-load-balancing-type", kLoadBalancing, load_balancing);
  get_double("moe-aux-loss-coeff", aux_loss_coeff);
  get_double("moe-z-loss-coeff", z_loss_coeff);
  get_bool("moe-router-enable-expert-bias", router_enable_expert_bias);
  get_double("moe-router-bias-update-rate", router_bias_update_rate);
  get_name("moe-router-dtype", kRouterDtypes, router_dtype);
  get_optional("moe-expert-capacity-factor", expert_capacity_factor);
  get_name("moe-token-drop-policy", kDropPolicies, token_drop_policy);
  get_bool("moe-pad-expert-input-to-capacity", pad_expert_input_to_capacity);
  get_int("moe-shared-expert-intermediate-size", shared_expert_intermediate_size);
  get_bool("moe-shared-expert-gate", shared_expert_gate);
}

}  // namespace meg
