// The decoder-only language model on the GPU: the same model as GptModel (gpt.hpp), with the same
// parameter table, names, layout, initialisation and dropout masks, run by the CUDA ops of
// ops/cuda/ops.hpp and the cuBLASLt products of ops/cuda/gemm.hpp.
//
// Precision (X = float, bf16 or fp16, the activation type):
//   - weights: X, one flat device array in the table's layout: the compute copy of the fp32
//     master weights, which belong to the optimizer (the training backend holds them, whole or,
//     with the distributed optimizer, its shard, and refreshes this copy at every step); for
//     X = float this array is the master itself;
//   - gradients: fp32, the same layout, accumulated by every backward (the weight-gradient GEMMs
//     write fp32 with beta = 1), so micro-batches accumulate without a pass of their own;
//   - activations X; norm statistics, attention log-sum-exps and losses fp32.
//
// The step of one micro-batch is forward_backward(): the forward, the loss fused with its gradient
// (the logits are overwritten by their gradient, never stored twice), and the backward. It queues
// the work on the model's stream and returns at once; losses are copied to pinned host memory on
// the way and summed by take_loss(), the one call that waits for the device. Host-side work for
// the next micro-batch (sampling, token grouping) thus overlaps the device's work on this one.
//
// The stage's layers are those of model/cuda_layers.hpp, one per entry of its part of the layer
// sequence, which the model runs in order as their training path (its parameters and gradients,
// its split of the stream, its dropout, causal attention over its batch): the CPU model's maths
// (see gpt.hpp), with two differences of storage: q, k and v are not copied out of the fused QKV
// output (attention and RoPE read it in place), and the backward of RoPE rotates the gradient in
// place.
//
// Activation recomputation (set_recompute) trades compute for memory, block by block
// (model/cuda_layers.hpp says how the layers keep their activations):
//   none:      every block keeps all it needs for its backward;
//   selective: the cheap, wide activations are recomputed in the backward instead of kept: the two
//              norm outputs (from the kept statistics' inputs) and the MLP activation (from the
//              kept fc1 output), about 6 of the ~16 N x C values a GPT-2 block keeps, for a few
//              elementwise passes;
//   full:      a block keeps only its input; the backward runs the block's forward again first
//              (about a third more compute), so activation memory no longer grows with depth
//              beyond one N x C array per block.
// Dropout masks are keyed, not drawn, so a recomputed forward drops the same elements.
//
// Dropout, hidden and attention, uses the same counter-based masks as the CPU's, with the same
// keys, so both paths drop the same elements; the flash attention kernels hash their mask elements
// as they go instead of storing them.
//
// Tensor parallelism (a TP communicator of more than one rank) splits the model as the CPU model
// does (gpt.hpp, model/tensor_parallel.hpp): the model holds its rank's shard (the table of
// gpt_parameter_table(config, tp)); the column-parallel products (QKV, fc1) run on the rank's
// heads and MLP columns and their input gradients are all-reduced; the row-parallel ones (proj,
// fc2) all-reduce their partial outputs, the replicated bias added by rank 0's product only; the
// embedding and the output layer split the vocabulary: each rank looks up its rows (zero for
// the others; rank 0 adds the position embedding) and the lookups are all-reduced, and the
// cross-entropy combines the ranks' (max, sum, target logit) partials, all-gathered. The
// all-reduces run in X on the model's stream (as Megatron's, in bf16). Replicated tensors'
// gradients come out the same on every rank.
//
// Sequence parallelism (with tensor parallelism; Megatron's, and the CPU model's) splits the
// residual stream by rows: each rank holds R = N / tp rows of it (rows [rank R, (rank + 1) R)), so
// the block inputs and outputs, the stage buffers and their gradients are R x C. The norms and the
// hidden dropout run on the rank's rows (the dropout with the rows' element offset, so the masks
// are one process's); a norm's output is all-gathered to N rows before a column-parallel product
// (QKV, fc1, the output layer), and a row-parallel product's partial output (proj, fc2; the
// embedding's lookup) is reduce-scattered to the rank's rows instead of all-reduced. The backward
// mirrors it: a branch's output gradient is all-gathered before the row-parallel product's
// backward, a column-parallel input gradient reduce-scattered before the norm's backward. The
// gradients of the norms and of the position embedding then cover the rank's rows only (the
// position embedding's: rank 0's from all rows), and the caller sums them over the group.
//
// A pipeline stage (model/pipeline.hpp) holds its blocks, and the embeddings on the first stage,
// the final norm and output layer on the last (with tied embeddings the last stage's own copy of
// the word embedding). It keeps the activations of several micro-batches in flight, one
// activation slot each (allocated at first use, then kept): forward_stage() and backward_stage()
// run one slot's forward and backward, the caller moving activations and their gradients between
// the stages through the slots' buffers (stage_input() ... stage_input_grad()).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/cuda_layers.hpp"
#include "model/gpt.hpp"
#include "ops/cuda/device_memory.hpp"
#include "ops/cuda/gemm.hpp"
#include "parallel/nccl_comm.hpp"

namespace meg {

// The recompute mode (model/cuda_layers.hpp) named NAME: none, selective or full.
Recompute parse_recompute(const std::string& name);  // InputError on an unknown name

template <typename X>
class GptCudaModel final : private CudaTrainingPath<X> {
 public:
  // Validates CONFIG (InputError on a bad one, or on one that does not split over TP's ranks) and
  // allocates parameters (zero) and gradients on the current device. TP null or of one rank: the
  // whole model.
  // STORAGE (both pointers or neither): the weights and gradients live in arrays of the caller's,
  // num_parameters() long, instead of the model's own (the model chunks of a pipeline rank share
  // one flat array, which the training backend also pads for the distributed optimizer).
  struct Storage {
    X* params_x = nullptr;
    float* grads = nullptr;
  };
  GptCudaModel(const ModelConfig& config, cuda::DeviceAllocator& alloc, cudaStream_t stream,
               NcclComm* tp = nullptr, PipelineStage stage = {},
               bool sequence_parallel = false, Storage storage = {});
  ~GptCudaModel();
  GptCudaModel(const GptCudaModel&) = delete;
  GptCudaModel& operator=(const GptCudaModel&) = delete;

  const ModelConfig& config() const { return config_; }
  // This rank's table: the whole model's, or its tensor-parallel shard's.
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  int tp_size() const { return tp_ ? tp_->size() : 1; }
  const PipelineStage& stage() const { return stage_; }
  bool sequence_parallel() const { return sp_; }
  size_t num_parameters() const { return num_params_; }
  cudaStream_t stream() const override { return stream_; }

  // Device arrays (table layout, num_parameters() long): the X weights the model computes with, and
  // the fp32 gradients.
  X* params_x() { return params_x_; }
  float* grads() { return grads_; }

  // Host transfers of this rank's flat arrays (num_parameters() floats): set_params rounds fp32
  // weights to X. Both wait for the device.
  void set_params(const float* host);
  void get_grads(float* host) const;

  void zero_grad();

  void set_dropout_key(uint64_t seed, uint64_t step, uint64_t micro) {
    drop_seed_ = seed;
    drop_step_ = step;
    drop_micro_ = micro;
  }
  void set_training(bool training) { training_ = training; }
  void set_recompute(Recompute mode);
  // A hook the backward calls on the host each time it has queued the last work on the gradients of
  // a stretch of the flat array: after the call with FROM, the gradients [FROM, num_parameters())
  // are final once the stream reaches this point. The table's order (embedding, blocks, final norm,
  // output layer) is the reverse of the backward's, so FROM only ever falls, to 0 at the end. Data
  // parallelism starts reducing those gradients while the backward goes on. Empty: no calls.
  void set_grads_ready_hook(std::function<void(size_t from)> hook) { grads_ready_ = std::move(hook); }

  // Whether to use cuBLASLt's fused GELU epilogues (on by default) or separate kernels: the same function, for measuring what the fusion saves.
  void set_fused_epilogues(bool on) { fused_ = on; }

  // One micro-batch of training: forward, loss and backward, accumulating into grads(). TOKENS and
  // TARGETS are host arrays [B*T] (checked as the CPU model checks them: InputError). The gradient
  // is that of DLOSS_SCALE times the mean loss over the counted targets (pass 1/micro_batches to
  // average over a step, times the loss scale for fp16). Returns without waiting for the device.
  void forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T, float dloss_scale);

  // The sum of the mean losses of the micro-batches since the last call (waits for the device; 0
  // but on the last stage).
  double take_loss();

  // Forward only, with the loss when TARGETS is given (0 otherwise, and on all but the last
  // stage, whose input is stage_input(0, B, T) and output stage_output(0)); waits for the device.
  double forward(const int32_t* tokens, const int32_t* targets, int B, int T);

  // Pipeline stages: forward_backward() in two halves, on activation slot SLOT. forward_stage
  // runs the stage's forward: from TOKENS on the first stage, from stage_input(SLOT, B, T) (filled
  // by the caller with the previous stage's output) on the others; on the last stage it ends with
  // the loss and its gradient (DLOSS_SCALE as for forward_backward), elsewhere with the output in
  // stage_output(SLOT). backward_stage runs that forward's backward: on the last stage from the
  // loss, elsewhere from stage_output_grad(SLOT) (filled by the caller with the next stage's
  // input gradient); on all but the first stage it leaves the gradient of the stage's input in
  // stage_input_grad(SLOT). Both only queue work on the stream. Stage buffers hold
  // stage_elements(B, T) values.
  void forward_stage(int slot, const int32_t* tokens, const int32_t* targets, int B, int T, float dloss_scale);
  void backward_stage(int slot);
  X* stage_input(int slot, int B, int T);
  const X* stage_output(int slot) const;
  X* stage_output_grad(int slot);
  const X* stage_input_grad(int slot) const;
  // The residual stream's values on this rank: B*T*C, or with sequence parallelism its rows'.
  size_t stage_elements(int B, int T) const { return rows(B * T) * size_t(config_.hidden_size); }

  // The logits [B*T, Vp] of the last forward() (as floats; this rank's columns), for tests.
  std::vector<float> logits() const;

 private:
  struct Acts;
  struct Staging;
  // The shapes of the embedding and the head over a B x T batch, as the ops take them. With
  // tensor parallelism Vp is this rank's vocabulary rows, V its real vocabulary columns and V0 the
  // first of them.
  struct Dims {
    int N, C, V, Vp, V0;
    size_t NC;  // N * C: all rows of the residual stream (sequence parallelism holds rows(N) of them)
  };
  Dims dims(int B, int T) const;
  // The rows the layers run over, for a B x T batch.
  CudaRows layer_rows(int B, int T) const;
  // Layer L of the stage: where it is, and its input (the previous layer's output, or the stage's).
  LayerPlace place(size_t l) const;
  const X* layer_input(size_t l) const;

  void prepare_batch(const int32_t* tokens, const int32_t* targets, int B, int T);
  void stage_token_groups(const int32_t* tokens, int N);
  void upload(int32_t* dst, const int32_t* pinned, size_t count);
  void allocate_activations(int B, int T);
  void run_forward(int B, int T, float dloss);
  void run_backward(int B, int T);
  void norm_forward(X* out, float* mean, float* rstd, const X* inp, size_t w, size_t b, int N);
  void use_slot(int slot);  // the activations of the following calls
  uint64_t dropout_key(uint64_t site) const;  // of the current slot's forward
  // Hidden dropout of n values of the stream, the first of them element FIRST of the whole array.
  void dropout(X* out, const X* inp, size_t n, double p, uint64_t site, uint64_t first);
  // Tensor parallelism: the sum over the group, in place (nothing with one rank); a row-parallel
  // bias (added by one rank only, so that the sum has it once).
  void sum_over_tp(X* data, size_t n);
  const X* row_parallel_bias(size_t b) const;
  // Sequence parallelism: this rank's rows of N and the first of them (all rows and 0 without it).
  size_t rows(int N) const { return sp_ ? size_t(N / tp_->size()) : size_t(N); }
  size_t first_row(int N) const { return sp_ ? rows(N) * size_t(tp_->rank()) : 0; }
  void loss_forward(int N, float dloss);

  // The training path of the layers (CudaTrainingPath), on the current slot.
  const X* p(size_t offset) const override;
  float* g(size_t offset) const override;
  cuda::Gemm& gemm() override { return gemm_; }
  bool fused_epilogues() const override { return fused_; }
  // The norm's rows (norm_rows), then the product and its epilogue (linear_epilogue_forward).
  void norm_linear(const CudaNormLinear<X>& op) override;
  // The product into the slot's branch buffer, its sum over the group (exit_tp), hidden dropout
  // and the residual add.
  void residual_linear(const LayerPlace& at, const X* inp, size_t w, size_t b, int N, int in, uint64_t site,
                       const X* x, X* out) override;
  CudaAttentionCore<X>& attention_core(const LayerPlace& at) override { return causal_attention_of(at.block); }
  const CudaCausalAttention<X>& causal_attention(const LayerPlace& at) override {
    return causal_attention_of(at.block);
  }
  // The core of block BLOCK's attention over the slot's batch, with the slot's dropout.
  CudaCausalAttention<X>& causal_attention_of(int64_t block);
  // A norm of the residual stream's rows (this rank's with sequence parallelism) into OUT [N, C],
  // gathered to all rows for the column-parallel product that follows.
  void norm_rows(X* out, float* mean, float* rstd, const X* inp, size_t w, size_t b, int N) override;
  // The gradient of the input of hidden dropout SITE (a branch's output, or the embedding's) from
  // the stream's, DRES (the slot's a.dres): through the mask and, with sequence parallelism,
  // gathered to all N rows (in the slot's branch buffer, or DRES itself when neither applies).
  const X* branch_grad(const X* dres, int N, uint64_t site) override;
  // A row-parallel product's partial output PARTS [N, C] summed over the group, in place: all rows
  // (all-reduce), or with sequence parallelism this rank's (reduce-scatter), returned.
  X* exit_tp(X* parts, int N) override;
  void norm_backward(X* dinp, const X* dout, const X* inp, size_t w, size_t b, const float* mean, const float* rstd,
                     int R) override;
  void weight_backward(size_t w, size_t b, const X* dout, const X* inp, int N, int C, int OC) override;
  // Through HEAD_NORM_GRAD_ (this rank's part of W's gradient, summed over the group, then added).
  void head_norm_backward(X* dinp, const X* dout, const X* inp, size_t w, const float* rstd, int rows) override;

  ModelConfig config_;
  NcclComm* tp_ = nullptr;
  PipelineStage stage_;
  bool sp_ = false;  // sequence parallelism
  std::vector<ParamTensor> tensors_;
  size_t num_params_ = 0;
  cuda::DeviceAllocator& alloc_;
  cudaStream_t stream_;
  cuda::Gemm gemm_;

  X* params_x_ = nullptr;  // the model's own arrays below, or the caller's Storage
  float* grads_ = nullptr;
  cuda::DeviceArray<X> own_params_x_;
  cuda::DeviceArray<float> own_grads_;
  size_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0, out_w_ = 0;
  // The stage's layers [first_layer_, first_layer_ + layers_.size()) of the layer sequence: their
  // implementations, entries and tensors; by layer, the stage's first layer of its kind (whose
  // activations recomputation shares) and whether it ends its block.
  int64_t first_layer_ = 0;
  std::vector<std::unique_ptr<CudaLayer<X>>> layers_;
  std::vector<LayerSpec> specs_;
  std::vector<LayerTensors> layer_tensors_;
  std::vector<size_t> first_of_kind_;
  std::vector<bool> ends_block_;
  cuda::DeviceArray<float> rope_table_;
  cuda::DeviceArray<float> head_norm_grad_;  // [HS], qk-layernorm only
  std::optional<CudaCausalAttention<X>> core_;  // the attention core of the layer running

  std::vector<std::unique_ptr<Acts>> slots_;
  Acts* acts_ = nullptr;  // the current slot
  std::unique_ptr<Staging> staging_;

  uint64_t drop_seed_ = 0, drop_step_ = 0, drop_micro_ = 0;
  bool training_ = true;
  Recompute recompute_ = Recompute::none;
  bool fused_ = true;
  std::function<void(size_t)> grads_ready_;
  int losses_pending_ = 0;
  std::vector<int> pending_counts_;
};

extern template class GptCudaModel<float>;
extern template class GptCudaModel<__nv_bfloat16>;
extern template class GptCudaModel<__half>;

}  // namespace meg
