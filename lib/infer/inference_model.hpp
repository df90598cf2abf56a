// A model ready for generation: the transformer with a KV cache of several sequences (slots), so
// each new token costs one token's work against the cached keys and values of those before it.
//
// A call to append() takes any mix of prompts (many tokens) and decode steps (one token each) over
// different slots and runs them as one batch where the implementation can: the continuous
// batching of the generator (infer/generator.hpp) refills a finished sequence's slot with a new
// prompt while the others keep decoding. Logits come back in fp32 over the real vocabulary
// (config().vocab_size columns; the padding columns dropped).
//
// Implementations: the CPU one (infer/cpu_inference_model.hpp, fp32, the reference) and the CUDA
// one (CUDA builds only), which agree on greedy output.
//
// Either may split the model over the ranks of a tensor-parallel group, as Megatron's inference
// does (model/tensor_parallel.hpp): each rank holds its shard of the weights and the KV cache of
// its key/value heads, and every rank gets the same logits, bit for bit, so that every rank can
// run the same generator and sample the same tokens. Every rank makes the same calls.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/precision.hpp"
#include "infer/checkpoint_model.hpp"
#include "model/config.hpp"

namespace meg {

// TOKENS to run after the tokens slot SLOT already holds. For the calls that choose the next token
// (append_greedy, append_top_k, append_sample), REPETITION_PENALTY (1: none; else above 0) is the
// sampler's penalty (infer/sampler.hpp) over the distinct tokens the slot then holds, applied to
// the logits before the choice, by a model that penalises() only; append() ignores it.
struct AppendRequest {
  int slot = 0;
  std::span<const int32_t> tokens;
  double repetition_penalty = 1;
};

// One request's draw for InferenceModel::append_sample(): TEMPERATURE 0 (greedy) or above, TOP_P
// in (0, 1] (1: off), U the uniform number in [0, 1) (sampling_uniform's, infer/sampler.hpp).
struct SoftmaxDraw {
  double temperature = 1, top_p = 1, u = 0;
};

class InferenceModel {
 public:
  virtual ~InferenceModel() = default;

  virtual const ModelConfig& config() const = 0;
  virtual int slots() const = 0;       // sequences cached at once
  virtual int max_length() const = 0;  // tokens a slot holds (prompt and generated)
  virtual int length(int slot) const = 0;  // tokens slot SLOT holds now
  virtual void reset(int slot) = 0;        // empties slot SLOT
  // Whether the choosing calls take requests' repetition penalties: the CUDA model keeps each
  // slot's tokens on the device for them; the defaults below, which choose from append()'s logits,
  // do not know a slot's tokens, and throw std::invalid_argument for a penalty.
  virtual bool penalises() const { return false; }

  // Runs each request's tokens (at least one; each slot at most once per call; each token in
  // [0, vocab_size)) at the positions after its slot's, caching their keys and values, and writes
  // the logits that follow the request's last token to LOGITS + i * vocab_size for request i.
  // InputError, before any work, when a slot would pass max_length() or a token is out of range.
  virtual void append(std::span<const AppendRequest> requests, float* logits) = 0;

  // As append(), but writes request i's greedy next token among tokens [0, CHOICES) to TOKENS[i]
  // instead of its logits (CHOICES in [1, vocab_size]: a tokenizer may know fewer tokens than the
  // model has). That is the largest logit, the lowest id among equal ones, never a NaN one: the
  // sampler's choice at temperature 0 without a penalty (token 0 when every logit is NaN). This
  // default chooses on the host from append()'s logits; the CUDA model chooses on the device and
  // copies back only the tokens, where the logits would be 4 bytes a token of the vocabulary.
  virtual void append_greedy(std::span<const AppendRequest> requests, int choices, int32_t* tokens);

  // As append(), but writes request i's K largest logits among tokens [0, CHOICES) to
  // LOGITS[i * K + j] and their tokens to TOKENS[i * K + j], j < K: the largest first, equal ones
  // by token, never a NaN one (where fewer than K are not NaN, the rest have token -1). K in
  // [1, kMaxAppendTopK], CHOICES in [K, vocab_size]. What top-k sampling draws from
  // (Sampler::sample_top_k): the CUDA model selects on the device and copies back K values a row
  // rather than the vocabulary's; this default selects from append()'s logits.
  virtual void append_top_k(std::span<const AppendRequest> requests, int choices, int k, int32_t* tokens,
                            float* logits);

  // As append(), but writes request i's token drawn as DRAWS[i] says among tokens [0, CHOICES) to
  // TOKENS[i]: the sampler's choice (Sampler::sample) at that temperature and top-p, with top-k off
  // and no penalty; and with LOGITS (else null), the logits too, as append() writes them, for the
  // rows whose choice needs them (a batch of mixed choices), so that a row is drawn alike whatever
  // shares its call. This default draws on the host from append()'s logits. The CUDA model draws
  // on the device (sample_rows, ops/cuda/ops.hpp) and without LOGITS copies back only the tokens;
  // its sums are exact integers where the host's are doubles, so its draw may fall the other way
  // where u is within rounding of a boundary between two tokens. One draw a request; CHOICES as
  // append_greedy's.
  virtual void append_sample(std::span<const AppendRequest> requests, int choices, std::span<const SoftmaxDraw> draws,
                             int32_t* tokens, float* logits);

  // Choices queued ahead of the host. queue_choices() is append_greedy() (DRAWS empty) or
  // append_sample() without logits (DRAWS, one a request) that may return before the model is done;
  // take_choices() waits for the oldest queued call and writes its tokens to TOKENS, one a request.
  // With CHAINED, the requests' tokens are empty: each request runs, as its one token, the token the
  // previous queued call chose for its request at the same index, which names the same slot (no
  // other call between the two). So the host can queue step n + 1 before it has seen step n's
  // tokens, and a model that overlaps() runs one step after the other without waiting for the
  // host: the CUDA model reads a chained step's tokens where the last step's choice left them on the
  // device. At most two calls are queued at once, and no call that runs tokens (append() and the
  // choosing calls) is made while one is: std::logic_error. reset() may be, for a slot whose
  // sequence ended while a step for it was queued (that step's row is then computed for nothing);
  // a chained call after a reset(), or after a call that runs tokens, is refused (std::logic_error).
  // length() counts the queued calls' tokens. These defaults make the call at once and keep its
  // tokens.
  virtual bool overlaps() const { return false; }
  virtual void queue_choices(std::span<const AppendRequest> requests, int choices, std::span<const SoftmaxDraw> draws,
                             bool chained);
  virtual void take_choices(int32_t* tokens);

  // A host array of slots() * vocab_size floats that the model owns, the best place for append()'s
  // LOGITS: the CUDA model's is page-locked, so the logits come out at the bus's full rate, where
  // a pageable array's copy goes through the driver's staging at a fraction of it (at batch 32
  // the logits are megabytes a step). Allocated when first asked for.
  virtual std::span<float> logits_buffer() {
    logits_buffer_.resize(size_t(slots()) * size_t(config().vocab_size));
    return logits_buffer_;
  }

 protected:
  // What a model that keeps the default queue calls first in its append() (which the default
  // choosing calls make) and its reset(), so that the queue refuses what the contract above
  // forbids. The default queue's own calls pass.
  void default_queue_append();
  void default_queue_reset();

 private:
  std::vector<float> logits_buffer_;
  // The default queue: the calls' tokens, oldest first; the last call's slots (none once another
  // call came) and tokens; whether its own call is under way.
  std::deque<std::vector<int32_t>> queued_;
  std::optional<std::vector<int>> last_slots_;
  std::vector<int32_t> last_tokens_;
  bool queuing_ = false;
};

// The checks every implementation makes, with the same messages. checked_slot: SLOT, or an
// InputError when it is outside [0, SLOTS). check_append: REQUESTS as append() takes them, for slots
// holding LENGTHS tokens of at most MAX_LENGTH and a vocabulary of V: InputError on a slot out of
// range or named twice, a request without tokens, one that would pass MAX_LENGTH, or a token
// outside [0, V).
int checked_slot(int slot, int slots);
void check_append(std::span<const AppendRequest> requests, std::span<const int> lengths, int max_length, int V);
// std::invalid_argument unless CHOICES (append_greedy's and append_sample's) is in [1, V].
void check_choices(int choices, int V);

// std::invalid_argument unless every request's repetition penalty is 1, or, for a model that
// PENALISES, above 0 and finite.
void check_penalties(std::span<const AppendRequest> requests, bool penalises);
// Whether a request has a repetition penalty (one other than 1).
bool any_penalty(std::span<const AppendRequest> requests);

// std::invalid_argument unless there are REQUESTS draws (append_sample's), each in its range.
void check_draws(std::span<const SoftmaxDraw> draws, size_t requests);

// The checks of a queue_choices() call after QUEUED queued calls, PREVIOUS the slots of the previous
// queued call's requests when no other call came since (else null): std::logic_error for a third
// queued call, or a CHAINED one without a previous call; std::invalid_argument for a chained
// request with tokens or a slot other than the previous call's at its index, or DRAWS neither
// empty nor one a request.
void check_queue(std::span<const AppendRequest> requests, std::span<const SoftmaxDraw> draws, bool chained,
                 size_t queued, const std::vector<int>* previous);
// std::logic_error for a call that runs tokens while QUEUED calls are queued.
void check_nothing_queued(size_t queued);

// The most candidates append_top_k() gives a row.
constexpr int kMaxAppendTopK = 256;
// std::invalid_argument unless K (append_top_k's) is in [1, kMaxAppendTopK] and CHOICES in [K, V].
void check_top_k(int choices, int k, int V);
// Orders one row of append_top_k()'s K candidates (TOKENS -1 last, as the rest of the row): the
// largest logit first, equal ones by token.
void order_top_k(int32_t* tokens, float* logits, int k);

class Comm;

// The model of CHECKPOINT on DEVICE ("cpu" or "cuda"; PRECISION is the CUDA path's, the CPU
// computes in fp32) with SLOTS slots of MAX_LENGTH tokens (0: the model's seq_length), split over
// the members of TP when given (collective over them; null or a group of one: the whole model).
// CHECKPOINT holds the whole model, or this member's shard for TP's size (load_checkpoint_model).
std::unique_ptr<InferenceModel> make_inference_model(const CheckpointModel& checkpoint, const std::string& device,
                                                     Precision precision, int slots, int max_length,
                                                     Comm* tp = nullptr);

// std::invalid_argument when CHECKPOINT holds a shard that is not this member's of TP.
void check_checkpoint_shard(const CheckpointModel& checkpoint, const Comm* tp);

#if MEG_CUDA
std::unique_ptr<InferenceModel> make_cuda_inference_model(const CheckpointModel& checkpoint, Precision precision,
                                                          int slots, int max_length, Comm* tp = nullptr);
#endif

}  // namespace meg
