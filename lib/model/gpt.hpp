// The decoder-only language model on the CPU (GPT-2, Llama and their mixes of features), forward
// and backward by hand.
//
// GptModel<F> follows llm.c's train_gpt2.c: every parameter lives in ONE flat contiguous array,
// described by a table of named tensors (ParamTensor), and the gradients live in a second flat array
// of the same layout. Activations live in one flat buffer sized for the (B, T) of the last forward
// (grown, never shrunk). Forward runs the ops of ops/cpu/ops.hpp; backward runs their backwards in
// reverse order and ACCUMULATES into the gradient array, so gradient accumulation over
// micro-batches is forward + backward per micro-batch between two zero_grad() calls.
//
// One block (an attention layer and an MLP layer, "*-"; pre-norm), with N = B*T rows:
//   h    = norm1(x)                                   LayerNorm or RMSNorm (norm)
//   qkv  = h @ Wqkv^T + bqkv                          [N, C + 2*NKV*HS]
//   q, k, v = split(qkv)                              [B,T,NH,HS], [B,T,NKV,HS], [B,T,NKV,HS]
//   q, k = rope(q), rope(k)                           position-embedding-type rope only
//   y    = causal_attention(q, k, v)                  grouped-query when NKV < NH
//   x    = x + y @ Wproj^T + bproj
//   h    = norm2(x)
//   x    = x + act(h @ Wfc1^T + bfc1) @ Wfc2^T + bfc2  act: GELU (tanh) or SwiGLU (fc1 = [gate; up])
// The embedding adds the learned absolute positions (position-embedding-type learned_absolute);
// then logits = norm_f(x) @ Wout^T over the padded vocabulary Vp (Wout is the token embedding when
// tied); columns >= vocab_size take no part in the loss.
//
// Dropout, as Megatron's GPT applies it (only in training mode, and only where the config's
// probability is above 0; p == 0 runs exactly the code without dropout): hidden_dropout on the
// embedding output and on the outputs of linear_proj and linear_fc2 (biases included) before each
// residual add; attention_dropout on the softmax probabilities. The masks are the counter-based
// ones of ops/cpu/ops.hpp (dropout_forward), keyed by set_dropout_key()'s (seed, step, micro) and a
// site id: 0 for the embedding, 3l+1 for block l's attention probabilities, 3l+2 for its
// linear_proj output, 3l+3 for its linear_fc2 output. The same key gives the same masks, so a
// forward can be repeated exactly (finite differences, exact resume); backward() regenerates the
// masks of the last forward instead of storing them.
//
// The parameters are the model's parameter table (model/param_table.hpp; names, shapes and storage
// order in model/layer_spec.hpp); the models find their tensors in it by layer and role
// (TensorIndex). Row layouts of the fused tensors: linear_qkv's rows are [q (NH*HS rows); k
// (NKV*HS); v (NKV*HS)], i.e. Hugging Face's q_proj, k_proj, v_proj (GPT-2's c_attn, transposed)
// stacked, NOT Megatron's per-group interleaving; linear_fc1's rows for SwiGLU are [gate (F rows);
// up (F rows)], i.e. Hugging Face's gate_proj and up_proj stacked (Megatron's order). Checkpoint
// conversion maps these.
//
// Initialisation (Megatron's, model/init.hpp): normal(0, init_std) for every weight matrix and
// embedding, normal(0, init_std / sqrt(2 L)) for the output projections of each block (linear_proj
// and linear_fc2 weights), zeros for biases, ones for norm weights. The normals are counter-based:
// element i of the table's tensor k is a function of (seed, k, i) alone (Philox4x32-10, then
// Box-Muller), so a tensor-parallel rank or pipeline stage generates its own part directly, on any
// number of threads, and gets exactly its slice of the whole model's initialisation (the same for
// float and double up to the final rounding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/cpu_layers.hpp"
#include "model/init.hpp"  // gpt_init_parameters and gpt_init_local, which the models' users call
#include "model/param_table.hpp"
#include "model/param_tensor.hpp"
#include "model/pipeline.hpp"
#include "parallel/comm.hpp"

namespace meg {

// Tensor parallelism (model/tensor_parallel.hpp) over the group TP, as Megatron's layers do it:
// the model holds its rank's shard of every split tensor; the column-parallel products (QKV, fc1)
// run on the rank's heads and MLP columns and their input gradients are summed over the group;
// the row-parallel ones (proj, fc2) sum their partial outputs over the group before the
// (replicated) bias; the embedding and the output layer split the vocabulary, the lookup summed
// over the group and the cross-entropy's log-sum-exp and target logit combined across it. The
// replicated tensors' gradients come out the same on every rank. Attention dropout draws its masks
// by the rank's own head numbers, so with tensor parallelism they differ from one process's (as
// Megatron's per-rank dropout generators do); hidden dropout is the same.
//
// The stage's layers are those of model/cpu_layers.hpp, one per entry of its part of the layer
// sequence, which the model runs in order as their training path (its parameters, its split of
// the stream, its dropout, causal attention over its batch).
template <typename F>
class GptModel final : private CpuTrainingPath<F> {
 public:
  // Validates CONFIG (InputError on a bad one, or on one that does not split over TP's ranks) and
  // allocates the parameters (zeroed; call init() for Megatron's initialisation). The gradients
  // are allocated (zeroed) when first needed, so a model that only runs forwards (evaluation,
  // embedding) holds none.
  // Activations are allocated by forward(). TP null or of one rank: the whole model.
  // STAGE: this rank's pipeline stage (model/pipeline.hpp): its blocks, and the embeddings on the
  // first stage, the final norm and output layer on the last.
  // SEQUENCE_PARALLEL (with TP of more than one rank): the residual stream, its norms and dropout
  // are split by rows over TP (all-gathered before the column-parallel products, reduce-scattered
  // after the row-parallel ones), Megatron's sequence parallelism; the norm weights' and position
  // embedding's gradients then cover this rank's rows only (their entries' sequence_parallel).
  // PARAMS and GRADS: the caller's storage for the parameters and gradients (num_parameters()
  // long: the size of STAGE's stage_table of TP's table; they must outlive the model), or null for
  // the model's own. Models may share storage: each keeps its own activations, so a pipeline stage
  // holds several micro-batches' forwards at once (their backwards add into the one gradient
  // array), and a rank's model chunks can sit in one flat array under one optimizer.
  explicit GptModel(const ModelConfig& config, Comm* tp = nullptr, PipelineStage stage = {},
                    bool sequence_parallel = false, F* params = nullptr, F* grads = nullptr);
  GptModel(const GptModel&) = delete;  // the activation pointers point into the model's own buffer
  GptModel& operator=(const GptModel&) = delete;

  const ModelConfig& config() const { return config_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  // The tensor named NAME; std::out_of_range for an unknown name.
  const ParamTensor& tensor(const std::string& name) const;
  size_t num_parameters() const { return num_parameters_; }

  F* params() { return params_; }
  const F* params() const { return params_; }
  F* grads() { return ensure_grads(); }
  F* param(const std::string& name) { return params_ + tensor(name).offset; }
  F* grad(const std::string& name) { return ensure_grads() + tensor(name).offset; }

  // Megatron's initialisation (see the top of this file), deterministic in SEED: this rank's
  // shard of this stage's tensors of the full model's initialisation, generated directly.
  void init(uint64_t seed);
  int tp_size() const { return tp_ ? tp_->size() : 1; }
  void zero_grad();

  // Runs the model on TOKENS[B*T] (row-major [B,T], each in [0, vocab_size); InputError
  // otherwise). With TARGETS[B*T] (each in [0, vocab_size) or -1 to ignore the position) returns
  // the mean cross-entropy over the counted positions and keeps what backward() needs; with
  // TARGETS null returns 0 and only the logits are meaningful. With learned positions, T <= seq_length (the
  // number of learned positions); InputError otherwise.
  double forward(const int32_t* tokens, const int32_t* targets, int B, int T);

  // The dropout key of the following forwards (see the top of this file); default (0, 0, 0).
  void set_dropout_key(uint64_t seed, uint64_t step, uint64_t micro) {
    drop_seed_ = seed;
    drop_step_ = step;
    drop_micro_ = micro;
  }
  // Training mode (the default) applies the config's dropout; evaluation mode applies none.
  void set_training(bool training) { training_ = training; }
  bool training() const { return training_; }

  // The MoE layers' auxiliary losses of the last training forward (model/cpu_layers.hpp), summed
  // over this stage's layers. backward() adds the gradient of their weighted sum to the router's.
  AuxiliaryLosses auxiliary_losses() const;

  // Gradient of the mean loss of the last forward (which must have had targets; std::logic_error
  // otherwise), ACCUMULATED into grads(), plus the MoE layers' auxiliary losses' gradients.
  void backward();

  // Pipeline stages. The stage's forward from its input: TOKENS on the first stage, HIDDEN [B*T, C]
  // (the previous stage's stage_output()) on the others; the last stage returns the loss as
  // forward() does, the others 0 with their output in stage_output(). backward_stage() takes DOUT,
  // the gradient of stage_output() (null on the last stage, which starts from its loss), and leaves
  // the gradient of HIDDEN in stage_input_grad() on all but the first stage.
  double forward_stage(const int32_t* tokens, const F* hidden, const int32_t* targets, int B, int T);
  void backward_stage(const F* dout);
  const F* stage_output() const { return res_.empty() ? nullptr : res_.back(); }
  // The size of stage_output() (and of stage_input_grad()): this rank's rows of the stream.
  size_t stage_floats(int B, int T) const { return rows(B * T) * size_t(config_.hidden_size); }
  bool sequence_parallel() const { return sp_; }
  const F* stage_input_grad() const { return dres_; }
  const PipelineStage& stage() const { return stage_; }

  // From the last forward: logits [B,T,Vp] (Vp = padded_vocab_size) and per-position losses [B*T]
  // (0 at ignored positions; meaningful only with targets).
  const F* logits() const { return logits_; }
  const F* losses() const { return losses_; }

  // The model up to its final norm only (the whole model on one stage: TOKENS as forward() takes
  // them), for callers that want hidden states rather than logits (a retrieval embedder pools
  // them): skips the output layer, the costliest product of a small model. Leaves final_hidden()
  // set; logits(), losses() and backward() are not available after it.
  void forward_hidden(const int32_t* tokens, int B, int T);
  // The final norm's output [B*T, C] of the last forward, or of forward_hidden(), on the last stage.
  const F* final_hidden() const { return lnf_; }

 private:
  // The shapes of one forward/backward of a B x T batch outside the layers (model/cpu_layers.hpp
  // has theirs): N rows of C; V the whole vocabulary, of which this rank holds the Vp padded rows
  // from V0 on; NC = N * C, the size of the residual stream.
  struct Dims {
    int N, C, V, Vp, V0;
    size_t NC;
  };
  Dims dims(int B, int T) const;

  void allocate_activations(int B, int T);
  F* ensure_grads();  // the caller's storage, or the model's own, allocated on first use
  // The training path of the layers (CpuTrainingPath).
  const F* p(size_t offset) const override { return offset == kAbsentTensor ? nullptr : params_ + offset; }
  F* g(size_t offset) override { return offset == kAbsentTensor ? nullptr : grads_ + offset; }
  void norm_backward(F* dinp, const F* dout, const F* inp, size_t w, size_t b, const F* mean,
                     const F* rstd, int N) override;
  void hidden_dropout(F* branch, int N, uint64_t site) override;
  const F* branch_grad(const F* dres, int N, uint64_t site) override;
  AttentionCore<F>& attention_core(const LayerPlace& at) override { return causal_attention_of(at.block); }
  const CausalAttention<F>& causal_attention(const LayerPlace& at) override { return causal_attention_of(at.block); }
  CausalAttention<F>& causal_attention_of(int64_t block);
  cpu::DropoutKey dropout_key(uint64_t site) const { return {fwd_seed_, fwd_step_, fwd_micro_, site}; }
  // Where the stage's layer L is.
  LayerPlace place(size_t l) const {
    return {layer_tensors_[l], static_cast<int64_t>(first_layer_ + l), specs_[l].block};
  }
  // The tensor-parallel pieces (each the plain op when the group has one rank).
  void embed(const int32_t* tokens, int B, int T);
  void embed_backward(int B, int T);
  F* row_parallel_forward(const F* inp, size_t w, size_t b, int N, int in) override;
  // Sequence parallelism: this rank's rows of N and the first of them; all rows from this rank's
  // (all-gather) and this rank's rows of the parts' sum (reduce-scatter; without sequence
  // parallelism an all-reduce in place); a norm on this rank's rows with its output gathered.
  size_t rows(int N) const override;
  size_t first_row(int N) const;
  const F* enter_tp(const F* local, int N);
  F* exit_tp(F* parts, int N) override;
  void norm_rows(F* out, F* mean, F* rstd, const F* inp, size_t w, size_t b, int N) override;
  void sum_over_tp(F* data, size_t n);
  void sum_over_heads(F* part, size_t n) override { sum_over_tp(part, n); }
  double loss_forward(const int32_t* targets, int N);
  // forward_stage()'s work, stopping after the final norm when LOGITS is false.
  double run_forward(const int32_t* tokens, const F* hidden, const int32_t* targets, int B, int T, bool logits);
  void loss_backward(int N);

  ModelConfig config_;
  Comm* tp_ = nullptr;
  PipelineStage stage_;
  bool sp_ = false;
  size_t first_layer_ = 0;  // the index of the stage's first layer in the whole model's sequence
  bool forward_done_ = false;
  std::vector<ParamTensor> tensors_;
  std::vector<F> own_params_, own_grads_;  // unless the caller gave the storage
  F* params_ = nullptr;
  F* grads_ = nullptr;
  size_t num_parameters_ = 0;
  size_t wte_ = 0, wpe_ = kAbsentTensor, lnf_w_ = 0, lnf_b_ = kAbsentTensor, out_w_ = 0;
  // The stage's layers: their entries of the sequence, their tensors, their implementations.
  std::vector<LayerSpec> specs_;
  std::vector<LayerTensors> layer_tensors_;
  std::vector<std::unique_ptr<CpuLayer<F>>> layers_;
  std::optional<CausalAttention<F>> core_;  // the attention core of the layer running
  std::vector<double> rope_inv_freq_;        // empty without RoPE

  // Activations for (B_, T_), carved out of acts_ (which grows when a forward needs more).
  std::vector<F> acts_;
  int B_ = 0, T_ = 0;
  std::vector<F*> layer_acts_;  // each layer's activations
  std::vector<F*> res_;  // res_[l]: input of layer l; res_[L]: output of the last layer
  F *lnf_ = nullptr, *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr, *logits_ = nullptr,
    *losses_ = nullptr, *scratch_ = nullptr;
  // Backward scratch (also in acts_): the stream's gradient, the final norm's output's, the
  // layers' (one for all), the logits'.
  F *dres_ = nullptr, *dlnf_ = nullptr, *layer_scratch_ = nullptr;
  F* dlogits_ = nullptr;
  F *sp_full_ = nullptr, *sp_local_ = nullptr;  // sequence parallelism: all rows, this rank's rows
  std::vector<int32_t> tokens_, targets_;
  std::vector<double> lse_;  // vocabulary-parallel cross-entropy: each row's log-sum-exp
  bool have_targets_ = false;
  // Dropout: the key and mode for the next forward, and what the last forward used.
  uint64_t drop_seed_ = 0, drop_step_ = 0, drop_micro_ = 0;
  bool training_ = true;
  double fwd_hidden_p_ = 0, fwd_attn_p_ = 0;
  uint64_t fwd_seed_ = 0, fwd_step_ = 0, fwd_micro_ = 0;
};

extern template class GptModel<float>;
extern template class GptModel<double>;

}  // namespace meg
