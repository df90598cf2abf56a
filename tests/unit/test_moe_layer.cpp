// The MoE layer kind 'E': its tensors, its forward against a direct evaluation of the chosen
// experts, and its gradients (router, experts, shared experts, gate, auxiliary losses) against
// finite differences through the whole model.
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "catch.hpp"
#include "gradient_check.hpp"
#include "micro_model.hpp"
#include "test_util.hpp"
#include "convert/hf_names.hpp"
#include "model/cpu_layers.hpp"
#include "model/gpt.hpp"
#include "model/param_table.hpp"
#include "ops/cpu/ops.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {

// The micro model of FAMILY with both blocks MoE: 4 experts of 12, top-2, no auxiliary losses.
ModelConfig moe_micro(ModelFamily family) {
  ModelConfig c = micro_config(family);
  c.moe.num_experts = 4;
  c.moe.ffn_hidden_size = 12;
  c.moe.router_topk = 2;
  c.validate();
  return c;
}

// A training path over one layer's own flat arrays: the whole stream, no dropout, no attention.
class DirectPath final : public CpuTrainingPath<double> {
 public:
  DirectPath(const ModelConfig& c, std::vector<double>& params, std::vector<double>& grads)
      : c_(c), params_(params), grads_(grads) {}
  const double* p(size_t o) const override { return o == kAbsentTensor ? nullptr : params_.data() + o; }
  double* g(size_t o) override { return o == kAbsentTensor ? nullptr : grads_.data() + o; }
  size_t rows(int N) const override { return size_t(N); }
  void norm_rows(double* out, double* mean, double* rstd, const double* inp, size_t w, size_t b, int N) override {
    cpu_norm_forward(c_, out, mean, rstd, inp, p(w), p(b), N);
  }
  double* row_parallel_forward(const double*, size_t, size_t, int, int) override { throw std::logic_error("unused"); }
  void hidden_dropout(double*, int, uint64_t) override {}
  AttentionCore<double>& attention_core(const LayerPlace&) override { throw std::logic_error("unused"); }
  const double* branch_grad(const double* dres, int, uint64_t) override { return dres; }
  double* exit_tp(double* parts, int) override { return parts; }
  void norm_backward(double* dinp, const double* dout, const double* inp, size_t w, size_t, const double*,
                     const double* rstd, int N) override {
    cpu::rmsnorm_backward(dinp, g(w), dout, inp, p(w), rstd, N, int(c_.hidden_size));
  }
  const CausalAttention<double>& causal_attention(const LayerPlace&) override { throw std::logic_error("unused"); }
  void sum_over_heads(double*, size_t) override {}

 private:
  const ModelConfig& c_;
  std::vector<double>& params_;
  std::vector<double>& grads_;
};

}  // namespace

TEST_CASE("moe layer: Megatron's tensor names, experts back to back", "[moe]") {
  ModelConfig c = moe_micro(ModelFamily::llama);
  c.moe.router_enable_expert_bias = true;
  c.moe.score_function = MoeScoreFunction::sigmoid;
  c.moe.shared_expert_intermediate_size = 8;
  c.moe.shared_expert_gate = true;
  c.validate();
  const std::vector<ParamTensor> table = gpt_parameter_table(c);
  const auto named = [&](const std::string& name) -> const ParamTensor& {
    for (const auto& t : table)
      if (t.name == name) return t;
    FAIL("no tensor " << name);
    throw std::logic_error("unreachable");
  };
  CHECK(named("decoder.layers.1.mlp.router.weight").shape == std::vector<int64_t>{4, 16});
  CHECK(named("decoder.layers.1.mlp.router.expert_bias").shape == std::vector<int64_t>{4});
  CHECK(named("decoder.layers.0.mlp.experts.local_experts.3.linear_fc1.weight").shape == std::vector<int64_t>{24, 16});
  CHECK(named("decoder.layers.0.mlp.experts.local_experts.2.linear_fc2.weight").shape == std::vector<int64_t>{16, 12});
  CHECK(named("decoder.layers.0.mlp.shared_experts.linear_fc1.weight").shape == std::vector<int64_t>{16, 16});
  CHECK(named("decoder.layers.0.mlp.shared_experts.gate_weight").shape == std::vector<int64_t>{1, 16});
  CHECK(named("decoder.layers.0.pre_mlp_layernorm.weight").layer == 1);
  const ParamTensor& e0 = named("decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight");
  const ParamTensor& e2 = named("decoder.layers.0.mlp.experts.local_experts.2.linear_fc1.weight");
  CHECK(e2.offset == e0.offset + 2 * e0.numel);
  const TensorIndex index(c, table);
  CHECK(index.at(1, TensorRole::expert_fc1_weight) == e0.offset);
  CHECK(c.layer_pattern() == "*E*E");
  CHECK(c.num_parameters() == int64_t(table_size(table)));
}

TEST_CASE("moe layer: dropless routing equals the chosen experts weighted by their probabilities", "[moe]") {
  ModelConfig c = moe_micro(ModelFamily::llama);
  c.moe.shared_expert_intermediate_size = 8;
  c.moe.shared_expert_gate = true;
  c.init_std = 0.3;
  const std::vector<ParamTensor> table = gpt_parameter_table(c);
  std::vector<double> params(table_size(table)), grads(params.size(), 0.0);
  std::mt19937 rng(4);
  std::normal_distribution<double> d(0.0, 0.3);
  for (auto& v : params) v = d(rng);
  const TensorIndex index(c, table);
  const LayerTensors& t = index.layer(1);
  DirectPath path(c, params, grads);
  const auto layers = make_cpu_layers<double>(c, 1, 1, 2);
  const int N = 6, C = 16, E = 4, Fe = 12;  // top-2
  std::vector<double> x(size_t(N * C)), out(x.size());
  for (auto& v : x) v = d(rng);
  std::vector<double> acts(layers[0]->activation_size({N, 1, N}));
  layers[0]->forward(path, {t, 1, 0}, {N, 1, N}, acts.data(), x.data(), out.data());

  const auto P = [&](TensorRole role) { return params.data() + t[role]; };
  for (int n = 0; n < N; ++n) {
    // RMSNorm, the router's logits, the top-2 and the softmax over them.
    const double* xr = x.data() + n * C;
    double ms = 0;
    for (int k = 0; k < C; ++k) ms += xr[k] * xr[k] / C;
    std::vector<double> h(static_cast<size_t>(C));
    for (int k = 0; k < C; ++k) h[size_t(k)] = xr[k] / std::sqrt(ms + c.norm_eps) * P(TensorRole::norm_weight)[k];
    std::vector<double> logit(static_cast<size_t>(E), 0.0);
    for (int e = 0; e < E; ++e)
      for (int k = 0; k < C; ++k) logit[size_t(e)] += h[size_t(k)] * P(TensorRole::router_weight)[e * C + k];
    int a = 0;
    for (int e = 1; e < E; ++e) a = logit[size_t(e)] > logit[size_t(a)] ? e : a;
    int b = a == 0 ? 1 : 0;
    for (int e = 0; e < E; ++e) b = e != a && logit[size_t(e)] > logit[size_t(b)] ? e : b;
    const double pa = 1 / (1 + std::exp(logit[size_t(b)] - logit[size_t(a)]));
    // A SwiGLU MLP of width W from weights W1 [2W, C], W2 [C, W].
    const auto mlp = [&](const double* w1, const double* w2, int W, std::vector<double>& y, double weight) {
      for (int o = 0; o < C; ++o)
        for (int f = 0; f < W; ++f) {
          double g = 0, u = 0;
          for (int k = 0; k < C; ++k) g += w1[f * C + k] * h[size_t(k)], u += w1[(W + f) * C + k] * h[size_t(k)];
          y[size_t(o)] += weight * w2[o * W + f] * g / (1 + std::exp(-g)) * u;
        }
    };
    std::vector<double> y(static_cast<size_t>(C), 0.0);
    for (const auto& [e, p] : {std::pair{a, pa}, std::pair{b, 1 - pa}})
      mlp(P(TensorRole::expert_fc1_weight) + e * 2 * Fe * C, P(TensorRole::expert_fc2_weight) + e * C * Fe, Fe, y, p);
    double gl = 0;
    for (int k = 0; k < C; ++k) gl += h[size_t(k)] * P(TensorRole::shared_gate_weight)[k];
    mlp(P(TensorRole::shared_fc1_weight), P(TensorRole::shared_fc2_weight), 8, y, 1 / (1 + std::exp(-gl)));
    for (int o = 0; o < C; ++o) CHECK(out[size_t(n * C + o)] == Approx(xr[o] + y[size_t(o)]).epsilon(1e-10));
  }
}

TEST_CASE("moe layer: gradients match finite differences", "[moe]") {
  SECTION("softmax, Llama") { check_gradients_against_differences(moe_micro(ModelFamily::llama), 0.0); }
  SECTION("sigmoid, GPT-2 (biases, GELU), shared experts with a gate, dropout") {
    ModelConfig c = moe_micro(ModelFamily::gpt2);
    c.moe.score_function = MoeScoreFunction::sigmoid;
    c.moe.router_topk_scaling_factor = 1.5;
    c.moe.shared_expert_intermediate_size = 8;
    c.moe.shared_expert_gate = true;
    check_gradients_against_differences(c, 0.1);
  }
  SECTION("pre-softmax, group-limited, capacity with padding") {
    ModelConfig c = moe_micro(ModelFamily::llama);
    c.moe.router_pre_softmax = true;
    c.moe.router_num_groups = 2;
    c.moe.router_group_topk = 1;
    c.moe.expert_capacity_factor = 1.0;
    c.moe.pad_expert_input_to_capacity = true;
    check_gradients_against_differences(c, 0.0);
  }
}

TEST_CASE("moe layer: the auxiliary losses' gradients are the backward's", "[moe]") {
  for (const auto type : {MoeLoadBalancing::aux_loss, MoeLoadBalancing::seq_aux_loss}) {
    ModelConfig c = moe_micro(ModelFamily::llama);
    c.moe.load_balancing = type;
    c.moe.aux_loss_coeff = 0.5;
    c.moe.z_loss_coeff = 0.2;
    c.init_std = 0.2;
    GptModel<double> m(c);
    m.init(3);
    const int B = 2, T = 8;
    const auto tokens = random_tokens(B * T, 50, 1), targets = random_tokens(B * T, 50, 2);
    const auto objective = [&] {
      const double loss = m.forward(tokens.data(), targets.data(), B, T);
      return loss + m.auxiliary_losses().weighted;
    };
    m.zero_grad();
    objective();
    const AuxiliaryLosses aux = m.auxiliary_losses();
    CHECK(aux.moe_layers == 2);
    CHECK(aux.load_balancing_loss > 0.5);  // about 1 when balanced, in each layer
    CHECK(aux.z_loss > 0);
    m.backward();
    const ParamTensor& router = m.tensor("decoder.layers.1.mlp.router.weight");
    const double h = 1e-5;
    for (size_t i = 0; i < router.numel; i += 5) {
      double* w = m.params() + router.offset + i;
      const double saved = *w;
      *w = saved + h;
      const double up = objective();
      *w = saved - h;
      const double down = objective();
      *w = saved;
      CHECK(m.grads()[router.offset + i] == Approx((up - down) / (2 * h)).margin(1e-7));
    }
  }
}

TEST_CASE("moe layer: one tensor-parallel rank and one pipeline stage for now", "[moe]") {
  const ModelConfig c = moe_micro(ModelFamily::llama);
  CHECK_THAT(input_error_of([&] { make_cpu_layers<float>(c, 2, 1, 2); }),
             ContainsSubstring("MoE layers run on one tensor-parallel rank for now"));
  CHECK_THAT(input_error_of([&] { GptModel<float> m(c, nullptr, PipelineStage{0, 2}); }),
             ContainsSubstring("MoE layers run on one pipeline stage for now"));
  CHECK_THAT(input_error_of([&] { hf_tensor_map(c); }),
             ContainsSubstring("Hugging Face LlamaForCausalLM has no MoE layer 'E'"));
}
