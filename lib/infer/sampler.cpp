// The sampler: repetition penalty, greedy choice, temperature, top-k, top-p and the draw.
#include "infer/sampler.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/philox.hpp"

namespace meg {

void SamplingParams::validate(const std::string& where) const {
  if (!(temperature >= 0) || !std::isfinite(temperature))
    input_error("{}: temperature {} must be 0 (greedy) or above", where, temperature);
  if (top_k < 0) input_error("{}: top-k {} must be 0 (off) or above", where, top_k);
  if (!(top_p > 0 && top_p <= 1)) input_error("{}: top-p {} must be in (0, 1]", where, top_p);
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty))
    input_error("{}: repetition penalty {} must be above 0", where, repetition_penalty);
}

double sampling_uniform(uint64_t seed, uint64_t stream, uint64_t step) {
  const PhiloxCounter c = {uint32_t(step), uint32_t(step >> 32), uint32_t(stream), uint32_t(stream >> 32)};
  const PhiloxCounter x = philox4x32_10(c, {uint32_t(seed), uint32_t(seed >> 32)});
  const uint64_t bits = (uint64_t(x[1]) << 32 | x[0]) >> 11;
  return double(bits) * 0x1p-53;
}

Sampler::Sampler(int vocab_size)
    : vocab_size_(vocab_size), logits_(size_t(vocab_size)), penalised_(size_t(vocab_size)) {}

void Sampler::penalise(std::span<const int32_t> history, double penalty) {
  for (const int32_t t : history) {
    if (penalised_[size_t(t)]) continue;  // once per distinct token
    penalised_[size_t(t)] = 1;
    double& l = logits_[size_t(t)];
    l = l > 0 ? l / penalty : l * penalty;
  }
  for (const int32_t t : history) penalised_[size_t(t)] = 0;
}

int32_t Sampler::sample(const float* logits, std::span<const int32_t> history, const SamplingParams& params,
                        double u) {
  const size_t V = size_t(vocab_size_);
  std::copy(logits, logits + V, logits_.begin());
  if (params.repetition_penalty != 1) penalise(history, params.repetition_penalty);

  if (params.greedy()) return int32_t(std::max_element(logits_.begin(), logits_.end()) - logits_.begin());

  // The candidates, largest first (equal logits by id) when top-k or top-p needs an order; all of
  // them in id order otherwise (any order samples the same distribution).
  candidates_.resize(V);
  for (size_t i = 0; i < V; ++i) candidates_[i] = {logits_[i] / params.temperature, int32_t(i)};
  auto larger = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  size_t kept = V;
  if (params.top_k > 0 && size_t(params.top_k) < V) {
    kept = size_t(params.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + ptrdiff_t(kept), candidates_.end(), larger);
  } else if (params.top_p < 1) {
    std::sort(candidates_.begin(), candidates_.end(), larger);
  }

  // Softmax over the kept candidates, from their largest logit.
  double max_logit = candidates_[0].logit;
  for (size_t i = 1; i < kept; ++i) max_logit = std::max(max_logit, candidates_[i].logit);
  probs_.resize(kept);
  double total = 0;
  for (size_t i = 0; i < kept; ++i) total += probs_[i] = std::exp(candidates_[i].logit - max_logit);

  if (params.top_p < 1) {
    // The fewest largest probabilities whose share of the total reaches top_p.
    const double target = params.top_p * total;
    double sum = 0;
    size_t n = 0;
    while (n < kept && sum < target) sum += probs_[n++];
    kept = n;  // at least one: the first probability is exp(0) = 1
    total = sum;
  }

  // The candidate where u * total falls in the running sum (the sum is the one total was, so only
  // rounding of the product can reach past it: then the last candidate that can be drawn).
  const double r = u * total;
  double sum = 0;
  size_t last = 0;
  for (size_t i = 0; i < kept; ++i) {
    if (probs_[i] == 0) continue;
    sum += probs_[i];
    last = i;
    if (r < sum) return candidates_[i].id;
  }
  return candidates_[last].id;
}

}  // namespace meg
