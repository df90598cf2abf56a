// The MoE layer on the CPU (see cpu_moe_layer.hpp).
#include "moe/cpu_moe_layer.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "moe/aux_losses.hpp"
#include "moe/dispatch.hpp"
#include "moe/expert_mlp.hpp"
#include "moe/router.hpp"

namespace meg {

namespace {

template <typename F>
void zero(F* a, size_t n) {
  std::fill(a, a + n, F(0));
}

// The layer's sizes: C the width, E experts of Fe (fc1 FCe), k per token, S the shared experts'
// width (fc1 FCs; 0 without).
struct MoeDims {
  int C, E, K, Fe, FCe, S, FCs;
};

template <typename F>
struct MoeActs {
  F *ln, *ln_mean, *ln_rstd, *xp, *h, *a, *y, *branch, *sh_h, *sh_a, *sh_y, *gate;
};
template <typename F>
struct MoeGrads {
  F *dln, *dy, *dxp, *dsh, *mlp;
};

template <typename F>
class CpuMoeLayer final : public CpuLayer<F> {
 public:
  CpuMoeLayer(const ModelConfig& config, int tp_size) : config_(config) {
    if (tp_size != 1)
      input_error("model config: MoE layers run on one tensor-parallel rank for now, not {}", tp_size);
    const MoeConfig& m = config.moe;
    const bool gated = config.activation == Activation::swiglu;
    d_.C = int(config.hidden_size);
    d_.E = int(m.num_experts);
    d_.K = int(m.router_topk);
    d_.Fe = int(m.expert_ffn(config.ffn_hidden_size));
    d_.FCe = (gated ? 2 : 1) * d_.Fe;
    d_.S = int(m.shared_expert_intermediate_size);
    d_.FCs = (gated ? 2 : 1) * d_.S;
  }

  size_t activation_size(const CpuRows& rows) const override {
    Carver<F> c(nullptr);
    acts(c, rows.N);
    return c.used();
  }
  size_t scratch_size(int N) const override {
    Carver<F> c(nullptr);
    grads(c, N);
    return c.used();
  }

  void forward(CpuLayerPath<F>& path, const LayerPlace& at, const CpuRows& rows, F* acts_base, const F* x,
               F* out) const override {
    using enum TensorRole;
    const LayerTensors& t = at.tensors;
    const MoeConfig& moe = config_.moe;
    const int N = rows.N, C = d_.C, E = d_.E;
    Carver<F> c(acts_base);
    const MoeActs<F> a = acts(c, N);
    path.norm_rows(a.ln, a.ln_mean, a.ln_rstd, x, t[norm_weight], t[norm_bias], N);

    // The router, in double.
    const F* wr = path.p(t[router_weight]);
    logits_.assign(size_t(N) * E, 0.0);
    for (int n = 0; n < N; ++n)
      for (int e = 0; e < E; ++e) {
        double s = 0;
        for (int k = 0; k < C; ++k) s += double(a.ln[size_t(n) * C + k]) * double(wr[size_t(e) * C + k]);
        logits_[size_t(n) * E + e] = s;
      }
    std::vector<double> bias;
    if (t[router_expert_bias] != kAbsentTensor) {
      const F* b = path.p(t[router_expert_bias]);
      bias.assign(b, b + E);
    }
    experts_.assign(size_t(N) * d_.K, 0);
    probs_.assign(size_t(N) * d_.K, 0.0);
    route_forward(moe, logits_.data(), bias.empty() ? nullptr : bias.data(), N, experts_.data(), probs_.data());
    plan_ = plan_dispatch(moe, experts_.data(), probs_.data(), N);
    losses_ = {};
    if (rows.training()) {
      B_ = rows.B;
      T_ = rows.T;
      const double lb = load_balancing_loss(moe, logits_.data(), B_, T_, nullptr), z = z_loss(moe, logits_.data(), N, nullptr);
      losses_.load_balancing_loss = moe.aux_loss_on() ? lb / moe.aux_loss_coeff : 0.0;
      losses_.z_loss = moe.z_loss_on() ? z / moe.z_loss_coeff : 0.0;
      losses_.weighted = lb + z;
      losses_.moe_layers = 1;
    }

    // The experts on their rows.
    permute_rows(plan_, static_cast<const F*>(a.ln), C, a.xp);
    int64_t row = 0;
    for (int e = 0; e < E; ++e) {
      const int R = int(plan_.expert_rows[size_t(e)]);
      expert_mlp_forward(config_.activation, weights(path, t, e), a.xp + row * C, plan_.prob.data() + row, R, C,
                         d_.Fe, ExpertActs<F>{a.h + row * d_.FCe, a.a + row * d_.Fe}, a.y + row * C);
      row += R;
    }
    zero(a.branch, size_t(N) * C);
    unpermute_rows(plan_, static_cast<const F*>(a.y), C, a.branch);

    if (d_.S > 0) {
      expert_mlp_forward(config_.activation, shared_weights(path, t), static_cast<const F*>(a.ln), nullptr, N, C,
                         d_.S, ExpertActs<F>{a.sh_h, a.sh_a}, a.sh_y);
      const F* g = path.p(t[shared_gate_weight]);
      for (int n = 0; n < N; ++n) {
        double gate = 1;
        if (g) {
          double s = 0;
          for (int k = 0; k < C; ++k) s += double(a.ln[size_t(n) * C + k]) * double(g[k]);
          gate = 1 / (1 + std::exp(-s));
        }
        a.gate[n] = F(gate);
        for (int k = 0; k < C; ++k) a.branch[size_t(n) * C + k] += a.gate[n] * a.sh_y[size_t(n) * C + k];
      }
    }
    const uint64_t site = block_dropout_sites(at.block) + 3;
    path.hidden_dropout(a.branch, N, site);
    for (size_t i = 0; i < size_t(N) * C; ++i) out[i] = x[i] + a.branch[i];
  }

  void backward(CpuTrainingPath<F>& path, const LayerPlace& at, const CpuRows& rows, F* acts_base, F* scratch,
                const F* x, F* dres) const override {
    using enum TensorRole;
    const LayerTensors& t = at.tensors;
    const MoeConfig& moe = config_.moe;
    const int N = rows.N, C = d_.C, E = d_.E, K = d_.K;
    Carver<F> c(acts_base), cs(scratch);
    const MoeActs<F> a = acts(c, N);
    const MoeGrads<F> s = grads(cs, N);
    const F* dbranch = path.branch_grad(dres, N, block_dropout_sites(at.block) + 3);
    zero(s.dln, size_t(N) * C);

    if (d_.S > 0) {
      // y += gate * shared: the shared output's gradient is dbranch * gate; the gate's logit's is
      // <dbranch, shared> gate (1 - gate).
      const F* g = path.p(t[shared_gate_weight]);
      F* dg = path.g(t[shared_gate_weight]);
      for (int n = 0; n < N; ++n) {
        const size_t r = size_t(n) * C;
        double dot = 0;
        for (int k = 0; k < C; ++k) {
          s.dsh[r + k] = dbranch[r + k] * a.gate[n];
          dot += double(dbranch[r + k]) * double(a.sh_y[r + k]);
        }
        if (!g) continue;
        const double dlogit = dot * double(a.gate[n]) * (1 - double(a.gate[n]));
        for (int k = 0; k < C; ++k) {
          s.dln[r + k] += F(dlogit * double(g[k]));
          dg[k] += F(dlogit * double(a.ln[r + k]));
        }
      }
      expert_mlp_backward(config_.activation, shared_weights(path, t), shared_grads(path, t),
                          static_cast<const F*>(a.ln), nullptr, ExpertActs<F>{a.sh_h, a.sh_a},
                          static_cast<const F*>(s.dsh), N, C, d_.S, s.mlp, s.dln, nullptr);
    }

    // The experts: each row's weight gradient dp, then the routing slots'.
    permute_rows(plan_, dbranch, C, s.dy);
    zero(s.dxp, size_t(plan_.rows()) * C);
    std::vector<double> dprow(static_cast<size_t>(plan_.rows()), 0.0);
    int64_t row = 0;
    for (int e = 0; e < E; ++e) {
      const int R = int(plan_.expert_rows[size_t(e)]);
      expert_mlp_backward(config_.activation, weights(path, t, e), grads_of(path, t, e),
                          static_cast<const F*>(a.xp + row * C), plan_.prob.data() + row,
                          ExpertActs<F>{a.h + row * d_.FCe, a.a + row * d_.Fe}, static_cast<const F*>(s.dy + row * C),
                          R, C, d_.Fe, s.mlp, s.dxp + row * C, dprow.data() + row);
      row += R;
    }
    unpermute_rows(plan_, static_cast<const F*>(s.dxp), C, s.dln);
    std::vector<double> dprobs(static_cast<size_t>(N) * K, 0.0), dlogits(static_cast<size_t>(N) * E, 0.0);
    for (int64_t r = 0; r < plan_.rows(); ++r)
      if (plan_.slot[size_t(r)] >= 0) dprobs[size_t(plan_.slot[size_t(r)])] += dprow[size_t(r)];
    route_backward(moe, logits_.data(), experts_.data(), dprobs.data(), N, dlogits.data());
    if (rows.training()) {
      load_balancing_loss(moe, logits_.data(), B_, T_, dlogits.data());
      z_loss(moe, logits_.data(), N, dlogits.data());
    }

    // The router's product: dln += dL @ Wr, dWr += dL^T ln.
    const F* wr = path.p(t[router_weight]);
    F* dwr = path.g(t[router_weight]);
    for (int n = 0; n < N; ++n)
      for (int e = 0; e < E; ++e) {
        const double dl = dlogits[size_t(n) * E + e];
        if (dl == 0) continue;
        for (int k = 0; k < C; ++k) {
          s.dln[size_t(n) * C + k] += F(dl * double(wr[size_t(e) * C + k]));
          dwr[size_t(e) * C + k] += F(dl * double(a.ln[size_t(n) * C + k]));
        }
      }
    path.norm_backward(dres, path.exit_tp(s.dln, N), x, t[norm_weight], t[norm_bias], a.ln_mean, a.ln_rstd,
                       int(path.rows(N)));
  }

  void add_auxiliary_losses(AuxiliaryLosses& sum) const override {
    sum.load_balancing_loss += losses_.load_balancing_loss;
    sum.z_loss += losses_.z_loss;
    sum.weighted += losses_.weighted;
    sum.moe_layers += losses_.moe_layers;
  }

 private:
  MoeActs<F> acts(Carver<F>& c, int N) const {
    const size_t n = size_t(N), C = size_t(d_.C), M = size_t(max_dispatch_rows(config_.moe, N));
    const size_t shared = d_.S > 0 ? n : 0;
    MoeActs<F> a;
    a.ln = c.take(n * C);
    a.ln_mean = c.take(n);
    a.ln_rstd = c.take(n);
    a.xp = c.take(M * C);
    a.h = c.take(M * size_t(d_.FCe));
    a.a = c.take(M * size_t(d_.Fe));
    a.y = c.take(M * C);
    a.branch = c.take(n * C);
    a.sh_h = c.take(shared * size_t(d_.FCs));
    a.sh_a = c.take(shared * size_t(d_.S));
    a.sh_y = c.take(shared * C);
    a.gate = c.take(shared);
    return a;
  }
  MoeGrads<F> grads(Carver<F>& c, int N) const {
    const size_t n = size_t(N), C = size_t(d_.C), M = size_t(max_dispatch_rows(config_.moe, N));
    MoeGrads<F> s;
    s.dln = c.take(n * C);
    s.dy = c.take(M * C);
    s.dxp = c.take(M * C);
    s.dsh = c.take(d_.S > 0 ? n * C : 0);
    s.mlp = c.take(2 * std::max(M * size_t(d_.FCe), n * size_t(d_.FCs)));
    return s;
  }

  // Expert E's tensors of ROLE: expert 0's offset plus E times a tensor's size.
  size_t expert_offset(const LayerTensors& t, TensorRole role, int e) const {
    using enum TensorRole;
    const size_t C = size_t(d_.C), FCe = size_t(d_.FCe), Fe = size_t(d_.Fe);
    const size_t numel = role == expert_fc1_weight ? FCe * C
                         : role == expert_fc1_bias ? FCe
                         : role == expert_fc2_weight ? C * Fe
                                                     : C;
    return t[role] == kAbsentTensor ? kAbsentTensor : t[role] + size_t(e) * numel;
  }
  ExpertWeights<F> weights(CpuLayerPath<F>& path, const LayerTensors& t, int e) const {
    using enum TensorRole;
    return {path.p(expert_offset(t, expert_fc1_weight, e)), path.p(expert_offset(t, expert_fc1_bias, e)),
            path.p(expert_offset(t, expert_fc2_weight, e)), path.p(expert_offset(t, expert_fc2_bias, e))};
  }
  ExpertGrads<F> grads_of(CpuTrainingPath<F>& path, const LayerTensors& t, int e) const {
    using enum TensorRole;
    return {path.g(expert_offset(t, expert_fc1_weight, e)), path.g(expert_offset(t, expert_fc1_bias, e)),
            path.g(expert_offset(t, expert_fc2_weight, e)), path.g(expert_offset(t, expert_fc2_bias, e))};
  }
  ExpertWeights<F> shared_weights(CpuLayerPath<F>& path, const LayerTensors& t) const {
    using enum TensorRole;
    return {path.p(t[shared_fc1_weight]), path.p(t[shared_fc1_bias]), path.p(t[shared_fc2_weight]),
            path.p(t[shared_fc2_bias])};
  }
  ExpertGrads<F> shared_grads(CpuTrainingPath<F>& path, const LayerTensors& t) const {
    using enum TensorRole;
    return {path.g(t[shared_fc1_weight]), path.g(t[shared_fc1_bias]), path.g(t[shared_fc2_weight]),
            path.g(t[shared_fc2_bias])};
  }

  ModelConfig config_;
  MoeDims d_;
  // The last forward's routing (see the header).
  mutable std::vector<double> logits_, probs_;
  mutable std::vector<int32_t> experts_;
  mutable DispatchPlan plan_;
  mutable AuxiliaryLosses losses_;
  mutable int B_ = 0, T_ = 0;
};

}  // namespace

template <typename F>
std::unique_ptr<CpuLayer<F>> make_cpu_moe_layer(const ModelConfig& config, int tp_size) {
  return std::make_unique<CpuMoeLayer<F>>(config, tp_size);
}

template std::unique_ptr<CpuLayer<float>> make_cpu_moe_layer<float>(const ModelConfig&, int);
template std::unique_ptr<CpuLayer<double>> make_cpu_moe_layer<double>(const ModelConfig&, int);

}  // namespace meg
