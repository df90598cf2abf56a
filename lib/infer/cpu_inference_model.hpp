// The CPU inference model: the decoder of model/gpt.hpp (GPT-2 or Llama, fp32, the ops of
// ops/cpu/ops.hpp) run over the new tokens only, against a cache of every earlier token's keys and
// values.
//
// The cache is one array for keys and one for values, [attention layer][slot][position][NKV*HS]: the keys
// of a slot's positions in one layer are contiguous rows, which the attention reads with one GEMM
// per head. Llama's keys are cached after their rotation (RoPE at their own positions), so a key
// is rotated once. GPT-2 adds its learned position embedding at each token's position; its slots
// hold at most seq_length tokens (the learned positions), Llama's any number.
//
// The layers are those of model/cpu_layers.hpp, one per entry of the layer sequence, the model
// their generation path: its row-parallel sums, no dropout, and the attention's core over the
// cache (CachedAttention).
//
// One append() packs the tokens of all its requests into the rows of one batch: the norms, the
// linear layers and the MLP run over all rows at once (one GEMM each); only the attention runs
// request by request, against the request's own slot. The logits are those of each request's last
// row only. The result equals GptModel<float>'s forward over the whole sequence to float rounding
// (tests/unit/test_infer_model.cpp).
//
// Tensor parallelism (a group of T > 1 ranks): a rank holds its shard of the weights and caches
// the keys and values of its NKV/T key/value heads. The embedding is vocabulary-parallel (each
// rank looks up the tokens of its rows, zeros for the others, summed over the group), the
// row-parallel outputs (attention projection, second MLP layer) are summed over the group with
// rank 0 adding the bias, and each rank's vocabulary shard of the logits is gathered, so every
// rank has them all (tests/mpi/test_infer_tp.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "infer/inference_model.hpp"
#include "model/cpu_layers.hpp"
#include "model/gpt.hpp"

namespace meg {

class CpuInferenceModel final : public InferenceModel, private CpuLayerPath<float> {
 public:
  // CONFIG (validated here) with PARAMS laid out as gpt_parameter_table(config): the whole model,
  // of which a member of TP (when given) keeps its shard; SLOTS sequences of MAX_LENGTH tokens
  // (0: seq_length). InputError on a bad size.
  CpuInferenceModel(const ModelConfig& config, std::vector<float> params, int slots, int max_length,
                    Comm* tp = nullptr);

  const ModelConfig& config() const override { return config_; }
  int slots() const override { return slots_; }
  int max_length() const override { return max_length_; }
  int length(int slot) const override;
  void reset(int slot) override;
  void append(std::span<const AppendRequest> requests, float* logits) override;

 private:
  // The generation path of the layers (CpuLayerPath).
  const float* p(size_t offset) const override;  // null for a tensor the model lacks
  size_t rows(int N) const override { return size_t(N); }
  void norm_rows(float* out, float* mean, float* rstd, const float* inp, size_t w, size_t b, int N) override;
  // OUT [N, C] = INP [N, IN] @ W^T + B: a row-parallel layer, its parts summed over the group (into branch_).
  float* row_parallel_forward(const float* inp, size_t w, size_t b, int N, int in) override;
  void hidden_dropout(float*, int, uint64_t) override {}
  AttentionCore<float>& attention_core(const LayerPlace& at) override;
  // The attention's core of cache layer L over the requests of the append running.
  class CachedAttention final : public AttentionCore<float> {
   public:
    explicit CachedAttention(CpuInferenceModel& model) : model_(model) {}
    void forward(AttentionActs<float>& a, const LayerDims&) override { model_.attend(l_, model_.requests_, a); }
    size_t l_ = 0;

   private:
    CpuInferenceModel& model_;
  };

  // The cached keys (or values) of attention layer L (counting the attention layers), slot S, from
  // position 0.
  float* cache(std::vector<float>& kv, size_t l, int s) const;
  // Attention layer L's attention over the packed rows of A.qkv: caches the new keys and values and writes
  // the attention output of each row into A.atty (A.q the queries' scratch).
  void attend(size_t l, std::span<const AppendRequest> requests, const AttentionActs<float>& a);
  // Grows every scratch array to hold N rows and a score matrix of SCORES values.
  void reserve(int N, size_t scores);
  // The embedding of the requests' tokens at their positions into x_.
  void embed(std::span<const AppendRequest> requests, int N);
  // LOGITS [R, V] from the final norm of the R rows in ln_.
  void output(float* logits, int R);
  void sum_over_tp(float* data, size_t n);

  ModelConfig config_;  // with TP, its vocabulary padded for the group
  Comm* tp_ = nullptr;  // null for the whole model
  int tp_size_ = 1, tp_rank_ = 0;
  std::vector<float> params_;
  TensorIndex w_;  // this rank's tensors
  std::vector<std::unique_ptr<CpuLayer<float>>> layers_;
  std::vector<LayerSpec> specs_;
  std::vector<size_t> cache_layer_;  // by layer: an attention layer's layer of the cache
  CachedAttention core_{*this};
  std::span<const AppendRequest> requests_;  // of the append running
  int slots_ = 0, max_length_ = 0;
  // This rank's sizes: NH, NKV query and key/value heads, CQ = NH * HS, Vp the vocabulary rows from
  // V0 on; C and the real V are the model's.
  int C_ = 0, NH_ = 0, NKV_ = 0, HS_ = 0, CQ_ = 0, KV_ = 0, QKV_ = 0, V_ = 0, Vp_ = 0, V0_ = 0;
  std::vector<int> lengths_;
  std::vector<float> k_cache_, v_cache_;

  // Scratch of one append, grown as needed: the residual stream, the final norm, a row-parallel
  // product's output and the activations of one layer (the same for every layer) over N packed
  // rows; scores_ holds one head's attention scores; gathered_ every rank's logits.
  std::vector<float> x_, ln_, branch_, layer_acts_, scores_, last_, logits_, gathered_;
};

}  // namespace meg
