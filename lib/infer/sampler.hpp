// Choosing the next token from a model's logits.
//
// In order, as Hugging Face's generate() applies its logits processors:
//   1. repetition penalty R (CTRL, Keskar et al. 2019; Hugging Face's): for each DISTINCT token of
//      the sequence so far (prompt and generated), a logit l > 0 becomes l / R, any other l * R,
//      in fp32 with R rounded to fp32 (penalised_logit(), as transformers' processor computes it on
//      fp32 logits, and as a device can reproduce it bit for bit);
//   2. temperature 0 (the default): greedy, the largest logit, the lowest id among equal ones;
//   3. otherwise the logits divided by the temperature, then top-k (0 = off): the k largest logits
//      (exactly k; equal logits ordered by id), then top-p (nucleus, 1 = off): the fewest of the
//      largest probabilities (renormalised after top-k) whose sum reaches p, at least one;
//   4. one draw from the softmax over what is kept.
//
// A NaN logit is never chosen (unless every logit is NaN: then token 0). An infinite largest logit
// (over the temperature) takes all the probability: the first such candidate is chosen.
//
// Sums of probabilities are taken in a fixed order (the whole vocabulary's by id within chunks of
// 2048 ids, then the chunks' in order; top-k's candidates in order), so a choice depends only on
// the logits, the parameters and u, never on the number of threads.
//
// The cost is a pass or two over the logits, never a sort of the vocabulary: greedy and top-k
// scan them once, most with one comparison each (top-k keeps a heap of k); a softmax over the
// whole vocabulary (temperature alone, or top-p without top-k) takes an exponential a token, its
// chunks on all threads (core/parallel.hpp), and top-p then finds its nucleus from the sums of
// buckets of probabilities, sorting one small bucket. tests/bench/bench_sampler.cpp times each case.
//
// The draw takes a uniform number u in [0, 1) given by the caller; sampling_uniform() makes it
// from (seed, stream, step) with Philox (core/philox.hpp), counter-based, so a sequence's tokens
// depend on its seed, its stream (the generator's request number) and its step, never on which
// other sequences share the batch, which slot it has, or the device.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace meg {

struct SamplingParams {
  double temperature = 0;         // 0: greedy
  int top_k = 0;                  // 0: off
  double top_p = 1;               // 1: off
  double repetition_penalty = 1;  // 1: off
  uint64_t seed = 0;

  // InputError "WHERE: ..." naming the first parameter out of its range: temperature >= 0,
  // top_k >= 0, top_p in (0, 1], repetition_penalty > 0.
  void validate(const std::string& where) const;
  bool greedy() const { return temperature == 0; }
  // The three below say what a model can hand over instead of all the logits. Each needs the
  // logits the model has to be the ones the choice is made from: without a penalty, or with one
  // the model applies (PENALISED: InferenceModel::penalises()).
  // Whether the choice is the largest logit (greedy), which a model can make where the logits are
  // (InferenceModel::append_greedy) without handing them over.
  bool argmax_of_logits(bool penalised = false) const { return greedy() && penalty_applied(penalised); }
  // Whether the choice needs only the top_k largest logits of VOCAB_SIZE (top-k sampling:
  // Sampler::sample_top_k).
  bool top_k_of_logits(int vocab_size, bool penalised = false) const {
    return !greedy() && penalty_applied(penalised) && top_k > 0 && top_k < vocab_size;
  }
  // Whether the choice is a draw from the softmax of all VOCAB_SIZE logits, at most kept to a
  // nucleus (sampling without top-k: InferenceModel::append_sample).
  bool softmax_of_logits(int vocab_size, bool penalised = false) const {
    return !greedy() && penalty_applied(penalised) && (top_k == 0 || top_k >= vocab_size);
  }

 private:
  bool penalty_applied(bool penalised) const { return penalised || repetition_penalty == 1; }
};

// Logit L of a token the repetition penalty R applies to: L / R for L > 0, else L * R, in fp32.
inline float penalised_logit(float l, float r) { return l > 0 ? l / r : l * r; }

// The uniform number in [0, 1) of STEP of STREAM under SEED: 53 bits of
// Philox4x32-10(counter = (step mod 2^32, step div 2^32, stream mod 2^32, stream div 2^32),
// key = (seed mod 2^32, seed div 2^32)), words 0 and 1.
double sampling_uniform(uint64_t seed, uint64_t stream, uint64_t step);

class Sampler {
 public:
  explicit Sampler(int vocab_size);

  // The token chosen from LOGITS[vocab_size] under PARAMS (valid), HISTORY being the sequence so
  // far (for the repetition penalty; ids in [0, vocab_size)) and U the draw (unused when greedy).
  int32_t sample(const float* logits, std::span<const int32_t> history, const SamplingParams& params, double u);

  // The token sample() chooses for PARAMS with top-k on (0 < top_k < vocab_size), from the logits'
  // top_k largest only, PARAMS's repetition penalty already applied to them (or none): LOGITS and
  // their TOKENS as InferenceModel::append_top_k gives them (the largest first, equal ones by
  // token; token -1 past the last; at least top_k).
  int32_t sample_top_k(std::span<const int32_t> tokens, std::span<const float> logits, const SamplingParams& params,
                       double u);

  // The order of candidates every choice uses (and InferenceModel::append_top_k's rows): the
  // larger logit first, the lower id among equal ones.
  struct Candidate {
    double logit;
    int32_t id;
  };
  static bool before(const Candidate& a, const Candidate& b);

 private:
  const float* penalise(const float* logits, std::span<const int32_t> history, double penalty);
  Candidate largest(const float* scan) const;
  void select(const float* scan, double temperature, size_t k);
  int32_t draw_kept(const SamplingParams& params, double u);
  double probabilities(const float* scan, double temperature, double max_logit);
  std::vector<Candidate>::const_iterator first_penalised(size_t i) const;
  Candidate candidate(const float* scan, double temperature, size_t i) const;
  int32_t nucleus_draw(const float* scan, double temperature, double target, double u);

  int vocab_size_;
  // With a repetition penalty: the logits with the penalised tokens' replaced by NaN, which every
  // scan over the vocabulary skips, and the penalised tokens with their new logits.
  std::vector<float> masked_;
  std::vector<Candidate> penalised_;
  std::vector<uint8_t> marked_;  // all clear between calls
  std::vector<Candidate> kept_;  // top-k's candidates
  // The probabilities of the whole vocabulary, by id, and their sums by chunks of kChunk ids.
  static constexpr size_t kChunk = 2048;
  std::vector<double> probs_, chunk_sums_;
  std::vector<double> bucket_sums_;  // top-p's
};

}  // namespace meg
