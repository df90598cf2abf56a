// The transformer of the GPU inference paths (infer/cuda_inference_model.hpp, eval's CUDA scorer,
// RETRO's embedder): a checkpoint's weights converted once to the activation type X, and the
// forward of the layers and of the output layer over N rows of the residual stream, the attention
// left to the caller (against a KV cache, or within whole sequences).
//
// The layers are those of model/cuda_layers.hpp, one per entry of the layer sequence, the ones the
// training model (model/gpt_cuda.hpp) runs, and the transformer is their inference path, which
// leaves out what only training needs: no dropout, no activations kept for a backward (one set of
// buffers serves every layer in turn), no pipeline or sequence parallelism. Forwards of a few rows
// (the decode steps of generation) fuse instead: each linear layer is one small_linear launch
// (ops/cuda/ops.hpp) that applies the norm before it and the bias, activation or residual add
// after it, streaming its weights once; a GPT block is then four such launches and the attention.
// Forwards of more rows run the norm kernels, cuBLASLt products and activation kernels, and each
// branch's residual add is done by the launch of the norm after it (add_layernorm_forward), but
// the last layer's.
//
// Tensor parallelism, as training's: over a group of T > 1 ranks (an NcclComm, one GPU each), a
// member holds its shard of the weights (its heads, MLP columns and vocabulary rows), and the
// layers sum the row-parallel products' parts over the group (in X, as training does), rank 0's part
// carrying the bias: through NCCL, or where the caller gives them PeerSums (parallel/peer_sums.hpp)
// and the parts fit, by one kernel that also adds the sum to the residual stream. The caller sums
// the embedding and reads the logits out (vocabulary-parallel: gathered, or their candidates).
//
// Everything is queued on the transformer's own stream, and the callers queue their work there too
// (stream()): the host never waits inside a forward, and a whole forward can be captured into a
// CUDA graph, since nothing here allocates or synchronises after construction.
// Only for code built with CUDA (MEG_CUDA).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "model/config.hpp"
#include "model/cuda_layers.hpp"
#include "model/param_table.hpp"
#include "ops/cuda/device_memory.hpp"
#include "ops/cuda/gemm.hpp"
#include "ops/cuda/ops.hpp"
#include "ops/cuda/stream.hpp"

namespace meg {

class NcclComm;
class PeerSums;

// Pinned (page-locked) host memory for the transfers of a step, grown on demand. Growing frees the
// old block, so call grow() only when no copy out of or into it is queued.
template <typename T>
class PinnedArray {
 public:
  PinnedArray() = default;
  ~PinnedArray();
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  void grow(size_t n);  // at least N elements, contents lost when it grows
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

template <typename X>
class CudaTransformer final : private CudaLayerPath<X> {
 public:
  // The shapes the ops take, a member's with tensor parallelism: C hidden, NH/NKV heads, HS head
  // size, CQ = NH * HS, QKV the fused projection's width, Fh the MLP's hidden width and FC its
  // first product's (2 Fh for SwiGLU), V the real vocabulary, Vp the padded vocabulary's rows held,
  // from row V0 on.
  struct Dims {
    int C, NH, NKV, HS, CQ, QKV, Fh, FC, V, Vp, V0;
  };

  // Validates CONFIG, uploads PARAMS (config.num_parameters() fp32 values in gpt_parameter_table
  // order; InputError on another length) rounded to X, and allocates the buffers of a
  // forward of up to MAX_ROWS rows. POSITIONS: the positions the RoPE table covers (Llama).
  // TP: the tensor-parallel group (null, or a group of one: the whole model), collective over it;
  // this member uploads its shard (infer/inference_model.hpp), and config() is the group's (its
  // vocabulary padded for it). InputError for a layer kind without a CUDA implementation.
  CudaTransformer(const ModelConfig& config, const std::vector<float>& params, int max_rows, int positions,
                  NcclComm* tp = nullptr);
  ~CudaTransformer();  // waits for the stream
  CudaTransformer(const CudaTransformer&) = delete;
  CudaTransformer& operator=(const CudaTransformer&) = delete;

  const ModelConfig& config() const { return config_; }
  const Dims& dims() const { return dims_; }
  cudaStream_t stream() const override { return stream_.get(); }
  cuda::DeviceAllocator& allocator() { return alloc_; }
  int max_rows() const { return max_rows_; }

  const X* wte() const { return p(offsets_.at(kNoLayer, TensorRole::word_embeddings)); }
  // Null without learned positions.
  const X* wpe() const { return p(offsets_.at(kNoLayer, TensorRole::position_embeddings)); }
  const float* rope_table() const { return rope_table_.get(); }  // null without RoPE
  // The attention layers of the layer sequence (the layers of a KV cache).
  size_t attention_layers() const { return attention_layers_; }

  // The attention of attention layer LAYER (counting the sequence's attention layers from 0) over
  // the rows of blocks(): from qkv [N, QKV] (the fused projection, which it may rotate in place)
  // to out [N, CQ].
  using Attention = std::function<void(size_t layer, X* qkv, X* out)>;

  // A KV cache the layers write each attention layer's new keys and values into (kv_cache_append's
  // arguments, ops/cuda/ops.hpp), before the attention, which then finds them there.
  struct KvCache {
    std::function<std::pair<X*, X*>(size_t layer)> arrays;  // attention layer LAYER's K and V arrays
    const int32_t *slots, *positions;                       // of the rows
    int max_length;
  };

  // Runs every layer on the residual stream x [N, C] (N <= max_rows()), in place. With CACHE, the
  // rows' keys and values go to it first (rotated by their positions with RoPE), fused into the
  // QKV projection's epilogue for a few rows.
  void blocks(X* x, int N, const Attention& attention, const KvCache* cache = nullptr);

  // out [N, Vp] = final_norm(x) @ Wout^T, for N <= max_rows() rows x [N, C]: with tensor
  // parallelism, the columns of this member's vocabulary rows. With ARGMAX (the whole vocabulary
  // only), each row's argmax too where small_linear's epilogue can take it (a few rows): returns
  // whether it did, so that the caller runs cuda::argmax_rows otherwise.
  bool logits(X* out, const X* x, int N, const cuda::SmallLinearArgmax* argmax = nullptr);

  // out [N, C] = final_norm(x): the hidden states the output layer reads (the RETRO embedder's).
  void final_norm(X* out, const X* x, int N) {
    norm(out, x, offsets_.at(kNoLayer, TensorRole::final_norm_weight),
         offsets_.at(kNoLayer, TensorRole::final_norm_bias), N);
  }

  // Whether forwards of up to cuda::kSmallLinearMaxRows rows (decode steps) run their linear
  // layers as small_linear's fused matrix-vector products (the default) or as cuBLASLt products
  // with separate norm, activation and add kernels (for comparison: tests and benchmarks).
  void set_small_linear(bool on) { small_linear_ = on; }

  // With tensor parallelism, the group's sums that fit go through SUMS (null: all through NCCL),
  // which must outlive the forwards.
  void set_peer_sums(PeerSums* sums) { peer_sums_ = sums; }

 private:
  // The inference path of the layers (CudaLayerPath), during blocks().
  const X* p(size_t offset) const override { return offset == kAbsentTensor ? nullptr : weights_.get() + offset; }
  cuda::Gemm& gemm() override { return gemm_; }
  bool fused_epilogues() const override { return true; }
  // fused_norm_linear(), adding the part the branch before left pending.
  void norm_linear(const CudaNormLinear<X>& op) override;
  // residual_add() on the stream (OUT, which must be X), deferring the add where it may.
  void residual_linear(const LayerPlace& at, const X* inp, size_t w, size_t b, int N, int in, uint64_t site,
                       const X* x, X* out) override;
  // The caller's attention and KV cache, for attention layer AT.
  CudaAttentionCore<X>& attention_core(const LayerPlace& at) override;
  // blocks()'s attention core: the caller's callback, after the cache append of the QKV product.
  class CallerAttention final : public CudaAttentionCore<X> {
   public:
    const cuda::SmallLinearKvAppend<X>* kv_append() const override { return cached ? &append : nullptr; }
    void forward(const CudaAttentionActs<X>& a, const LayerDims&) override { (*attention)(layer, a.qkv, a.atty); }
    const Attention* attention = nullptr;
    size_t layer = 0;  // the attention layer's number among the attention layers
    bool cached = false;
    cuda::SmallLinearKvAppend<X> append;
  };

  void norm(X* out, const X* inp, size_t w, size_t b, int N);
  // X += PART (a branch's output, rounded as an add), then OUT = norm(X), in one launch.
  void add_norm(X* out, X* x, const X* part, size_t w, size_t b, int N);
  // OP (CudaNormLinear) for the layers that follow a norm (the fused QKV, the MLP's first layer
  // and its activation, the output layer), its epilogue any of small_linear's but residual.
  // RESIDUAL, where given, is OP.x itself, with the part residual_add() left in branch_ still to
  // be added: the norm's launch adds it (OP.x is written). ARGMAX goes with the argmax epilogue,
  // which the separate launches run as store: returns whether small_linear's launch took the
  // whole call.
  bool fused_norm_linear(const CudaNormLinear<X>& op, X* residual, const cuda::SmallLinearArgmax* argmax = nullptr);
  // X [N, C] += INP [N, IN] @ W^T + B: the layers that end a branch (a row-parallel layer, its
  // parts summed over the group). Where the product and the add are separate launches and
  // DEFER_ADD, the part is left in branch_ for the next norm to add, and the call returns true.
  bool residual_add(X* x, const X* inp, size_t w, size_t b, int N, int in, bool defer_add);

  NcclComm* tp_;  // null for the whole model
  PeerSums* peer_sums_ = nullptr;
  ModelConfig config_;
  Dims dims_;
  int max_rows_;
  bool small_linear_ = true;
  // The layer sequence: the layers, their entries, and by layer its number among the attention
  // layers (for an attention layer).
  std::vector<std::unique_ptr<CudaLayer<X>>> layers_;
  std::vector<LayerSpec> specs_;
  std::vector<size_t> attention_layer_;
  size_t attention_layers_ = 0;
  cuda::Stream stream_;  // first in, last out: the members below queue work on it
  cuda::DeviceAllocator alloc_;
  cuda::Gemm gemm_;
  TensorIndex offsets_;  // this rank's tensors
  cuda::DeviceArray<X> weights_;
  cuda::DeviceArray<float> rope_table_;
  // The output layer's norm, a row-parallel product's output, and one layer's activations (each
  // layer's arrays, layer_acts_, carved from its start), reused by every layer.
  cuda::DeviceArray<X> ln_, branch_;
  cuda::DeviceArray<char> acts_;
  std::vector<std::vector<void*>> layer_acts_;
  // During blocks(): whether a branch may leave its residual add to the next norm's launch, the
  // stream a part left in branch_ is still to be added to (null: none), and the attention core.
  bool defer_adds_ = false;
  X* pending_ = nullptr;
  CallerAttention core_;
  const KvCache* cache_ = nullptr;
};

}  // namespace meg
