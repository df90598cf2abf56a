// The CUDA inference model (infer/inference_model.hpp) and the knobs its benchmark turns.
//
// How a call to append() runs:
//   - The requests' tokens are laid out one after the other and cut into passes of at most
//     pass_tokens rows (a request moves whole to the next pass when it fits there and not here, so
//     a prompt is cut only when it is longer than a pass). Each pass is one forward of its rows.
//   - A pass embeds its tokens at their own positions and runs the blocks (infer/cuda_transformer.hpp).
//     In each block, kv_cache_append rotates q and k by the tokens' positions (Llama) and writes k
//     and v to the cache (in the QKV projection's epilogue for a pass of a few rows); then a prompt
//     of a fresh slot attends within itself through the flash attention of training
//     (attention_forward over its rows, the fast path for long prompts; one launch for consecutive
//     prompts of one length), and every other token (decode steps, prompt tokens after cached ones)
//     attends to its slot's cache through cached_attention (flash-decoding,
//     kernels/cached_attention.cu).
//   - Only each request's last row goes through the final norm and the output layer; its logits are
//     converted to fp32 on the device and copied to the caller's array once, at the end. For
//     append_greedy() the device takes each such row's argmax instead, for append_top_k() its
//     K largest logits, and for append_sample() its draw (kernels/logits.cu), and only those are
//     copied back.
// The host waits for the device once per call, for the logits or the tokens; a queued call
// (queue_choices) leaves its tokens in page-locked memory behind an event, for take_choices() to
// wait on, so that the generator can queue the next step first. Calls alternate between two sets
// of page-locked staging arrays, so that the call queued after a queued one never overwrites
// what that one's copies have yet to read.
//
// A decode step (every request one token) is one pass whose launches depend only on the number of
// requests and on whether its longest context is still short enough for the attention's staged
// grid (cached_attention_staged), so it is captured into a CUDA graph the second time such a shape
// is seen and replayed after that: hundreds of launches (and cuBLASLt's host work) become one. The
// inputs the graph reads (tokens, positions, slots, and append_sample()'s draws) are copied to
// fixed device arrays before each replay; a chained step (queue_choices) reads its tokens where the
// last step's choice left them, through a graph of its own.
//
// The KV cache: per attention layer K and V [slots, NKV, max_length, HS] of X, allocated in full
// up front.
//
// Tensor parallelism (a group of T > 1 processes, one GPU each, through NCCL): each member holds
// its shard of the weights and the cache of its NKV/T key/value heads; the embedding and the
// row-parallel layers are summed over the group. For an argmax or top-k readout each member takes
// the K largest of its vocabulary shard of the logits (after the repetition penalty, if any) and
// the members' candidates are gathered, K a row; the argmax is merged on the device, top k's on the
// host. Other readouts gather the members' shards of the logits (in fp32), so that every member has
// the same logits and draws from them on its device alike. The collectives are part of the
// captured decode graphs (NCCL supports capture since 2.9); they run once directly first, as
// every decode size does, so their connections are made before a capture.
// Only for code built with CUDA (MEG_CUDA).
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "infer/inference_model.hpp"

namespace meg {

struct CudaInferenceOptions {
  bool cuda_graphs = true;  // capture decode steps (off: every step launched one kernel at a time)
  int pass_tokens = 4096;   // rows of a forward pass, at least the slots (activation memory grows with it)
  bool small_linear = true; // passes of a few rows fuse each linear layer (infer/cuda_transformer.hpp)
};

class CudaInferenceModel : public InferenceModel {
 public:
  virtual cudaStream_t stream() const = 0;  // where all its work is queued (for timing)
};

// The model on this process's GPU (under an MPI launcher, the node's GPUs taken by local rank in
// turn), split over the members of TP when given (collective over them).
std::unique_ptr<CudaInferenceModel> make_cuda_inference_model(const CheckpointModel& checkpoint, Precision precision,
                                                              int slots, int max_length,
                                                              const CudaInferenceOptions& options,
                                                              Comm* tp = nullptr);

}  // namespace meg
