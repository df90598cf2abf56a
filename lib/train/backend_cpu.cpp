// The CPU training backend: GptModel<float> and AdamW, with gradient averaging and clipping on
// the host.
#include <cmath>
#include <span>

#include "core/error.hpp"
#include "model/pipeline.hpp"
#include "model/tensor_parallel.hpp"
#include "train/pipeline_schedule.hpp"
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
      : model_(config, parallel.tp_size() > 1 ? parallel.tp : nullptr,
               PipelineStage{parallel.pp ? parallel.pp->rank() : 0, parallel.pp_size()}, parallel.sequence_parallel),
        parallel_(parallel),
        full_tensors_(gpt_parameter_table(config)) {
    model_.init(seed);
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
    stash_.clear();
  }

  // Without a pipeline, forward and backward at once; with one, the micro-batch waits for
  // end_step(), which runs the step's micro-batches through the 1F1B schedule.
  void micro_batch(const int32_t* tokens, const int32_t* targets, int B, int T, uint64_t seed, uint64_t step,
                   uint64_t micro, int64_t micro_batches) override {
    micro_batches_ = micro_batches;
    if (pipelined()) {
      const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
      stash_.push_back({{tokens, tokens + N}, {targets, targets + N}, B, T, seed, step, micro});
      return;
    }
    model_.set_dropout_key(seed, step, micro);
    loss_sum_ += model_.forward(tokens, targets, B, T);
    model_.backward();
  }

  // The gradients are summed over the replicas' micro-batches, then divided once by all of them (in
  // float, as a single process divides by its own count), clipped by the global norm and applied.
  StepStats end_step(double lr, double clip_grad) override {
    if (pipelined()) run_pipeline();
    if (model_.sequence_parallel()) sum_sequence_parallel_grads();
    const int64_t total = micro_batches_ * parallel_.dp_size();
    if (parallel_.dp_size() > 1) parallel_.dp->all_reduce_sum(&loss_sum_, 1);
    StepStats s;
    s.loss = loss_sum_ / static_cast<double>(total);
    std::span<float> grads = sharded() ? reduce_scatter_grads() : all_reduce_grads();
    if (total > 1) cpu::scale_inplace(grads.data(), grads.size(), 1.0f / static_cast<float>(total));
    s.grad_norm = std::sqrt(sum_squares(grads, sharded() ? shard_.begin : 0));
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

  // Through the stages one after the other; the last one's loss is everyone's.
  double eval_loss(const int32_t* tokens, const int32_t* targets, int B, int T) override {
    const PipelineStage& st = model_.stage();
    const size_t n = model_.stage_floats(B, T);
    std::vector<float> input(st.first() ? 0 : n);
    if (!st.first()) parallel_.pp->recv(input.data(), n, st.stage - 1, kEvalTag);
    model_.set_training(false);
    double loss = model_.forward_stage(tokens, st.first() ? nullptr : input.data(), targets, B, T);
    model_.set_training(true);
    if (!st.last()) parallel_.pp->send(model_.stage_output(), n, st.stage + 1, kEvalTag);
    if (pipelined()) parallel_.pp->broadcast(&loss, sizeof(loss), st.stages - 1);
    return loss;
  }

  void get_state(std::vector<float>& params, std::vector<float>& m, std::vector<float>& v) const override {
    if (split_over_tp() || pipelined() || sharded())
      throw std::logic_error("CpuBackend::get_state: this rank holds a part of the state");
    params.assign(model_.params(), model_.params() + model_.num_parameters());
    m.assign(adam_->m().begin(), adam_->m().end());
    v.assign(adam_->v().begin(), adam_->v().end());
  }
  void set_state(const std::vector<float>& params, const std::vector<float>& m, const std::vector<float>& v,
                 int64_t step) override {
    const std::vector<float> local = shard(params);
    std::copy(local.begin(), local.end(), model_.params());
    adam_->restore(my_shard(shard(m)), my_shard(shard(v)), step);
  }
  int64_t optimizer_step() const override { return adam_->step_count(); }

  void get_local_state(LocalState& state) const override {
    state.tensors = model_.tensors();
    state.params.assign(model_.params(), model_.params() + model_.num_parameters());
    state.m.assign(adam_->m().begin(), adam_->m().end());
    state.v.assign(adam_->v().begin(), adam_->v().end());
    state.moments_sharded = sharded();
    state.shard_begin = sharded() ? shard_.begin : 0;
    state.local_numel = model_.num_parameters();
  }

 private:
  static constexpr int kEvalTag = 3;

  // A micro-batch waiting for the pipeline schedule.
  struct Stashed {
    std::vector<int32_t> tokens, targets;
    int B, T;
    uint64_t seed, step, micro;
  };

  bool sharded() const { return parallel_.distributed_optimizer && parallel_.dp_size() > 1; }
  bool pipelined() const { return parallel_.pp_size() > 1; }
  bool split_over_tp() const { return parallel_.tp_size() > 1; }

  // The last stage's copy of a tied word embedding (the first stage's counts; the copies are equal).
  bool tied_copy(const ParamTensor& t) const {
    const PipelineStage& st = model_.stage();
    return pipelined() && st.last() && !st.first() && t.name == "embedding.word_embeddings.weight";
  }

  // 1F1B over the stashed micro-batches. A stage keeps one set of activations, so a backward whose
  // forward is not the last one run recomputes it first (from the kept input: the same dropout
  // masks, so the same values). Then the tied embedding's two copies add their gradients.
  void run_pipeline() {
    const PipelineStage& st = model_.stage();
    StageOps ops;
    ops.message_floats = model_.stage_floats(stash_.front().B, stash_.front().T);
    int current = -1;  // the micro-batch whose activations the model holds
    const auto forward = [&](int i, const float* input) {
      const Stashed& b = stash_[size_t(i)];
      model_.set_dropout_key(b.seed, b.step, b.micro);
      const double loss = model_.forward_stage(b.tokens.data(), input, b.targets.data(), b.B, b.T);
      current = i;
      return loss;
    };
    ops.forward = [&](int i, const float* input) {
      const double loss = forward(i, input);
      if (st.last()) loss_sum_ += loss;
      return model_.stage_output();
    };
    ops.backward = [&](int i, const float* input, const float* output_grad) {
      if (current != i) forward(i, input);
      model_.backward_stage(output_grad);
      current = -1;
      return model_.stage_input_grad();
    };
    run_one_f_one_b(*parallel_.pp, static_cast<int>(stash_.size()), ops);
    parallel_.pp->broadcast(&loss_sum_, sizeof(loss_sum_), st.stages - 1);
    if (model_.config().tie_embeddings && (st.first() || st.last())) {
      const ParamTensor& t = model_.tensor("embedding.word_embeddings.weight");
      float* g = model_.grads() + t.offset;
      std::vector<float> other(t.numel);
      const int peer = st.first() ? st.stages - 1 : 0;
      parallel_.pp->send_recv(g, t.numel, peer, kEmbeddingTag, other.data(), t.numel, peer, kEmbeddingTag);
      for (size_t k = 0; k < t.numel; ++k) g[k] += other[k];  // a + b on one end, b + a on the other: equal
    }
  }
  static constexpr int kEmbeddingTag = 4;

  // With sequence parallelism the norms' and the position embedding's gradients cover each rank's
  // rows of the stream: summed over the group, they are the whole gradient, the same on every rank.
  void sum_sequence_parallel_grads() {
    for (const auto& t : model_.tensors())
      if (t.name.find("layernorm") != std::string::npos || t.name == "embedding.position_embeddings.weight")
        parallel_.tp->all_reduce_sum(model_.grads() + t.offset, t.numel);
  }

  // The sum of squares of the whole model's gradients from GRADS, this rank's elements [BASE,
  // BASE + size) of its flat array (a shard of it with the distributed optimizer): split tensors
  // summed over the tensor-parallel group, replicated ones counted once, the shards and the stages
  // summed, the tied copy left out.
  double sum_squares(std::span<const float> grads, size_t base) const {
    if (!split_over_tp() && !pipelined() && !sharded()) return cpu::grad_sum_squares(grads.data(), grads.size());
    double sums[2] = {0, 0};  // split over the tensor-parallel group, replicated
    for (const auto& t : model_.tensors()) {
      const size_t begin = std::max(t.offset, base), end = std::min(t.offset + t.numel, base + grads.size());
      if (begin >= end || tied_copy(t)) continue;
      const bool is_split = split_over_tp() && tp_split_of(model_.config(), t).split != TpSplit::replicated;
      sums[is_split ? 0 : 1] += cpu::grad_sum_squares(grads.data() + (begin - base), end - begin);
    }
    if (sharded()) parallel_.dp->all_reduce_sum(sums, 2);
    if (split_over_tp()) parallel_.tp->all_reduce_sum(sums, 1);
    double sum = sums[0] + sums[1];
    if (pipelined()) parallel_.pp->all_reduce_sum(&sum, 1);
    return sum;
  }

  // This rank's part (its stage's tensors, its tensor-parallel slices) of a whole-model array.
  std::vector<float> shard(const std::vector<float>& full) const {
    if (!split_over_tp() && !pipelined()) return full;
    const ModelConfig& c = model_.config();
    std::vector<float> tp_local = full;
    auto table = full_tensors_;
    if (split_over_tp()) {
      table = gpt_parameter_table(c, parallel_.tp_size());
      tp_local.assign(table.back().offset + table.back().numel, 0.0f);
      shard_parameters(c, parallel_.tp_size(), parallel_.tp->rank(), full.data(), tp_local.data());
    }
    std::vector<float> local(model_.num_parameters());
    copy_stage(table, model_.tensors(), tp_local.data(), local.data(), true);
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
  Shard shard_;                              // with the distributed optimizer
  std::vector<float> padded_, shard_grads_;  // its buffers: the padded flat array, the summed shard
  std::vector<Stashed> stash_;               // with a pipeline: the step's micro-batches
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
