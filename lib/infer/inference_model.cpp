// The checks every inference model makes, and make_inference_model: the CPU model, or the CUDA one
// in a CUDA build.
#include "infer/inference_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/device.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "infer/cpu_inference_model.hpp"
#include "infer/sampler.hpp"
#include "parallel/comm.hpp"

namespace meg {

void InferenceModel::append_greedy(std::span<const AppendRequest> requests, int choices, int32_t* tokens) {
  check_choices(choices, int(config().vocab_size));
  check_penalties(requests, penalises());
  const std::span<float> logits = logits_buffer();
  append(requests, logits.data());
  const size_t V = size_t(config().vocab_size);
  Sampler greedy(choices);
  for (size_t i = 0; i < requests.size(); ++i) tokens[i] = greedy.sample(logits.data() + i * V, {}, SamplingParams{}, 0);
}

void InferenceModel::append_top_k(std::span<const AppendRequest> requests, int choices, int k, int32_t* tokens,
                                  float* logits) {
  check_top_k(choices, k, int(config().vocab_size));
  check_penalties(requests, penalises());
  const std::span<float> all = logits_buffer();
  append(requests, all.data());
  const size_t V = size_t(config().vocab_size);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    const float* row = all.data() + i * V;
    ids.clear();
    for (int32_t t = 0; t < choices; ++t)
      if (!std::isnan(row[t])) ids.push_back(t);
    const size_t n = std::min(ids.size(), size_t(k));
    std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(n), ids.end(),
                      [&](int32_t a, int32_t b) { return Sampler::before({row[a], a}, {row[b], b}); });
    for (size_t j = 0; j < size_t(k); ++j) {
      tokens[i * size_t(k) + j] = j < n ? ids[j] : -1;
      logits[i * size_t(k) + j] = j < n ? row[ids[j]] : 0.0f;
    }
  }
}

void InferenceModel::append_sample(std::span<const AppendRequest> requests, int choices,
                                   std::span<const SoftmaxDraw> draws, int32_t* tokens, float* logits) {
  check_choices(choices, int(config().vocab_size));
  check_draws(draws, requests.size());
  check_penalties(requests, penalises());
  if (!logits) logits = logits_buffer().data();
  append(requests, logits);
  const size_t V = size_t(config().vocab_size);
  parallel_for(requests.size(), 1, [&](size_t begin, size_t end) {
    Sampler sampler(choices);
    for (size_t i = begin; i < end; ++i) {
      SamplingParams p;
      p.temperature = draws[i].temperature;
      p.top_p = draws[i].top_p;
      tokens[i] = sampler.sample(logits + i * V, {}, p, draws[i].u);
    }
  });
}

void InferenceModel::queue_choices(std::span<const AppendRequest> requests, int choices,
                                   std::span<const SoftmaxDraw> draws, bool chained) {
  check_queue(requests, draws, chained, queued_.size(), last_slots_ ? &*last_slots_ : nullptr);
  std::vector<AppendRequest> own(requests.begin(), requests.end());
  if (chained)
    for (size_t i = 0; i < own.size(); ++i) own[i].tokens = {&last_tokens_[i], 1};
  std::vector<int32_t> chosen(requests.size());
  {
    // The call runs now, through append(), which must not take it for one made while a call is queued.
    struct Queuing {
      bool& on;
      explicit Queuing(bool& flag) : on(flag) { on = true; }
      ~Queuing() { on = false; }
    } queuing(queuing_);
    if (draws.empty())
      append_greedy(own, choices, chosen.data());
    else
      append_sample(own, choices, draws, chosen.data(), nullptr);
  }
  queued_.push_back(chosen);
  last_tokens_ = std::move(chosen);
  last_slots_.emplace();
  for (const AppendRequest& r : requests) last_slots_->push_back(r.slot);
}

void InferenceModel::take_choices(int32_t* tokens) {
  if (queued_.empty()) throw std::logic_error("inference model: take_choices() without a queued call");
  std::copy(queued_.front().begin(), queued_.front().end(), tokens);
  queued_.pop_front();
}

void InferenceModel::default_queue_append() {
  if (queuing_) return;
  check_nothing_queued(queued_.size());
  last_slots_.reset();
}

void InferenceModel::default_queue_reset() { last_slots_.reset(); }

void check_queue(std::span<const AppendRequest> requests, std::span<const SoftmaxDraw> draws, bool chained,
                 size_t queued, const std::vector<int>* previous) {
  if (queued >= 2) throw std::logic_error("inference model: a third queued call before the first is taken");
  if (chained && previous == nullptr)
    throw std::logic_error("inference model: a chained call without a queued call just before it");
  if (!draws.empty()) check_draws(draws, requests.size());
  if (!chained) return;
  if (requests.size() != previous->size())
    throw std::invalid_argument(fmt::format("inference model: a chained call of {} requests after one of {}",
                                            requests.size(), previous->size()));
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!requests[i].tokens.empty())
      throw std::invalid_argument(fmt::format("inference model: chained request {} has tokens of its own", i));
    if (requests[i].slot != (*previous)[i])
      throw std::invalid_argument(fmt::format("inference model: chained request {} names slot {}, the previous "
                                              "call's slot {}", i, requests[i].slot, (*previous)[i]));
  }
}

void check_nothing_queued(size_t queued) {
  if (queued > 0) throw std::logic_error("inference model: a call while queued calls wait to be taken");
}

void check_penalties(std::span<const AppendRequest> requests, bool penalises) {
  for (const AppendRequest& r : requests) {
    if (r.repetition_penalty == 1) continue;
    if (!penalises)
      throw std::invalid_argument(fmt::format("inference model: a repetition penalty of {} for slot {}, which this "
                                              "model does not apply", r.repetition_penalty, r.slot));
    if (!(r.repetition_penalty > 0) || !std::isfinite(r.repetition_penalty))
      throw std::invalid_argument(
          fmt::format("inference model: a repetition penalty of {} for slot {}", r.repetition_penalty, r.slot));
  }
}

bool any_penalty(std::span<const AppendRequest> requests) {
  return std::any_of(requests.begin(), requests.end(), [](const AppendRequest& r) { return r.repetition_penalty != 1; });
}

void check_draws(std::span<const SoftmaxDraw> draws, size_t requests) {
  if (draws.size() != requests)
    throw std::invalid_argument(fmt::format("inference model: {} draws for {} requests", draws.size(), requests));
  for (const SoftmaxDraw& d : draws)
    if (!(d.temperature >= 0 && std::isfinite(d.temperature) && d.top_p > 0 && d.top_p <= 1 && d.u >= 0 && d.u < 1))
      throw std::invalid_argument(fmt::format("inference model: a draw at temperature {}, top-p {}, u {}",
                                              d.temperature, d.top_p, d.u));
}

void check_top_k(int choices, int k, int V) {
  if (k < 1 || k > kMaxAppendTopK || choices < k || choices > V)
    throw std::invalid_argument(
        fmt::format("inference model: the {} largest of {} logits asked for, of a vocabulary of {}", k, choices, V));
}

void order_top_k(int32_t* tokens, float* logits, int k) {
  std::vector<Sampler::Candidate> row;
  for (int j = 0; j < k && tokens[j] >= 0; ++j) row.push_back({logits[j], tokens[j]});
  std::sort(row.begin(), row.end(), Sampler::before);
  for (size_t j = 0; j < row.size(); ++j) {
    logits[j] = float(row[j].logit);  // a float's value, exact in double
    tokens[j] = row[j].id;
  }
}

void check_choices(int choices, int V) {
  if (choices < 1 || choices > V)
    throw std::invalid_argument(fmt::format("inference model: {} choices for a vocabulary of {}", choices, V));
}

int checked_slot(int slot, int slots) {
  if (slot < 0 || slot >= slots) input_error("inference model: slot {} outside [0, {})", slot, slots);
  return slot;
}

void check_append(std::span<const AppendRequest> requests, std::span<const int> lengths, int max_length, int V) {
  std::vector<char> seen(lengths.size(), 0);
  for (const AppendRequest& r : requests) {
    const size_t slot = size_t(checked_slot(r.slot, int(lengths.size())));
    if (seen[slot]) input_error("inference model: slot {} appears twice in one append", r.slot);
    seen[slot] = 1;
    if (r.tokens.empty()) input_error("inference model: an append to slot {} has no tokens", r.slot);
    const size_t total = size_t(lengths[slot]) + r.tokens.size();
    if (total > size_t(max_length))
      input_error("inference model: slot {} would hold {} tokens, more than its {}", r.slot, total, max_length);
    for (const int32_t t : r.tokens)
      if (t < 0 || t >= V) input_error("inference model: token {} outside the vocabulary [0, {})", t, V);
  }
}

void check_checkpoint_shard(const CheckpointModel& checkpoint, const Comm* tp) {
  if (checkpoint.tp == 1) return;
  const int size = tp ? tp->size() : 1, rank = tp ? tp->rank() : 0;
  if (checkpoint.tp != size || checkpoint.rank != rank)
    throw std::invalid_argument(fmt::format(
        "inference model: the checkpoint holds rank {}'s shard of {}, this is rank {} of {}", checkpoint.rank,
        checkpoint.tp, rank, size));
}

std::unique_ptr<InferenceModel> make_inference_model(const CheckpointModel& checkpoint, const std::string& device,
                                                     Precision precision, int slots, int max_length, Comm* tp) {
  check_checkpoint_shard(checkpoint, tp);
  if (checked_device(device, precision) == Device::cpu)
    return std::make_unique<CpuInferenceModel>(checkpoint.config, checkpoint.params, slots, max_length, tp);
#if MEG_CUDA
  return make_cuda_inference_model(checkpoint, precision, slots, max_length, tp);
#else
  throw std::logic_error("make_inference_model: checked_device let cuda through in a build without CUDA");
#endif
}

}  // namespace meg
