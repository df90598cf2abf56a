// The CPU training backend: GptModel<float> and AdamW, with gradient averaging and clipping on
// the host.
#include <cmath>
#include <span>

#include "core/error.hpp"
#include "model/tensor_parallel.hpp"
#include "ops/cpu/ops.hpp"
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
  CpuBackend(const ModelConfig& config, const AdamWOptions& adam, uint64_t seed, const ParallelGroups& parallel)
      : model_(config, parallel.tp_size() > 1 ? parallel.tp : nullptr),
        parallel_(parallel),
        full_tensors_(gpt_parameter_table(config)) {
    if (parallel_.tp_size() > 1 && parallel_.distributed_optimizer && parallel_.dp_size() > 1)
      input_error("--use-distributed-optimizer with --tp {}: the distributed optimizer does not shard a "
                  "tensor-parallel model yet",
                  parallel_.tp_size());
    model_.init(seed);
    if (parallel_.tp_size() > 1)
      for (const auto& t : full_tensors_) split_.push_back(tp_split_of(config, t).split != TpSplit::replicated);
    const size_t n = model_.num_parameters();
    std::vector<ParamGroup> groups;
    for (const auto& t : model_.tensors()) groups.push_back({t.offset, t.offset + t.numel, t.weight_decay});
    if (sharded()) {
      shard_ = optimizer_shard(n, parallel_.dp_size(), parallel_.dp->rank());
      padded_.assign(shard_.size * static_cast<size_t>(parallel_.dp_size()), 0.0f);
      shard_grads_.assign(shard_.size, 0.0f);
      adam_ = std::make_unique<AdamW>(shard_.size, shard_groups(groups, n, shard_), adam);
    } else {
      adam_ = std::make_unique<AdamW>(n, std::move(groups), adam);
    }
  }

  const std::vector<ParamTensor>& tensors() const override { return full_tensors_; }
  size_t num_parameters() const override { return full_tensors_.back().offset + full_tensors_.back().numel; }
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

  // The gradients are summed over the replicas' micro-batches, then divided once by all of them (in
  // float, as a single process divides by its own count), clipped by the global norm and applied.
  StepStats end_step(double lr, double clip_grad) override {
    const int64_t total = micro_batches_ * parallel_.dp_size();
    if (parallel_.dp_size() > 1) parallel_.dp->all_reduce_sum(&loss_sum_, 1);
    StepStats s;
    s.loss = loss_sum_ / static_cast<double>(total);
    std::span<float> grads = sharded() ? reduce_scatter_grads() : all_reduce_grads();
    if (total > 1) cpu::scale_inplace(grads.data(), grads.size(), 1.0f / static_cast<float>(total));
    double sum = parallel_.tp_size() > 1 ? tp_sum_squares(grads) : cpu::grad_sum_squares(grads.data(), grads.size());
    if (sharded()) parallel_.dp->all_reduce_sum(&sum, 1);
    s.grad_norm = std::sqrt(sum);
    if (!std::isfinite(s.grad_norm) || !std::isfinite(s.loss)) return s;
    clip_grads_to(grads, s.grad_norm, clip_grad);
    if (!sharded()) {
      adam_->step(std::span<float>(model_.params(), model_.num_parameters()), grads, lr);
      return s;
    }
    // Update this replica's shard, then every replica gathers all the shards.
    const size_t n = model_.num_parameters();
    std::copy(model_.params(), model_.params() + n, padded_.begin());
    std::vector<float> shard(padded_.begin() + static_cast<std::ptrdiff_t>(shard_.begin),
                             padded_.begin() + static_cast<std::ptrdiff_t>(shard_.begin + shard_.size));
    adam_->step(shard, grads, lr);
    parallel_.dp->all_gather(padded_.data(), shard.data(), shard_.size);
    std::copy(padded_.begin(), padded_.begin() + static_cast<std::ptrdiff_t>(n), model_.params());
    return s;
  }

  double eval_loss(const int32_t* tokens, const int32_t* targets, int B, int T) override {
    model_.set_training(false);
    const double loss = model_.forward(tokens, targets, B, T);
    model_.set_training(true);
    return loss;
  }

  void get_state(std::vector<float>& params, std::vector<float>& m, std::vector<float>& v) const override {
    params = unshard({model_.params(), model_.num_parameters()});
    m = unshard(gather(adam_->m()));
    v = unshard(gather(adam_->v()));
  }
  void set_state(const std::vector<float>& params, const std::vector<float>& m, const std::vector<float>& v,
                 int64_t step) override {
    const std::vector<float> local = shard(params);
    std::copy(local.begin(), local.end(), model_.params());
    adam_->restore(my_shard(shard(m)), my_shard(shard(v)), step);
  }
  int64_t optimizer_step() const override { return adam_->step_count(); }

 private:
  bool sharded() const { return parallel_.distributed_optimizer && parallel_.dp_size() > 1; }

  // Tensor parallelism: the squares of the split tensors' gradients are summed over the group,
  // the replicated ones (the same on every rank) counted once.
  double tp_sum_squares(std::span<const float> grads) const {
    double split = 0, replicated = 0;
    for (size_t i = 0; i < split_.size(); ++i) {
      const auto& t = model_.tensors()[i];
      (split_[i] ? split : replicated) += cpu::grad_sum_squares(grads.data() + t.offset, t.numel);
    }
    parallel_.tp->all_reduce_sum(&split, 1);
    return split + replicated;
  }
  // A flat array of the whole model from this rank's shard and the group's (all of them call it),
  // and the reverse: the layout of checkpoints, whatever the tensor-parallel size.
  std::vector<float> unshard(std::span<const float> local) const {
    const int tp = parallel_.tp_size();
    if (tp == 1) return {local.begin(), local.end()};
    std::vector<float> all(local.size() * static_cast<size_t>(tp));
    parallel_.tp->all_gather(all.data(), local.data(), local.size());
    std::vector<const float*> parts;
    for (int r = 0; r < tp; ++r) parts.push_back(all.data() + static_cast<size_t>(r) * local.size());
    std::vector<float> full(num_parameters());
    unshard_parameters(model_.config(), tp, parts, full.data());
    return full;
  }
  std::vector<float> shard(const std::vector<float>& full) const {
    const int tp = parallel_.tp_size();
    if (tp == 1) return full;
    std::vector<float> local(model_.num_parameters());
    shard_parameters(model_.config(), tp, parallel_.tp->rank(), full.data(), local.data());
    return local;
  }

  std::span<float> all_reduce_grads() {
    std::span<float> grads(model_.grads(), model_.num_parameters());
    if (parallel_.dp_size() > 1) parallel_.dp->all_reduce_sum(grads.data(), grads.size());
    return grads;
  }
  // This replica's shard of the gradients summed over the replicas.
  std::span<float> reduce_scatter_grads() {
    const size_t n = model_.num_parameters();
    std::copy(model_.grads(), model_.grads() + n, padded_.begin());
    std::fill(padded_.begin() + static_cast<std::ptrdiff_t>(n), padded_.end(), 0.0f);
    parallel_.dp->reduce_scatter_sum(shard_grads_.data(), padded_.data(), shard_.size);
    return shard_grads_;
  }
  // A moment of the whole model (the shards gathered, the padding cut off), or the moment itself.
  std::vector<float> gather(std::span<const float> moment) const {
    if (!sharded()) return {moment.begin(), moment.end()};
    std::vector<float> all(shard_.size * static_cast<size_t>(parallel_.dp_size()));
    parallel_.dp->all_gather(all.data(), moment.data(), shard_.size);
    all.resize(model_.num_parameters());
    return all;
  }
  // This replica's part of a whole-model moment (zero over the padding).
  std::vector<float> my_shard(const std::vector<float>& moment) const {
    if (!sharded()) return moment;
    std::vector<float> part(shard_.size, 0.0f);
    for (size_t i = 0; i < shard_.size && shard_.begin + i < moment.size(); ++i) part[i] = moment[shard_.begin + i];
    return part;
  }

  GptModel<float> model_;
  ParallelGroups parallel_;
  std::vector<ParamTensor> full_tensors_;
  std::unique_ptr<AdamW> adam_;
  std::vector<bool> split_;                     // tensor parallelism: which tensors are split
  Shard shard_;                                 // with the distributed optimizer
  std::vector<float> padded_, shard_grads_;     // its buffers: the padded flat array, the summed shard
  double loss_sum_ = 0;
  int64_t micro_batches_ = 0;
};

}  // namespace

std::unique_ptr<TrainBackend> make_cpu_backend(const ModelConfig& config, const AdamWOptions& adam, uint64_t seed,
                                               const ParallelGroups& parallel) {
  return std::make_unique<CpuBackend>(config, adam, seed, parallel);
}

#ifndef MEG_CUDA
std::unique_ptr<TrainBackend> make_cuda_backend(const ModelConfig&, const AdamWOptions&, uint64_t, Precision,
                                                const std::string&, const ParallelGroups&) {
  input_error("--device cuda: this build of meg has no CUDA support; use --device cpu");
}
#endif

}  // namespace meg
