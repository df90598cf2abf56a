// The CPU training backend: GptModel<float> and AdamW, with gradient averaging and clipping on
// the host.
#include <cmath>
#include <span>

#include "core/error.hpp"
#include "train/backend.hpp"

namespace meg {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp16") return Precision::fp16;
  input_error("--precision '{}': expected bf16, fp16 or fp32", name);
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

namespace {

class CpuBackend final : public TrainBackend {
 public:
  CpuBackend(const ModelConfig& config, const AdamWOptions& adam, uint64_t seed) : model_(config) {
    model_.init(seed);
    std::vector<ParamGroup> groups;
    for (const auto& t : model_.tensors()) groups.push_back({t.offset, t.offset + t.numel, t.weight_decay});
    adam_ = std::make_unique<AdamW>(model_.num_parameters(), std::move(groups), adam);
  }

  const std::vector<ParamTensor>& tensors() const override { return model_.tensors(); }
  size_t num_parameters() const override { return model_.num_parameters(); }
  std::string describe() const override { return "cpu fp32"; }

  void begin_step() override {
    model_.zero_grad();
    loss_sum_ = 0;
    micro_batches_ = 0;
  }

  void micro_batch(const int32_t* tokens, const int32_t* targets, int B, int T, uint64_t seed, uint64_t step,
                   uint64_t micro, int64_t micro_batches) override {
    model_.set_dropout_key(seed, step, micro);
    loss_sum_ += model_.forward(tokens, targets, B, T);
    model_.backward();
    micro_batches_ = micro_batches;
  }

  StepStats end_step(double lr, double clip_grad) override {
    std::span<float> grads(model_.grads(), model_.num_parameters());
    // The sum over the replicas' micro-batches, then one division by all of them (in float, as a
    // single process divides by its own count).
    const int64_t total = micro_batches_ * dp_size();
    if (dp_size() > 1) {
      dp_->all_reduce_sum(grads.data(), grads.size());
      dp_->all_reduce_sum(&loss_sum_, 1);
    }
    if (total > 1) {
      const float scale = 1.0f / static_cast<float>(total);
      for (float& g : grads) g *= scale;
    }
    StepStats s;
    s.grad_norm = clip_grad_norm(grads, clip_grad);
    s.loss = loss_sum_ / static_cast<double>(total);
    if (!std::isfinite(s.grad_norm) || !std::isfinite(s.loss)) return s;
    adam_->step(std::span<float>(model_.params(), model_.num_parameters()), grads, lr);
    return s;
  }

  double eval_loss(const int32_t* tokens, const int32_t* targets, int B, int T) override {
    model_.set_training(false);
    const double loss = model_.forward(tokens, targets, B, T);
    model_.set_training(true);
    return loss;
  }

  void get_state(std::vector<float>& params, std::vector<float>& m, std::vector<float>& v) const override {
    params.assign(model_.params(), model_.params() + model_.num_parameters());
    m.assign(adam_->m().begin(), adam_->m().end());
    v.assign(adam_->v().begin(), adam_->v().end());
  }
  void set_state(const std::vector<float>& params, const std::vector<float>& m, const std::vector<float>& v,
                 int64_t step) override {
    std::copy(params.begin(), params.end(), model_.params());
    adam_->restore(m, v, step);
  }
  int64_t optimizer_step() const override { return adam_->step_count(); }

 private:
  GptModel<float> model_;
  std::unique_ptr<AdamW> adam_;
  double loss_sum_ = 0;
  int64_t micro_batches_ = 0;
};

}  // namespace

std::unique_ptr<TrainBackend> make_cpu_backend(const ModelConfig& config, const AdamWOptions& adam, uint64_t seed) {
  return std::make_unique<CpuBackend>(config, adam, seed);
}

#ifndef MEG_CUDA
std::unique_ptr<TrainBackend> make_cuda_backend(const ModelConfig&, const AdamWOptions&, uint64_t, Precision,
                                                const std::string&) {
  input_error("--device cuda: this build of meg has no CUDA support; use --device cpu");
}
#endif

}  // namespace meg
