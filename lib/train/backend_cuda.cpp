// The CUDA training backend: GptCudaModel<X> and CudaAdamW on the current device, with dynamic
// loss scaling in fp16.
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

#include "core/device.hpp"
#include "core/error.hpp"
#include "model/gpt_cuda.hpp"
#include "ops/cuda/check.hpp"
#include "optim/adamw_cuda.hpp"
#include "parallel/nccl_comm.hpp"
#include "train/backend.hpp"

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
      : precision_(precision), parallel_(parallel) {
    MEG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    model_ = std::make_unique<GptCudaModel<X>>(config, alloc_, stream_, sharded() ? size_t(parallel_.dp_size()) : 1);
    model_->set_recompute(recompute);
    const size_t n = model_->num_parameters();
    std::vector<float> params(n);
    gpt_init_parameters(config, model_->tensors(), seed, params.data());
    model_->set_params(params.data());
    if (parallel_.dp_size() > 1) nccl_ = std::make_unique<NcclComm>(*parallel_.dp);
    if (nccl_ && !sharded()) {  // all-reduce buckets of gradients while the backward goes on
      MEG_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
      MEG_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
      MEG_CUDA_CHECK(cudaEventCreateWithFlags(&reduced_, cudaEventDisableTiming));
      model_->set_grads_ready_hook([this](size_t from) { on_grads_ready(from); });
    }
    if (sharded()) {
      shard_ = optimizer_shard(n, parallel_.dp_size(), parallel_.dp->rank());
      std::vector<ParamGroup> groups;
      for (const auto& t : model_->tensors()) groups.push_back({t.offset, t.offset + t.numel, t.weight_decay});
      adam_ = std::make_unique<CudaAdamW>(shard_groups(groups, n, shard_), shard_.size, adam, alloc_, stream_);
    } else {
      adam_ = std::make_unique<CudaAdamW>(model_->tensors(), adam, alloc_, stream_);
    }
    if (precision_ == Precision::fp16) loss_scale_ = kInitialLossScale;
  }
  ~CudaBackend() override {
    if (comm_stream_) {
      cudaStreamSynchronize(comm_stream_);
      cudaEventDestroy(ready_);
      cudaEventDestroy(reduced_);
      cudaStreamDestroy(comm_stream_);
    }
    nccl_.reset();
    adam_.reset();
    model_.reset();
    cudaStreamDestroy(stream_);
  }

  const std::vector<ParamTensor>& tensors() const override { return model_->tensors(); }
  size_t num_parameters() const override { return model_->num_parameters(); }
  std::string describe() const override {
    int device = 0;
    cudaGetDevice(&device);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device);
    return fmt::format("cuda:{} {} {}", device, prop.name, precision_name(precision_));
  }

  void begin_step() override {
    model_->zero_grad();
    micro_done_ = 0;
    unreduced_ = model_->padded_parameters();
  }

  void micro_batch(const int32_t* tokens, const int32_t* targets, int B, int T, uint64_t seed, uint64_t step,
                   uint64_t micro, int64_t micro_batches) override {
    last_micro_ = ++micro_done_ == micro_batches;  // only its backward finishes the gradients
    model_->set_dropout_key(seed, step, micro);
    model_->forward_backward(tokens, targets, B, T, static_cast<float>(loss_scale_ / double(micro_batches)));
    micro_batches_ = micro_batches;
  }

  // Data parallelism: the gradients are summed over the group by NCCL on the model's stream (all of
  // them, or with the distributed optimizer this replica's shard), and the division by the group's
  // size is folded into the norm and the optimizer's gradient scale.
  StepStats end_step(double lr, double clip_grad) override {
    StepStats s;
    const double replicas = parallel_.dp_size();
    s.loss = model_->take_loss() / static_cast<double>(micro_batches_);
    float* grads = model_->grads();
    size_t begin = 0, count = model_->num_parameters();  // the gradients this replica applies
    if (sharded()) {
      begin = shard_.begin;
      count = shard_.size;
      nccl_->reduce_scatter_sum(grads + begin, grads, count, stream_);  // in place: NCCL allows it
    } else if (nccl_) {
      all_reduce(0, unreduced_);  // what the backward's buckets left
      MEG_CUDA_CHECK(cudaEventRecord(reduced_, comm_stream_));
      MEG_CUDA_CHECK(cudaStreamWaitEvent(stream_, reduced_, 0));
    }
    if (nccl_) {
      parallel_.dp->all_reduce_sum(&s.loss, 1);
      s.loss /= replicas;
      nccl_->wait(stream_);  // a failed peer surfaces here, never as a hang
    }
    // The summed gradients are REPLICAS times the mean's, and carry the loss scale.
    const double unscale = loss_scale_ * replicas;
    double sum = adam_->grad_sum_squares(grads + begin, count);
    if (sharded()) parallel_.dp->all_reduce_sum(&sum, 1);
    s.grad_norm = std::sqrt(sum) / unscale;
    if (!std::isfinite(s.grad_norm) && precision_ == Precision::fp16 && std::isfinite(s.loss)) {
      loss_scale_ = std::max(kMinLossScale, loss_scale_ / 2);
      good_steps_ = 0;
      s.skipped = true;
      return s;
    }
    if (!std::isfinite(s.grad_norm) || !std::isfinite(s.loss)) return s;
    // torch.nn.utils.clip_grad_norm_'s factor, folded with the loss-scale removal into one scale.
    const double clip = clip_grad > 0 && s.grad_norm > clip_grad ? clip_grad / (s.grad_norm + 1e-6) : 1.0;
    X* copy = std::is_same_v<X, float> ? nullptr : model_->params_x() + begin;
    adam_->step(model_->params() + begin, copy, grads + begin, lr, clip / unscale);
    if (sharded()) gather_compute_copy();
    if (precision_ == Precision::fp16 && ++good_steps_ >= kGrowthInterval) {
      loss_scale_ *= 2;
      good_steps_ = 0;
    }
    return s;
  }

  double eval_loss(const int32_t* tokens, const int32_t* targets, int B, int T) override {
    model_->set_training(false);
    const double loss = model_->forward(tokens, targets, B, T);
    model_->set_training(true);
    return loss;
  }

  void get_state(std::vector<float>& params, std::vector<float>& m, std::vector<float>& v) const override {
    if (sharded()) throw std::logic_error("CudaBackend::get_state: this rank holds a shard of the optimizer");
    params.resize(model_->num_parameters());
    model_->get_params(params.data());
    adam_->get_state(m, v);
  }
  void get_local_state(LocalState& state) const override {
    const size_t n = model_->num_parameters();
    gather_master();
    state.tensors = model_->tensors();
    state.params.resize(n);
    model_->get_params(state.params.data());
    adam_->get_state(state.m, state.v);
    state.moments_sharded = sharded();
    state.shard_begin = sharded() ? shard_.begin : 0;
    state.local_numel = n;
  }
  void set_state(const std::vector<float>& params, const std::vector<float>& m, const std::vector<float>& v,
                 int64_t step) override {
    model_->set_params(params.data());
    adam_->restore(sharded() ? my_shard(m) : m, sharded() ? my_shard(v) : v, step);
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

 private:
  bool sharded() const { return parallel_.distributed_optimizer && parallel_.dp_size() > 1; }

  // With the distributed optimizer each replica's master weights are current on its shard only:
  // gathered before they are read.
  void gather_master() const {
    if (!sharded()) return;
    float* p = model_->params();
    nccl_->all_gather(p, p + shard_.begin, shard_.size, stream_);
    nccl_->wait(stream_);
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
    nccl_->all_reduce_sum(model_->grads() + from, to - from, comm_stream_);
    unreduced_ = from;
  }

  // After the shard's update: every replica gathers the shards of the weights the model computes
  // with (bf16: the compute copy, 2 bytes a parameter; fp32: the master; fp16, which NCCL here does
  // not gather: the fp32 master, then a fresh compute copy).
  void gather_compute_copy() {
    if constexpr (std::is_same_v<X, __nv_bfloat16>) {
      X* x = model_->params_x();
      nccl_->all_gather(x, x + shard_.begin, shard_.size, stream_);
    } else {
      float* p = model_->params();
      nccl_->all_gather(p, p + shard_.begin, shard_.size, stream_);
      if constexpr (!std::is_same_v<X, float>) model_->refresh_compute_copy();
    }
  }
  // This replica's part of a whole-model moment (zero over the padding).
  std::vector<float> my_shard(const std::vector<float>& moment) const {
    std::vector<float> part(shard_.size, 0.0f);
    for (size_t i = 0; i < shard_.size && shard_.begin + i < moment.size(); ++i) part[i] = moment[shard_.begin + i];
    return part;
  }

  Precision precision_;
  cudaStream_t stream_ = nullptr;
  cuda::DeviceAllocator alloc_;  // declared before the model and optimizer: it outlives them
  std::unique_ptr<GptCudaModel<X>> model_;
  std::unique_ptr<CudaAdamW> adam_;
  ParallelGroups parallel_;
  std::unique_ptr<NcclComm> nccl_;  // the data-parallel group's, when it has more than one member
  Shard shard_;                     // this replica's, with the distributed optimizer
  // Overlapped all-reduce (data parallelism without the distributed optimizer).
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, reduced_ = nullptr;
  size_t unreduced_ = 0;  // gradients [0, unreduced_) not yet handed to NCCL this step
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
  const auto devices = cuda_devices();
  if (devices.empty()) input_error("--device cuda: no CUDA device is visible; use --device cpu");
  // One GPU per process: the ranks of a node take its GPUs in turn.
  if (World::initialized()) MEG_CUDA_CHECK(cudaSetDevice(World::get().local_rank() % int(devices.size())));
  switch (precision) {
    case Precision::fp32: return std::make_unique<CudaBackend<float>>(config, adam, seed, precision, r, parallel);
    case Precision::bf16: return std::make_unique<CudaBackend<__nv_bfloat16>>(config, adam, seed, precision, r, parallel);
    case Precision::fp16: return std::make_unique<CudaBackend<__half>>(config, adam, seed, precision, r, parallel);
  }
  input_error("unknown precision");
}

}  // namespace meg
