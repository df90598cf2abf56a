// Log-likelihoods of given tokens under a model, the quantity every meg-eval task reduces to (as
// lm-evaluation-harness's loglikelihood requests): for each scored position, log p(target | the
// tokens before it) and whether the target is the model's greedy choice there.
//
// Whole sequences are run from their start (no cache): the rows of a batch are independent, and a
// row shorter than the batch's T is padded at its end with any valid token and targets of -1,
// which the causal attention keeps from touching the positions before them.
//
// Implementations: the CPU one (eval/cpu_scorer.hpp, fp32, the reference) and the CUDA one (CUDA
// builds only).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/precision.hpp"
#include "infer/checkpoint_model.hpp"
#include "model/config.hpp"

namespace meg {

struct TokenScore {
  double logprob = 0;   // log-softmax of the logits over the real vocabulary, at the target
  bool greedy = false;  // the target is the argmax (the lowest id among equal maxima, as torch's)
};

class Scorer {
 public:
  virtual ~Scorer() = default;

  virtual const ModelConfig& config() const = 0;
  virtual int max_length() const = 0;  // longest row (the model's seq_length)
  virtual int max_batch() const = 0;   // most rows per call

  // TOKENS and TARGETS are [B, T] row-major (B <= max_batch(), T <= max_length(); tokens in
  // [0, vocab_size), targets in [0, vocab_size) or -1). Writes OUT[b*T + t] for each position
  // whose target is not -1 (the others are left as they are). InputError on bad shapes or ids.
  virtual void score(const int32_t* tokens, const int32_t* targets, int B, int T, TokenScore* out) = 0;
};

// The scorer of CHECKPOINT on DEVICE ("cpu" or "cuda"; PRECISION is the CUDA path's) for batches of
// up to MAX_BATCH rows.
std::unique_ptr<Scorer> make_scorer(const CheckpointModel& checkpoint, const std::string& device, Precision precision,
                                    int max_batch);

#if MEG_CUDA
std::unique_ptr<Scorer> make_cuda_scorer(const CheckpointModel& checkpoint, Precision precision, int max_batch);
#endif

}  // namespace meg
