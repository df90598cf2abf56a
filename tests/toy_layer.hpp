// A layer kind defined only here, in the test tree: 'T', y = x + W2 tanh(W1 norm(x)) (+ biases
// with use-bias), W1 [C, C] column-parallel and W2 [C, C] row-parallel, a block of its own. It
// proves that a kind needs nothing of lib/ beyond its registration (model/layer_spec.hpp for its
// tensors, model/cpu_layers.hpp for its CPU implementation): the models, the parameter table,
// initialisation, tensor- and pipeline-parallel cuts and checkpoints take it as they are.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/cpu_layers.hpp"
#include "model/layer_spec.hpp"
#include "ops/cpu/ops.hpp"

namespace meg::toy {

inline constexpr char kSymbol = 'T';

inline std::vector<ParamTensor> tensors(const ModelConfig& c, const std::string& pre) {
  using enum TensorRole;
  const int64_t C = c.hidden_size;
  std::vector<ParamTensor> out;
  add_norm_tensors(out, c, pre + "toy.layernorm", norm_weight, norm_bias);
  add_linear_tensors(out, c, pre + "toy.linear_fc1", fc1_weight, fc1_bias, C, C, ParamInit::normal,
                     {TpSplit::column_parallel, {C}});
  add_linear_tensors(out, c, pre + "toy.linear_fc2", fc2_weight, fc2_bias, C, C, ParamInit::normal_scaled,
                     {TpSplit::row_parallel, {C}});
  return out;
}

template <typename F>
class CpuToyLayer final : public CpuLayer<F> {
 public:
  CpuToyLayer(const ModelConfig& c, int tp_size) : C_(int(c.hidden_size)), D_(int(c.hidden_size) / tp_size) {}

  // ln [N, C], its mean and rstd [N], u = tanh(W1 ln) [N, D]; the backward's dln [N, C], du [N, D].
  size_t activation_size(const CpuRows& rows) const override { return size_t(rows.N) * (C_ + 2 + D_); }
  size_t scratch_size(int N) const override { return size_t(N) * (C_ + D_); }

  void forward(CpuLayerPath<F>& path, const LayerPlace& at, const CpuRows& rows, F* acts, const F* x,
               F* out) const override {
    using enum TensorRole;
    const LayerTensors& t = at.tensors;
    const int N = rows.N;
    F *ln = acts, *mean = ln + size_t(N) * C_, *rstd = mean + N, *u = rstd + N;
    path.norm_rows(ln, mean, rstd, x, t[norm_weight], t[norm_bias], N);
    cpu::linear_forward(u, ln, path.p(t[fc1_weight]), path.p(t[fc1_bias]), N, C_, D_);
    for (size_t i = 0; i < size_t(N) * D_; ++i) u[i] = std::tanh(u[i]);
    F* branch = path.row_parallel_forward(u, t[fc2_weight], t[fc2_bias], N, D_);
    path.hidden_dropout(branch, N, block_dropout_sites(at.block) + 2);
    const size_t n = path.rows(N) * size_t(C_);
    for (size_t i = 0; i < n; ++i) out[i] = x[i] + branch[i];
  }

  void backward(CpuTrainingPath<F>& path, const LayerPlace& at, const CpuRows& rows, F* acts, F* scratch,
                const F* x, F* dres) const override {
    using enum TensorRole;
    const LayerTensors& t = at.tensors;
    const int N = rows.N;
    const F *ln = acts, *mean = ln + size_t(N) * C_, *rstd = mean + N, *u = rstd + N;
    F *dln = scratch, *du = dln + size_t(N) * C_;
    const F* dbranch = path.branch_grad(dres, N, block_dropout_sites(at.block) + 2);
    std::fill(du, du + size_t(N) * D_, F(0));
    cpu::linear_backward(du, path.g(t[fc2_weight]), path.g(t[fc2_bias]), dbranch, u, path.p(t[fc2_weight]), N, D_,
                         C_);
    for (size_t i = 0; i < size_t(N) * D_; ++i) du[i] *= F(1) - u[i] * u[i];
    std::fill(dln, dln + size_t(N) * C_, F(0));
    cpu::linear_backward(dln, path.g(t[fc1_weight]), path.g(t[fc1_bias]), du, ln, path.p(t[fc1_weight]), N, C_, D_);
    path.norm_backward(dres, path.exit_tp(dln, N), x, t[norm_weight], t[norm_bias], mean, rstd, int(path.rows(N)));
  }

 private:
  int C_, D_;  // the model's width and this rank's columns of W1
};

// Registers the kind once (every test that uses it calls this).
inline void register_toy_layer() {
  static const bool done = [] {
    register_layer_kind({kSymbol, "toy", 0, tensors});
    register_cpu_layer(
        kSymbol, [](const ModelConfig& c, int tp) { return std::make_unique<CpuToyLayer<float>>(c, tp); },
        [](const ModelConfig& c, int tp) { return std::make_unique<CpuToyLayer<double>>(c, tp); });
    return true;
  }();
  (void)done;
}

}  // namespace meg::toy
