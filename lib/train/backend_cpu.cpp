// The CPU training backend: GptModel<float> and AdamW, with gradient averaging and clipping on
// the host.
//
// A rank's parameters and gradients are two flat arrays: its model chunks' (one without virtual
// pipeline stages), chunk after chunk (model/pipeline.hpp's chunks_table), which the chunks' models
// view. The optimizer, the gradient reductions and norm, and the checkpoint shards work on them.
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <span>
#include <stdexcept>

#include "core/error.hpp"
#include "model/pipeline.hpp"
#include "model/rank_part.hpp"
#include "model/tensor_parallel.hpp"
#include "train/pipeline_schedule.hpp"
#include "ops/cpu/ops.hpp"
#include "optim/grad_norm.hpp"
#include "train/backend.hpp"

namespace meg {

namespace {

// One model chunk (a virtual stage, or the rank's stage, or the whole model) with one GptModel per
// micro-batch in flight, all viewing the chunk's parameters and gradients: each keeps its
// micro-batch's activations from the forward to the backward (Megatron's stashing; no recompute).
class ChunkModels {
 public:
  ChunkModels(const ModelConfig& config, const ParallelGroups& parallel, PipelineStage stage, float* params,
              float* grads)
      : config_(config), parallel_(parallel), stage_(stage), params_(params), grads_(grads) {
    add_model();
  }

  // The first model: for evaluation, and for training without a pipeline.
  GptModel<float>& model() { return *models_.front(); }
  // A model free for MICRO's forward (a new one when every model holds a micro-batch).
  GptModel<float>& start(int micro) {
    auto free = std::find(holds_.begin(), holds_.end(), -1);
    if (free == holds_.end()) free = add_model();
    *free = micro;
    return *models_[size_t(free - holds_.begin())];
  }
  // The model holding MICRO's forward, free again once the backward it is taken for has run.
  GptModel<float>& finish(int micro) {
    const auto held = std::find(holds_.begin(), holds_.end(), micro);
    if (held == holds_.end()) throw std::logic_error("ChunkModels::finish: a backward without its forward");
    *held = -1;
    return *models_[size_t(held - holds_.begin())];
  }

 private:
  std::vector<int>::iterator add_model() {
    models_.push_back(std::make_unique<GptModel<float>>(config_, parallel_.tp_size() > 1 ? parallel_.tp : nullptr,
                                                        stage_, parallel_.sequence_parallel, params_, grads_));
    holds_.push_back(-1);
    return holds_.end() - 1;
  }

  ModelConfig config_;
  ParallelGroups parallel_;
  PipelineStage stage_;
  float *params_, *grads_;
  std::vector<std::unique_ptr<GptModel<float>>> models_;
  std::vector<int> holds_;  // the micro-batch whose forward each model holds; -1: none
};

class CpuBackend final : public TrainBackend {
 public:
  CpuBackend(const ModelConfig& config, const AdamWOptions& adam, uint64_t seed, const ParallelGroups& parallel)
      : config_(config), parallel_(parallel) {
    config_.validate();
    full_tensors_ = gpt_parameter_table(config_);
    const auto chunks = rank_chunks(parallel_.pp ? parallel_.pp->rank() : 0, parallel_.pp_size(),
                                    parallel_.virtual_stages);
    tensors_ = chunks_table(config_, chunks, split_over_tp() ? gpt_parameter_table(config_, parallel_.tp_size())
                                                             : full_tensors_);
    const size_t n = table_size(tensors_);
    params_.assign(n, 0.0f);
    grads_.assign(n, 0.0f);
    size_t offset = 0;  // chunk v's place in the flat arrays
    for (const PipelineStage& stage : chunks) {
      chunks_.emplace_back(config_, parallel_, stage, params_.data() + offset, grads_.data() + offset);
      chunks_.back().model().init(seed);
      offset += chunks_.back().model().num_parameters();
    }
    std::vector<ParamGroup> groups;
    for (const auto& t : tensors_) groups.push_back({t.offset, t.offset + t.numel, t.weight_decay});
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
  size_t num_parameters() const override { return table_size(full_tensors_); }
  std::string describe() const override { return "cpu fp32"; }

  void begin_step() override {
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    loss_sum_ = 0;
    aux_sums_ = {};
    micro_batches_ = 0;
    stash_.clear();
  }

  // Without a pipeline, forward and backward at once; with one, the micro-batch waits for
  // end_step(), which runs the step's micro-batches through the pipeline schedule.
  void micro_batch(const int32_t* tokens, const int32_t* targets, int B, int T, uint64_t seed, uint64_t step,
                   uint64_t micro, int64_t micro_batches) override {
    micro_batches_ = micro_batches;
    if (pipelined()) {
      const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
      stash_.push_back({{tokens, tokens + N}, {targets, targets + N}, B, T, seed, step, micro});
      return;
    }
    GptModel<float>& model = chunks_.front().model();
    model.set_dropout_key(seed, step, micro);
    loss_sum_ += model.forward(tokens, targets, B, T);
    const AuxiliaryLosses aux = model.auxiliary_losses();
    if (aux.moe_layers > 0) {
      aux_sums_[0] += aux.load_balancing_loss / double(aux.moe_layers);
      aux_sums_[1] += aux.z_loss / double(aux.moe_layers);
    }
    model.backward();
  }

  // The gradients are summed over the replicas' micro-batches, then divided once by all of them (in
  // float, as a single process divides by its own count), clipped by the global norm and applied.
  StepStats end_step(double lr, double clip_grad) override {
    if (pipelined()) run_pipeline();
    if (sequence_parallel()) sum_sequence_parallel_grads();
    const int64_t total = micro_batches_ * parallel_.dp_size();
    if (parallel_.dp_size() > 1) parallel_.dp->all_reduce_sum(&loss_sum_, 1);
    StepStats s;
    s.loss = loss_sum_ / static_cast<double>(total);
    if (const MoeConfig& moe = chunks_.front().model().config().moe; moe.enabled()) {
      if (parallel_.dp_size() > 1) parallel_.dp->all_reduce_sum(aux_sums_.data(), aux_sums_.size());
      if (moe.aux_loss_on()) s.aux_losses["load_balancing_loss"] = aux_sums_[0] / double(total);
      if (moe.z_loss_on()) s.aux_losses["z_loss"] = aux_sums_[1] / double(total);
    }
    std::span<float> grads = sharded() ? reduce_scatter_grads() : all_reduce_grads();
    if (total > 1) cpu::scale_inplace(grads.data(), grads.size(), 1.0f / static_cast<float>(total));
    s.grad_norm = std::sqrt(sum_squares(grads, sharded() ? shard_.begin : 0));
    if (!std::isfinite(s.grad_norm) || !std::isfinite(s.loss)) return s;
    clip_grads_to(grads, s.grad_norm, clip_grad);
    if (!sharded()) {
      adam_->step(params_, grads, lr);
      return s;
    }
    // Update this replica's shard, then every replica gathers all the shards.
    std::copy(params_.begin(), params_.end(), padded_.begin());
    std::vector<float> shard(padded_.begin() + static_cast<std::ptrdiff_t>(shard_.begin),
                             padded_.begin() + static_cast<std::ptrdiff_t>(shard_.begin + shard_.size));
    adam_->step(shard, grads, lr);
    parallel_.dp->all_gather(padded_.data(), shard.data(), shard_.size);
    std::copy(padded_.begin(), padded_.begin() + static_cast<std::ptrdiff_t>(params_.size()), params_.begin());
    return s;
  }

  // Through the virtual stages (or stages) one after the other, each rank's chunks in turn; the last
  // one's loss is everyone's.
  double eval_loss(const int32_t* tokens, const int32_t* targets, int B, int T) override {
    const int S = parallel_.pp_size(), s = parallel_.pp ? parallel_.pp->rank() : 0;
    std::vector<float> input;
    double loss = 0;
    for (ChunkModels& chunk : chunks_) {
      GptModel<float>& model = chunk.model();
      const PipelineStage& st = model.stage();
      const size_t n = model.stage_floats(B, T);
      if (!st.first()) {
        input.resize(n);
        parallel_.pp->recv(input.data(), n, (s + S - 1) % S, kEvalTag);
      }
      model.set_training(false);
      const double chunk_loss = model.forward_stage(tokens, st.first() ? nullptr : input.data(), targets, B, T);
      model.set_training(true);
      if (st.last()) loss = chunk_loss;
      else parallel_.pp->send(model.stage_output(), n, (s + 1) % S, kEvalTag);
    }
    if (pipelined()) parallel_.pp->broadcast(&loss, sizeof(loss), S - 1);
    return loss;
  }

  void get_state(std::vector<float>& params, std::vector<float>& m, std::vector<float>& v) const override {
    if (split_over_tp() || pipelined() || sharded())
      throw std::logic_error("CpuBackend::get_state: this rank holds a part of the state");
    params = params_;
    m.assign(adam_->m().begin(), adam_->m().end());
    v.assign(adam_->v().begin(), adam_->v().end());
  }
  void set_state(const std::vector<float>& params, const std::vector<float>& m, const std::vector<float>& v,
                 int64_t step) override {
    const std::vector<float> local = shard(params);
    std::copy(local.begin(), local.end(), params_.begin());  // in place: the chunks' models view params_
    adam_->restore(my_shard(shard(m)), my_shard(shard(v)), step);
  }
  int64_t optimizer_step() const override { return adam_->step_count(); }

  void get_local_state(LocalState& state) const override {
    state.tensors = tensors_;
    state.params = params_;
    state.m.assign(adam_->m().begin(), adam_->m().end());
    state.v.assign(adam_->v().begin(), adam_->v().end());
    state.moments_sharded = sharded();
    state.shard_begin = sharded() ? shard_.begin : 0;
    state.local_numel = params_.size();
  }

 private:
  static constexpr int kEvalTag = 3;
  static constexpr int kEmbeddingTag = 4;

  // A micro-batch waiting for the pipeline schedule.
  struct Stashed {
    std::vector<int32_t> tokens, targets;
    int B, T;
    uint64_t seed, step, micro;
  };

  bool sharded() const { return parallel_.distributed_optimizer && parallel_.dp_size() > 1; }
  bool pipelined() const { return parallel_.pp_size() > 1; }
  bool split_over_tp() const { return parallel_.tp_size() > 1; }
  bool sequence_parallel() const { return parallel_.sequence_parallel && split_over_tp(); }
  bool last_rank() const { return pipelined() && parallel_.pp->rank() == parallel_.pp_size() - 1; }
  const ParamTensor& word_embedding() const {
    return *std::find_if(tensors_.begin(), tensors_.end(),
                         [](const ParamTensor& t) { return t.role == TensorRole::word_embeddings; });
  }

  // The last stage's copy of a tied word embedding (the first stage's counts; the copies are equal).
  // With virtual stages it is the last rank's last chunk's: no other chunk of it holds the tensor.
  bool tied_copy(const ParamTensor& t) const { return last_rank() && t.role == TensorRole::word_embeddings; }

  // The pipeline schedule over the stashed micro-batches: 1F1B, or interleaved with virtual stages.
  // Then the tied embedding's two copies, on the first and the last virtual stage, add their
  // gradients.
  void run_pipeline() {
    const int S = parallel_.pp_size(), s = parallel_.pp->rank(), V = parallel_.virtual_stages;
    const int M = static_cast<int>(stash_.size());
    StageOps ops;
    ops.message_floats = chunks_.front().model().stage_floats(stash_.front().B, stash_.front().T);
    ops.forward = [&](int chunk, int micro, const float* input) {
      const Stashed& b = stash_[size_t(micro)];
      GptModel<float>& model = chunks_[size_t(chunk)].start(micro);
      model.set_dropout_key(b.seed, b.step, b.micro);
      const double loss = model.forward_stage(b.tokens.data(), input, b.targets.data(), b.B, b.T);
      if (model.stage().last()) loss_sum_ += loss;
      return model.stage_output();
    };
    ops.backward = [&](int chunk, int micro, const float* output_grad) {
      GptModel<float>& model = chunks_[size_t(chunk)].finish(micro);
      model.backward_stage(output_grad);
      return model.stage_input_grad();
    };
    run_pipeline_schedule(*parallel_.pp, V, V > 1 ? interleaved_order(s, S, V, M) : one_f_one_b_order(s, S, M), ops);
    parallel_.pp->broadcast(&loss_sum_, sizeof(loss_sum_), S - 1);
    if (config_.tie_embeddings && (s == 0 || s == S - 1)) {
      const ParamTensor& t = word_embedding();
      float* g = grads_.data() + t.offset;
      std::vector<float> other(t.numel);
      const int peer = s == 0 ? S - 1 : 0;
      parallel_.pp->send_recv(g, t.numel, peer, kEmbeddingTag, other.data(), t.numel, peer, kEmbeddingTag);
      for (size_t k = 0; k < t.numel; ++k) g[k] += other[k];  // a + b on one end, b + a on the other: equal
    }
  }

  // With sequence parallelism the norms' and the position embedding's gradients cover each rank's
  // rows of the stream: summed over the group, they are the whole gradient, the same on every rank.
  void sum_sequence_parallel_grads() {
    for (const auto& t : tensors_)
      if (t.sequence_parallel)
        parallel_.tp->all_reduce_sum(grads_.data() + t.offset, t.numel);
  }

  // The sum of squares of the whole model's gradients (optim/grad_norm.hpp) from GRADS, this rank's
  // elements [BASE, BASE + size) of its flat array (a shard of it with the distributed optimizer).
  double sum_squares(std::span<const float> grads, size_t base) const {
    const GradNormRanges r = grad_norm_ranges(tensors_, split_over_tp(), base, base + grads.size(),
                                              [this](const ParamTensor& t) { return tied_copy(t); });
    double sums[2] = {0, 0};  // split, replicated
    for (int kind = 0; kind < 2; ++kind)
      for (const GradRange& g : kind == 0 ? r.split : r.replicated)
        sums[kind] += cpu::grad_sum_squares(grads.data() + (g.begin - base), g.end - g.begin);
    return global_sum_squares(sums[0], sums[1], sharded() ? parallel_.dp : nullptr, parallel_.tp, parallel_.pp);
  }

  // This rank's part (its chunks' tensors, its tensor-parallel slices) of a whole-model array.
  std::vector<float> shard(const std::vector<float>& full) const {
    if (!split_over_tp() && !pipelined()) return full;
    return rank_part(config_, parallel_.tp_size(), split_over_tp() ? parallel_.tp->rank() : 0, tensors_, full);
  }

  std::span<float> all_reduce_grads() {
    if (parallel_.dp_size() > 1) parallel_.dp->all_reduce_sum(grads_.data(), grads_.size());
    return grads_;
  }
  // This replica's shard of the gradients summed over the replicas.
  std::span<float> reduce_scatter_grads() {
    std::copy(grads_.begin(), grads_.end(), padded_.begin());
    std::fill(padded_.begin() + static_cast<std::ptrdiff_t>(grads_.size()), padded_.end(), 0.0f);
    parallel_.dp->reduce_scatter_sum(shard_grads_.data(), padded_.data(), shard_.size);
    return shard_grads_;
  }
  // This replica's part of a whole-model moment (zero over the padding).
  std::vector<float> my_shard(const std::vector<float>& moment) const {
    return sharded() ? shard_of(moment, shard_) : moment;
  }

  ModelConfig config_;
  ParallelGroups parallel_;
  std::vector<ParamTensor> full_tensors_;
  std::vector<ParamTensor> tensors_;    // this rank's: its chunks', offsets into params_ and grads_
  std::vector<float> params_, grads_;   // this rank's flat arrays, which the chunks' models view
  std::vector<ChunkModels> chunks_;     // chunk v is virtual stage v S + s (model/pipeline.hpp)
  std::unique_ptr<AdamW> adam_;
  Shard shard_;                              // with the distributed optimizer
  std::vector<float> padded_, shard_grads_;  // its buffers: the padded flat array, the summed shard
  std::vector<Stashed> stash_;               // with a pipeline: the step's micro-batches
  double loss_sum_ = 0;
  int64_t micro_batches_ = 0;
  std::array<double, 2> aux_sums_{};  // MoE: the step's load-balancing and z-losses (StepStats)
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
