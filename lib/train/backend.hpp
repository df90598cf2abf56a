// What the training loop needs from a model and its optimizer on one device: the CPU backend (the
// float GptModel and AdamW of optim/adamw.hpp) and the CUDA backend (GptCudaModel and CudaAdamW,
// in bf16, fp16 or fp32) behind one interface, so the loop, the data order, the schedule, the
// metrics and the checkpoints are the same code for both.
//
// One optimizer step is begin_step(), micro_batch() for each micro-batch of the global batch, then
// end_step(). Gradients are those of the mean over micro-batches of each micro-batch's mean loss.
// With a data-parallel group, each replica runs its share of the micro-batches and end_step()
// averages the gradients and losses over the group before the norm and the update, so every
// replica takes the same step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/sharded_checkpoint.hpp"
#include "core/precision.hpp"
#include "model/config.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "parallel/comm.hpp"

namespace meg {

// The process groups of a backend (null or a group of one: none): the data-parallel group its
// replicas average over, whether they shard the optimizer over it (Megatron's distributed
// optimizer, ZeRO-1 style: the summed gradients are reduce-scattered, each replica updates its 1/D
// shard of the parameters with its 1/D of the AdamW moments (and, on GPUs in bf16/fp16, of the fp32
// master weights), and the shards are all-gathered), the
// tensor-parallel group the model is split over (model/tensor_parallel.hpp), and the pipeline whose
// stages hold its blocks, run by the 1F1B schedule, or with virtual stages by the interleaved one
// (train/pipeline_schedule.hpp).
struct ParallelGroups {
  Comm* dp = nullptr;
  Comm* tp = nullptr;
  Comm* pp = nullptr;  // the pipeline: this rank's stage is its rank there (model/pipeline.hpp)
  bool distributed_optimizer = false;
  bool sequence_parallel = false;  // with tp: the residual stream split by rows (model/gpt.hpp)
  int virtual_stages = 1;          // with pp: the model chunks of each rank (interleaved schedule)
  int dp_size() const { return dp ? dp->size() : 1; }
  int tp_size() const { return tp ? tp->size() : 1; }
  int pp_size() const { return pp ? pp->size() : 1; }
};

struct StepStats {
  double loss = 0;       // mean over the micro-batches
  double grad_norm = 0;  // global L2 norm before clipping
  bool skipped = false;  // fp16: the gradients overflowed; no update, the loss scale was lowered
  // MoE models: the auxiliary losses by Megatron's names ("load_balancing_loss", "z_loss"), each
  // the mean over the micro-batches, replicas and MoE layers, without its coefficient.
  std::map<std::string, double> aux_losses;
};

class TrainBackend {
 public:
  virtual ~TrainBackend() = default;

  // The whole model's tensors and size: the layout of get_state()/set_state() and of checkpoints,
  // whatever part of the model this rank holds.
  virtual const std::vector<ParamTensor>& tensors() const = 0;
  virtual size_t num_parameters() const = 0;
  // "cpu" or "cuda:0 NVIDIA H100 ... bf16": for the logs.
  virtual std::string describe() const = 0;

  virtual void begin_step() = 0;
  // TOKENS and TARGETS are host arrays [B*T]; the dropout key is (seed, step, micro).
  // MICRO_BATCHES is this replica's count for the step.
  virtual void micro_batch(const int32_t* tokens, const int32_t* targets, int B, int T, uint64_t seed, uint64_t step,
                           uint64_t micro, int64_t micro_batches) = 0;
  // Clips to CLIP_GRAD (0: off) and updates at LR. When the loss or the norm is not finite (and
  // the backend cannot recover by skipping, as fp16 does), returns without updating: the caller
  // sees the values and stops.
  virtual StepStats end_step(double lr, double clip_grad) = 0;

  // The mean loss of one batch without dropout and without gradients.
  virtual double eval_loss(const int32_t* tokens, const int32_t* targets, int B, int T) = 0;

  // Checkpoint state: fp32 parameters and AdamW moments in the whole model's table layout, the
  // step count, and anything else the backend needs to continue exactly (fp16's loss scale), as
  // JSON. get_state() is for a rank that holds the whole state (no tensor or pipeline parallelism,
  // no distributed optimizer: std::logic_error otherwise); get_local_state() serves every layout.
  // set_state() takes the whole state on every rank and keeps this rank's part of it.
  virtual void get_state(std::vector<float>& params, std::vector<float>& m, std::vector<float>& v) const = 0;
  virtual void set_state(const std::vector<float>& params, const std::vector<float>& m, const std::vector<float>& v,
                         int64_t optimizer_step) = 0;
  virtual int64_t optimizer_step() const = 0;
  // This rank's part (every rank calls it: it may gather across the data-parallel group).
  virtual void get_local_state(LocalState& state) const = 0;
  virtual std::string extra_state() const { return "{}"; }
  virtual void restore_extra_state(const std::string& /*json*/) {}

  // Peak device memory in bytes (0 on the CPU).
  virtual size_t peak_memory() const { return 0; }

  // The time spent in device communication (NCCL), once set_communication_timing(true) has turned
  // its measurement on: the sum over this rank's collectives and transfers since the last call,
  // overlapped or not. 0 where nothing is measured (the CPU, one GPU).
  virtual void set_communication_timing(bool /*on*/) {}
  virtual double take_communication_ms() { return 0; }

};

// The model of CONFIG initialised from SEED, with AdamW.
std::unique_ptr<TrainBackend> make_cpu_backend(const ModelConfig& config, const AdamWOptions& adam, uint64_t seed,
                                               const ParallelGroups& parallel = {});
// On a CUDA device (the node-local rank's, in a distributed job), with activation recomputation
// RECOMPUTE (none, selective or full: model/gpt_cuda.hpp). InputError when built without CUDA or
// when no GPU is present.
std::unique_ptr<TrainBackend> make_cuda_backend(const ModelConfig& config, const AdamWOptions& adam, uint64_t seed,
                                                Precision precision, const std::string& recompute = "none",
                                                const ParallelGroups& parallel = {});

}  // namespace meg
