// The CUDA training backend: GptCudaModel<X> and CudaAdamW on the current device, with dynamic
// loss scaling in fp16, data parallelism (all-reduce overlapped with the backward, or the
// distributed optimizer), tensor parallelism (the model's, over NCCL) and pipeline parallelism
// (1F1B over NCCL point-to-point, each stage keeping the activations of its micro-batches in
// flight).
//
// fp16 loss scaling (as Megatron's DynamicGradScaler, without hysteresis): the loss gradient is
// multiplied by the scale S, so small gradients survive fp16; the global norm is taken on the
// scaled fp32 gradients and divided by S. A non-finite norm means an overflow somewhere: the step
// is skipped and S halves. After kGrowthInterval steps in a row without one, S doubles. S and the
// count are part of the checkpoint, so a resumed fp16 run continues exactly.
#include <cuda_runtime.h>

#include <cmath>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/gpt_cuda.hpp"
#include "model/init.hpp"
#include "model/rank_part.hpp"
#include "ops/cuda/check.hpp"
#include "optim/adamw_cuda.hpp"
#include "optim/grad_norm.hpp"
#include "parallel/nccl_comm.hpp"
#include "parallel/rank_device.hpp"
#include "train/backend.hpp"
#include "train/pipeline_links.hpp"
#include "train/pipeline_schedule.hpp"

namespace meg {

namespace {

constexpr double kInitialLossScale = 65536.0;
constexpr double kMinLossScale = 1.0;
constexpr int64_t kGrowthInterval = 1000;
// Gradients per all-reduce while the backward runs: large enough to keep NCCL efficient, small
// enough that the first bucket starts early (Megatron's default is of this order).
constexpr size_t kBucketElements = size_t(25) << 20;

template <typename X>
class CudaBackend final : public TrainBackend {
 public:
  CudaBackend(const ModelConfig& config, const AdamWOptions& adam, uint64_t seed, Precision precision,
              Recompute recompute, const ParallelGroups& parallel)
      : precision_(precision), parallel_(parallel), full_tensors_(gpt_parameter_table(config)) {
    MEG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // Every rank creates its communicators in the same order: NCCL's set-up is collective.
    if (parallel_.tp_size() > 1) tp_nccl_ = std::make_unique<NcclComm>(*parallel_.tp);
    if (pipelined()) pp_nccl_ = std::make_unique<NcclComm>(*parallel_.pp);
    if (parallel_.dp_size() > 1) nccl_ = std::make_unique<NcclComm>(*parallel_.dp);
    if (pipelined()) links_ = std::make_unique<PipelineLinks<X>>(*pp_nccl_, alloc_);
    // The rank's model chunks (one, its stage, without virtual stages) over one flat array of
    // weights and one of gradients, chunk after chunk, padded for the distributed optimizer.
    const int tp = parallel_.tp_size();
    const auto chunk_stages =
        rank_chunks(pipelined() ? parallel_.pp->rank() : 0, parallel_.pp_size(), parallel_.virtual_stages);
    const auto tp_table = tp > 1 ? gpt_parameter_table(config, tp) : gpt_parameter_table(config);
    tensors_ = chunks_table(config, chunk_stages, tp_table);
    const size_t n = table_size(tensors_);
    const size_t replicas = sharded() ? size_t(parallel_.dp_size()) : 1;
    padded_ = (n + replicas - 1) / replicas * replicas;
    weights_ = cuda::DeviceArray<X>(alloc_, padded_);
    grads_ = cuda::DeviceArray<float>(alloc_, padded_);
    MEG_CUDA_CHECK(cudaMemsetAsync(weights_.get(), 0, weights_.bytes(), stream_));
    size_t offset = 0;
    for (const PipelineStage& stage : chunk_stages) {
      chunks_.push_back(std::make_unique<GptCudaModel<X>>(
          config, alloc_, stream_, tp_nccl_.get(), stage, parallel_.sequence_parallel,
          typename GptCudaModel<X>::Storage{weights_.get() + offset, grads_.get() + offset}));
      chunks_.back()->set_recompute(recompute);
      chunk_offsets_.push_back(offset);
      offset += chunks_.back()->num_parameters();
    }
    if (sharded()) shard_ = optimizer_shard(n, parallel_.dp_size(), parallel_.dp->rank());
    // The fp32 master weights of [master_begin(), + master_size()): for X = float the model's own
    // weights; otherwise an array of their own (with the distributed optimizer, the shard only).
    if constexpr (!std::is_same_v<X, float>) master_ = cuda::DeviceArray<float>(alloc_, master_size());
    std::vector<float> local(n);  // this rank's part of the initialisation, generated directly
    gpt_init_local(config, tensors_, tp, tp > 1 ? parallel_.tp->rank() : 0, seed, local.data());
    set_weights(local);
    if (nccl_ && !sharded()) {  // all-reduce buckets of gradients while the backward goes on
      MEG_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
      MEG_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
      MEG_CUDA_CHECK(cudaEventCreateWithFlags(&reduced_, cudaEventDisableTiming));
      // With several chunks their backwards interleave, so no stretch of the flat array is known
      // final before the last one: the gradients are all-reduced at the end of the step.
      if (chunks_.size() == 1) chunks_[0]->set_grads_ready_hook([this](size_t from) { on_grads_ready(from); });
    }
    if (sharded()) {
      std::vector<ParamGroup> groups;
      for (const auto& t : tensors_) groups.push_back({t.offset, t.offset + t.numel, t.weight_decay});
      adam_ = std::make_unique<CudaAdamW>(shard_groups(groups, n, shard_), shard_.size, adam, alloc_, stream_);
    } else {
      adam_ = std::make_unique<CudaAdamW>(tensors_, adam, alloc_, stream_);
    }
    const size_t begin = sharded() ? shard_.begin : 0, end = sharded() ? shard_.begin + shard_.size : n;
    const GradNormRanges r = grad_norm_ranges(tensors_, parallel_.tp_size() > 1, begin, end,
                                              [this](const ParamTensor& t) { return tied_copy(t); });
    if (tied_ends()) tied_other_ = cuda::DeviceArray<float>(alloc_, tied_embedding().numel);
    norm_ranges_ = r.split;
    split_ranges_ = r.split.size();
    norm_ranges_.insert(norm_ranges_.end(), r.replicated.begin(), r.replicated.end());
    if (precision_ == Precision::fp16) loss_scale_ = kInitialLossScale;
  }
  ~CudaBackend() override {
    if (comm_stream_) {
      cudaStreamSynchronize(comm_stream_);
      cudaEventDestroy(ready_);
      cudaEventDestroy(reduced_);
      cudaStreamDestroy(comm_stream_);
    }
    adam_.reset();
    chunks_.clear();
    links_.reset();
    nccl_.reset();
    pp_nccl_.reset();
    tp_nccl_.reset();
    cudaStreamDestroy(stream_);
  }

  const std::vector<ParamTensor>& tensors() const override { return full_tensors_; }
  size_t num_parameters() const override { return full_tensors_.back().offset + full_tensors_.back().numel; }
  std::string describe() const override {
    int device = 0;
    cudaGetDevice(&device);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device);
    return fmt::format("cuda:{} {} {}", device, prop.name, precision_name(precision_));
  }

  void begin_step() override {
    MEG_CUDA_CHECK(cudaMemsetAsync(grads_.get(), 0, grads_.bytes(), stream_));
    micro_done_ = 0;
    unreduced_ = padded_;
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
    last_micro_ = ++micro_done_ == micro_batches;  // only its backward finishes the gradients
    GptCudaModel<X>& model = *chunks_[0];
    model.set_dropout_key(seed, step, micro);
    model.forward_backward(tokens, targets, B, T, static_cast<float>(loss_scale_ / double(micro_batches)));
  }

  // Data parallelism: the gradients are summed over the group by NCCL on the model's stream (all of
  // them, or with the distributed optimizer this replica's shard), and the division by the group's
  // size is folded into the norm and the optimizer's gradient scale.
  StepStats end_step(double lr, double clip_grad) override {
    StepStats s;
    const double replicas = parallel_.dp_size();
    if (pipelined()) run_pipeline();
    sum_sequence_parallel_grads();
    for (auto& chunk : chunks_) s.loss += chunk->take_loss();  // the last virtual stage's
    s.loss /= static_cast<double>(micro_batches_);
    if (pipelined()) parallel_.pp->broadcast(&s.loss, sizeof s.loss, parallel_.pp_size() - 1);  // the last stage's
    float* grads = grads_.get();
    size_t begin = 0, count = table_size(tensors_);  // the gradients this replica applies
    if (sharded()) {
      begin = shard_.begin;
      count = shard_.size;
      sum_tied_embedding_copies();
      nccl_->reduce_scatter_sum(grads + begin, grads, count, stream_);  // in place: NCCL allows it
    } else if (nccl_) {
      all_reduce(0, unreduced_);  // what the backward's buckets left
      MEG_CUDA_CHECK(cudaEventRecord(reduced_, comm_stream_));
      MEG_CUDA_CHECK(cudaStreamWaitEvent(stream_, reduced_, 0));
      sum_tied_embedding_copies();  // after the replicas' sum, which the buckets may have begun
    } else {
      sum_tied_embedding_copies();
    }
    if (nccl_) {
      parallel_.dp->all_reduce_sum(&s.loss, 1);
      s.loss /= replicas;
      nccl_->wait(stream_);  // a failed peer surfaces here, never as a hang
    }
    // The summed gradients are REPLICAS times the mean's, and carry the loss scale.
    const double unscale = loss_scale_ * replicas;
    const std::vector<double> sums = adam_->grad_sum_squares(grads, norm_ranges_);
    double split = 0, replicated = 0;
    for (size_t k = 0; k < sums.size(); ++k) (k < split_ranges_ ? split : replicated) += sums[k];
    s.grad_norm = std::sqrt(global_sum_squares(split, replicated, sharded() ? parallel_.dp : nullptr, parallel_.tp, parallel_.pp)) / unscale;
    if (!std::isfinite(s.grad_norm) && precision_ == Precision::fp16 && std::isfinite(s.loss)) {
      loss_scale_ = std::max(kMinLossScale, loss_scale_ / 2);
      good_steps_ = 0;
      s.skipped = true;
      return s;
    }
    if (!std::isfinite(s.grad_norm) || !std::isfinite(s.loss)) return s;
    // torch.nn.utils.clip_grad_norm_'s factor, folded with the loss-scale removal into one scale.
    const double clip = clip_grad > 0 && s.grad_norm > clip_grad ? clip_grad / (s.grad_norm + 1e-6) : 1.0;
    X* copy = std::is_same_v<X, float> ? nullptr : weights_.get() + begin;
    adam_->step(master(), copy, grads + begin, lr, clip / unscale);
    if (sharded()) gather_compute_copy();
    if (precision_ == Precision::fp16 && ++good_steps_ >= kGrowthInterval) {
      loss_scale_ *= 2;
      good_steps_ = 0;
    }
    return s;
  }

  // Through the (virtual) stages one after the other; the last one's loss is everyone's.
  double eval_loss(const int32_t* tokens, const int32_t* targets, int B, int T) override {
    double loss = 0;
    for (auto& chunk : chunks_) {
      GptCudaModel<X>& m = *chunk;
      const PipelineStage& st = m.stage();
      const size_t n = m.stage_elements(B, T);
      m.set_training(false);
      if (!st.first()) links_->recv_previous(m.stage_input(0, B, T), n, stream_);
      loss += m.forward(tokens, targets, B, T);  // 0 but on the last virtual stage
      m.set_training(true);
      if (!st.last()) links_->send_next(m.stage_output(0), n, stream_);
    }
    if (!pipelined()) return loss;
    links_->join(stream_);
    pp_nccl_->wait(stream_);
    parallel_.pp->broadcast(&loss, sizeof loss, parallel_.pp_size() - 1);
    return loss;
  }

  void get_state(std::vector<float>& params, std::vector<float>& m, std::vector<float>& v) const override {
    if (sharded() || parallel_.tp_size() > 1 || pipelined())
      throw std::logic_error("CudaBackend::get_state: this rank holds a part of the state");
    params = master_weights();
    adam_->get_state(m, v);
  }
  void get_local_state(LocalState& state) const override {
    state.tensors = tensors_;
    state.params = master_weights();
    adam_->get_state(state.m, state.v);
    state.moments_sharded = sharded();
    state.shard_begin = sharded() ? shard_.begin : 0;
    state.local_numel = table_size(tensors_);
  }
  void set_state(const std::vector<float>& params, const std::vector<float>& m, const std::vector<float>& v,
                 int64_t step) override {
    set_weights(local_part(params));
    adam_->restore(my_shard(local_part(m)), my_shard(local_part(v)), step);
  }
  int64_t optimizer_step() const override { return adam_->step_count(); }

  std::string extra_state() const override {
    if (precision_ != Precision::fp16) return "{}";
    return nlohmann::json{{"loss_scale", loss_scale_}, {"good_steps", good_steps_}}.dump();
  }
  void restore_extra_state(const std::string& json) override {
    if (precision_ != Precision::fp16) return;
    const auto j = nlohmann::json::parse(json);
    if (j.contains("loss_scale")) {
      loss_scale_ = j.at("loss_scale").get<double>();
      good_steps_ = j.at("good_steps").get<int64_t>();
    }
  }

  size_t peak_memory() const override { return alloc_.peak(); }

  void set_communication_timing(bool on) override {
    for (NcclComm* c : comms())
      if (c) c->set_timing(on);
  }
  double take_communication_ms() override {
    double ms = 0;
    for (NcclComm* c : comms())
      if (c) ms += c->take_elapsed_ms();
    return ms;
  }

 private:
  bool sharded() const { return parallel_.distributed_optimizer && parallel_.dp_size() > 1; }
  bool pipelined() const { return parallel_.pp_size() > 1; }
  std::vector<NcclComm*> comms() {
    std::vector<NcclComm*> all{tp_nccl_.get(), pp_nccl_.get(), nccl_.get()};
    if (links_)
      for (NcclComm* c : links_->comms()) all.push_back(c);
    return all;
  }
  const ModelConfig& config() const { return chunks_[0]->config(); }
  // The rank holding the first virtual stage (the embeddings) and the last (the output layer).
  bool first_rank() const { return !pipelined() || parallel_.pp->rank() == 0; }
  bool last_rank() const { return !pipelined() || parallel_.pp->rank() == parallel_.pp_size() - 1; }

  // With tied embeddings and a pipeline, the first and last stages each hold the word embedding
  // (model/pipeline.hpp): their gradients are summed between them, and the last stage's copy is
  // left out of the gradient norm.
  bool tied_ends() const { return pipelined() && config().tie_embeddings && (first_rank() || last_rank()); }
  const ParamTensor& tied_embedding() const {
    for (const auto& t : tensors_)
      if (t.role == TensorRole::word_embeddings) return t;
    throw std::logic_error("CudaBackend: no word embedding on this stage");
  }
  bool tied_copy(const ParamTensor& t) const {
    return tied_ends() && last_rank() && !first_rank() && t.role == TensorRole::word_embeddings;
  }
  void sum_tied_embedding_copies() {
    if (!tied_ends()) return;
    const ParamTensor& t = tied_embedding();
    float* g = grads_.get() + t.offset;
    const int peer = first_rank() ? parallel_.pp_size() - 1 : 0;
    pp_nccl_->send_recv(g, t.numel, peer, tied_other_.get(), t.numel, peer, stream_);
    cuda::add(g, g, tied_other_.get(), t.numel, stream_);  // a + b on one end, b + a on the other: equal
  }

  // With sequence parallelism the norms' and the position embedding's gradients cover this rank's
  // rows of the stream (gpt_cuda.hpp): summed over the group, in fp32 on the model's stream, they
  // are the whole gradient, the same on every rank. The sum commutes with the data-parallel one,
  // but must not run beside it on the same memory: first the stream waits for the buckets the
  // backward has handed to the communication stream.
  void sum_sequence_parallel_grads() {
    if (!chunks_[0]->sequence_parallel()) return;
    if (comm_stream_) {
      MEG_CUDA_CHECK(cudaEventRecord(reduced_, comm_stream_));
      MEG_CUDA_CHECK(cudaStreamWaitEvent(stream_, reduced_, 0));
    }
    for (const auto& t : tensors_)
      if (t.sequence_parallel)
        tp_nccl_->all_reduce_sum(grads_.get() + t.offset, t.numel, stream_);
  }

  // The step's micro-batches through the pipeline schedule: 1F1B (train/pipeline_schedule.hpp),
  // or with virtual stages the interleaved one over the rank's chunks. Each receive is queued on
  // the compute stream when its step comes, each send goes out from a copy on its link's own
  // stream (train/pipeline_links.hpp), so the host only queues work and never waits for a
  // neighbour to take a message. A chunk keeps each micro-batch in flight in an activation slot of
  // its own, taken at the forward and given back after the backward (1F1B: at most S - s of them).
  void run_pipeline() {
    const int S = parallel_.pp_size(), s = parallel_.pp->rank(), V = static_cast<int>(chunks_.size());
    const int M = static_cast<int>(stash_.size()), B = stash_.front().B, T = stash_.front().T;
    const int last = S * V - 1;  // the last virtual stage; chunk v here is virtual stage v S + s
    const size_t n = chunks_[0]->stage_elements(B, T);
    std::vector<std::vector<int>> slot_of(size_t(V), std::vector<int>(size_t(M), -1));
    std::vector<std::vector<int>> free_slots(static_cast<size_t>(V));
    std::vector<int> slots_made(static_cast<size_t>(V), 0);
    for (const PipelineStep& step : V > 1 ? interleaved_order(s, S, V, M) : one_f_one_b_order(s, S, M)) {
      GptCudaModel<X>& m = *chunks_[size_t(step.chunk)];
      const int j = step.chunk * S + s, i = step.micro;
      int& slot = slot_of[size_t(step.chunk)][size_t(i)];
      if (step.forward) {
        auto& pool = free_slots[size_t(step.chunk)];
        if (pool.empty()) pool.push_back(slots_made[size_t(step.chunk)]++);
        slot = pool.back();
        pool.pop_back();
        if (j > 0) links_->recv_previous(m.stage_input(slot, B, T), n, stream_);
        const Stashed& b = stash_[size_t(i)];
        m.set_dropout_key(b.seed, b.step, b.micro);
        m.forward_stage(slot, b.tokens.data(), b.targets.data(), b.B, b.T, static_cast<float>(loss_scale_ / M));
        if (j < last) links_->send_next(m.stage_output(slot), n, stream_);
      } else {
        if (j < last) links_->recv_next(m.stage_output_grad(slot), n, stream_);
        last_micro_ = i == M - 1 && step.chunk == 0;  // the step's last backward (the overlap hook's cue)
        m.backward_stage(slot);
        if (j > 0) links_->send_previous(m.stage_input_grad(slot), n, stream_);
        free_slots[size_t(step.chunk)].push_back(slot);
      }
    }
    links_->join(stream_);
  }

  // The master weights this rank keeps and updates: the elements [master_begin(), + master_size())
  // of its flat array (with the distributed optimizer its shard, otherwise all of it).
  size_t master_begin() const { return sharded() ? shard_.begin : 0; }
  size_t master_size() const { return sharded() ? shard_.size : table_size(tensors_); }
  float* master() const {
    if constexpr (std::is_same_v<X, float>) return weights_.get() + master_begin();
    else return master_.get();
  }

  // Sets this rank's weights from its fp32 part LOCAL: the model's compute copy, and the master.
  void set_weights(const std::vector<float>& local) {
    for (size_t v = 0; v < chunks_.size(); ++v) chunks_[v]->set_params(local.data() + chunk_offsets_[v]);
    if constexpr (std::is_same_v<X, float>) return;  // the model's weights are the master
    const std::vector<float> mine = shard_of(local, {master_begin(), master_size()});  // zero over the padding
    MEG_CUDA_CHECK(cudaMemcpyAsync(master(), mine.data(), mine.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
    MEG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // This rank's whole fp32 part (num_parameters() floats); with the distributed optimizer the
  // replicas' shards are gathered on the host, so that saving needs no device memory.
  std::vector<float> master_weights() const {
    std::vector<float> mine(master_size());
    MEG_CUDA_CHECK(cudaMemcpyAsync(mine.data(), master(), mine.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    MEG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (!sharded()) return mine;
    std::vector<float> all(shard_.size * size_t(parallel_.dp_size()));
    parallel_.dp->all_gather(all.data(), mine.data(), shard_.size);
    all.resize(table_size(tensors_));
    return all;
  }

  // The backward of the last micro-batch has finished the gradients [FROM, end): once a bucket's
  // worth waits, it is all-reduced on the communication stream, after the compute stream's work so
  // far, while the backward continues on the rest.
  void on_grads_ready(size_t from) {
    if (last_micro_ && unreduced_ - from >= kBucketElements) all_reduce(from, unreduced_);
  }
  void all_reduce(size_t from, size_t to) {
    if (to <= from) return;
    MEG_CUDA_CHECK(cudaEventRecord(ready_, stream_));
    MEG_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
    nccl_->all_reduce_sum(grads_.get() + from, to - from, comm_stream_);
    unreduced_ = from;
  }

  // After the shard's update (which refreshed the shard of the compute copy): every replica gathers
  // the shards of the weights the model computes with (bf16 or fp16: 2 bytes a parameter).
  void gather_compute_copy() {
    X* x = weights_.get();
    nccl_->all_gather(x, x + shard_.begin, shard_.size, stream_);
  }
  // This rank's part of a whole-model array (its tensor-parallel shard).
  std::vector<float> local_part(const std::vector<float>& full) const {
    const int tp = parallel_.tp_size();
    return rank_part(config(), tp, tp > 1 ? parallel_.tp->rank() : 0, tensors_, full);
  }
  // This replica's part of a local moment (zero over the padding).
  std::vector<float> my_shard(const std::vector<float>& moment) const {
    return sharded() ? shard_of(moment, shard_) : moment;
  }

  Precision precision_;
  cudaStream_t stream_ = nullptr;
  cuda::DeviceAllocator alloc_;  // declared before the model and optimizer: it outlives them
  // The rank's model chunks (model/pipeline.hpp), views of the flat arrays at CHUNK_OFFSETS_.
  std::vector<ParamTensor> tensors_;  // the rank's table: its chunks' tensors, chunk after chunk
  size_t padded_ = 0;                 // the flat arrays' length: the table's, padded to the replicas
  cuda::DeviceArray<X> weights_;
  cuda::DeviceArray<float> grads_;
  std::vector<std::unique_ptr<GptCudaModel<X>>> chunks_;
  std::vector<size_t> chunk_offsets_;
  std::unique_ptr<PipelineLinks<X>> links_;  // with a pipeline
  cuda::DeviceArray<float> master_;  // the fp32 master weights when X is not float (see master())
  std::unique_ptr<CudaAdamW> adam_;
  ParallelGroups parallel_;
  std::vector<ParamTensor> full_tensors_;
  std::unique_ptr<NcclComm> tp_nccl_;  // the tensor-parallel group's, when it has more than one member
  std::unique_ptr<NcclComm> pp_nccl_;  // the pipeline's, when it has more than one stage
  cuda::DeviceArray<float> tied_other_;  // the other end's tied-embedding gradient
  std::unique_ptr<NcclComm> nccl_;     // the data-parallel group's, when it has more than one member
  Shard shard_;                     // this replica's, with the distributed optimizer
  // The gradient norm's ranges of this rank's array: the first SPLIT_RANGES_ split over the
  // tensor-parallel group, the rest replicated (optim/grad_norm.hpp).
  std::vector<GradRange> norm_ranges_;
  size_t split_ranges_ = 0;
  // Overlapped all-reduce (data parallelism without the distributed optimizer).
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, reduced_ = nullptr;
  size_t unreduced_ = 0;  // gradients [0, unreduced_) not yet handed to NCCL this step
  // A micro-batch waiting for the pipeline schedule.
  struct Stashed {
    std::vector<int32_t> tokens, targets;
    int B, T;
    uint64_t seed, step, micro;
  };
  std::vector<Stashed> stash_;
  int64_t micro_done_ = 0;
  bool last_micro_ = false;
  int64_t micro_batches_ = 1;
  double loss_scale_ = 1.0;
  int64_t good_steps_ = 0;
};

}  // namespace

std::unique_ptr<TrainBackend> make_cuda_backend(const ModelConfig& config, const AdamWOptions& adam, uint64_t seed,
                                                Precision precision, const std::string& recompute,
                                                const ParallelGroups& parallel) {
  const Recompute r = parse_recompute(recompute);
  use_rank_cuda_device();
  switch (precision) {
    case Precision::fp32: return std::make_unique<CudaBackend<float>>(config, adam, seed, precision, r, parallel);
    case Precision::bf16: return std::make_unique<CudaBackend<__nv_bfloat16>>(config, adam, seed, precision, r, parallel);
    case Precision::fp16: return std::make_unique<CudaBackend<__half>>(config, adam, seed, precision, r, parallel);
  }
  input_error("unknown precision");
}

}  // namespace meg
