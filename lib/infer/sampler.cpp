// The sampler: repetition penalty, greedy choice, temperature, top-k, top-p and the draw.
#include "infer/sampler.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "core/parallel.hpp"
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

namespace {

// The token of the first of N candidates at which R falls in the running sum of their
// probabilities (candidate i: probability PROB(i), token ID(i)). Probabilities of 0 are never
// drawn; the running sum is the one the caller's total was, so only the rounding of R = u * total
// can reach past it: then the last candidate that can be drawn.
template <typename Prob, typename Id>
int32_t draw(size_t n, double r, Prob prob, Id id) {
  double sum = 0;
  size_t last = 0;
  for (size_t i = 0; i < n; ++i) {
    const double p = prob(i);
    if (p == 0) continue;
    sum += p;
    last = i;
    if (r < sum) return id(i);
  }
  return id(last);
}

}  // namespace

Sampler::Sampler(int vocab_size) : vocab_size_(vocab_size), marked_(size_t(vocab_size)) {}

// Candidate order: the larger logit first, the lower id among equal ones.
bool Sampler::before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The logits to scan: LOGITS itself, or with a penalty, masked_ (the penalised tokens' NaN) with
// the penalised logits in penalised_, by id.
const float* Sampler::penalise(const float* logits, std::span<const int32_t> history, double penalty) {
  penalised_.clear();
  if (penalty == 1 || history.empty()) return logits;
  masked_.assign(logits, logits + vocab_size_);
  for (const int32_t t : history) {
    if (marked_[size_t(t)] || std::isnan(logits[t])) continue;  // once per distinct token; NaN stays
    marked_[size_t(t)] = 1;
    penalised_.push_back({penalised_logit(logits[t], float(penalty)), t});
    masked_[size_t(t)] = std::numeric_limits<float>::quiet_NaN();
  }
  for (const Candidate& c : penalised_) marked_[size_t(c.id)] = 0;
  std::sort(penalised_.begin(), penalised_.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  return masked_.data();
}

// The first candidate in order; id -1 when every logit is NaN.
Sampler::Candidate Sampler::largest(const float* scan) const {
  const size_t V = size_t(vocab_size_);
  // Two passes, the first a maximum in kLanes independent lanes, which the compiler vectorises
  // (NaN never compares larger), the second to the first place it is found.
  constexpr size_t kLanes = 16;
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, -std::numeric_limits<float>::infinity());
  size_t i = 0;
  for (; i + kLanes <= V; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) lanes[j] = scan[i + j] > lanes[j] ? scan[i + j] : lanes[j];
  for (; i < V; ++i) lanes[0] = scan[i] > lanes[0] ? scan[i] : lanes[0];
  float max = lanes[0];
  for (size_t j = 1; j < kLanes; ++j) max = lanes[j] > max ? lanes[j] : max;
  Candidate best{max, -1};
  for (size_t i = 0; i < V; ++i)
    if (scan[i] == max) {
      best.id = int32_t(i);
      break;
    }
  for (const Candidate& c : penalised_)
    if (best.id < 0 || before(c, best)) best = c;
  return best;
}

// kept_ = the K candidates first in order, by logit / TEMPERATURE, sorted (fewer where fewer are
// not NaN). A heap keeps the K best seen so far, the worst at its front. The scan goes by id, so a
// logit below the worst kept one's cannot enter: its scaled logit is at most the worst's (the
// division keeps order), and on a tie its id is the larger. Most of the vocabulary is passed over
// with that one comparison, without a division.
void Sampler::select(const float* scan, double temperature, size_t k) {
  const size_t V = size_t(vocab_size_);
  const auto worst_first = before;  // as a heap's order: the worst candidate at the front
  const auto offer = [&](const Candidate& c) {
    if (kept_.size() < k) {
      kept_.push_back(c);
      std::push_heap(kept_.begin(), kept_.end(), worst_first);
    } else if (before(c, kept_.front())) {
      std::pop_heap(kept_.begin(), kept_.end(), worst_first);
      kept_.back() = c;
      std::push_heap(kept_.begin(), kept_.end(), worst_first);
    }
  };
  kept_.clear();
  size_t i = 0;
  for (; i < V && kept_.size() < k; ++i)
    if (!std::isnan(scan[i])) offer({scan[i] / temperature, int32_t(i)});
  for (; i < V; ++i) {
    if (!(scan[i] >= scan[kept_.front().id])) continue;  // the heap holds only scanned ids here
    offer({scan[i] / temperature, int32_t(i)});
  }
  for (const Candidate& c : penalised_) offer({c.logit / temperature, c.id});
  std::sort_heap(kept_.begin(), kept_.end(), worst_first);  // best first
}

// probs_[i] = exp(logit_i / TEMPERATURE - MAX_LOGIT) for the whole vocabulary (0 for a NaN logit),
// and chunk_sums_ their sums by chunks of kChunk ids (each by id); returns the total, the chunks'
// sums added in order. The chunks run in parallel (the exponentials are most of a softmax's time),
// and what each computes does not depend on the threads.
double Sampler::probabilities(const float* scan, double temperature, double max_logit) {
  const size_t V = size_t(vocab_size_);
  probs_.resize(V);
  chunk_sums_.resize((V + kChunk - 1) / kChunk);
  parallel_for(V, kChunk, [&](size_t begin, size_t end) {
    auto penalised = first_penalised(begin);  // the next penalised token (masked NaN in SCAN)
    double sum = 0;
    for (size_t i = begin; i < end; ++i) {
      double l = scan[i];
      if (penalised != penalised_.end() && size_t(penalised->id) == i) l = (penalised++)->logit;
      sum += probs_[i] = std::isnan(l) ? 0.0 : std::exp(l / temperature - max_logit);
    }
    chunk_sums_[begin / kChunk] = sum;
  });
  double total = 0;
  for (const double c : chunk_sums_) total += c;
  return total;
}

int32_t Sampler::sample(const float* logits, std::span<const int32_t> history, const SamplingParams& params,
                        double u) {
  const size_t V = size_t(vocab_size_);
  const float* scan = penalise(logits, history, params.repetition_penalty);
  const double T = params.temperature;
  if (params.greedy()) return std::max(largest(scan).id, 0);

  if (params.top_k > 0 && size_t(params.top_k) < V) {
    select(scan, T, size_t(params.top_k));
    return draw_kept(params, u);
  }

  // The whole vocabulary: probabilities by id, from the largest logit, and their total by id.
  const Candidate first = largest(scan);
  if (first.id < 0) return 0;
  if (!std::isfinite(first.logit / T)) return first.id;  // as top-k's
  const double total = probabilities(scan, T, first.logit / T);
  if (params.top_p == 1) {
    // The running sum goes as the total's did: the chunks' sums, then within the chunk where the
    // draw falls (or the last chunk that can be drawn from, where rounding took it past them all).
    const double r = u * total;
    double before_chunk = 0;
    size_t c = 0, last = 0;
    for (; c < chunk_sums_.size(); ++c) {
      if (chunk_sums_[c] > 0) last = c;
      if (r < before_chunk + chunk_sums_[c]) break;
      before_chunk += chunk_sums_[c];
    }
    if (c == chunk_sums_.size()) {
      c = last;
      before_chunk = -std::numeric_limits<double>::infinity();  // the walk then ends at its last token
    }
    const size_t begin = c * kChunk, n = std::min(V, begin + kChunk) - begin;
    return draw(n, r - before_chunk, [&](size_t i) { return probs_[begin + i]; },
                [&](size_t i) { return int32_t(begin + i); });
  }

  // Top-p: the fewest first probabilities whose sum reaches top_p of the total.
  return nucleus_draw(scan, T, params.top_p * total, u);
}

int32_t Sampler::sample_top_k(std::span<const int32_t> tokens, std::span<const float> logits,
                              const SamplingParams& params, double u) {
  // select()'s candidates: order by logit is order by logit over the temperature.
  kept_.clear();
  for (size_t j = 0; j < size_t(params.top_k) && j < tokens.size() && tokens[j] >= 0; ++j)
    kept_.push_back({logits[j] / params.temperature, tokens[j]});
  return draw_kept(params, u);
}

// The draw from kept_ (top-k's candidates, in order): a softmax over them from the first's logit,
// then top-p over that.
int32_t Sampler::draw_kept(const SamplingParams& params, double u) {
  if (kept_.empty()) return 0;
  if (!std::isfinite(kept_[0].logit)) return kept_[0].id;  // an infinite logit (or all -inf) takes all
  probs_.resize(kept_.size());
  double total = 0;
  for (size_t i = 0; i < kept_.size(); ++i) total += probs_[i] = std::exp(kept_[i].logit - kept_[0].logit);
  size_t kept = kept_.size();
  if (params.top_p < 1) {
    // The fewest first probabilities whose share of the total reaches top_p.
    const double target = params.top_p * total;
    double sum = 0;
    size_t n = 0;
    while (n < kept && sum < target) sum += probs_[n++];
    kept = n;  // at least one: the first probability is exp(0) = 1
    total = sum;
  }
  return draw(kept, u * total, [&](size_t i) { return probs_[i]; }, [&](size_t i) { return kept_[i].id; });
}

// The first of penalised_ (by id) at or after token I.
std::vector<Sampler::Candidate>::const_iterator Sampler::first_penalised(size_t i) const {
  return std::partition_point(penalised_.begin(), penalised_.end(), [&](const Candidate& c) { return size_t(c.id) < i; });
}

// The logit of token I over TEMPERATURE, as the candidate order compares them.
Sampler::Candidate Sampler::candidate(const float* scan, double temperature, size_t i) const {
  if (!std::isnan(scan[i])) return {scan[i] / temperature, int32_t(i)};
  return {first_penalised(i)->logit / temperature, int32_t(i)};  // NaN in SCAN: masked, a penalised token
}

// Top-p over the whole vocabulary (probs_, TARGET: top_p of their total) without sorting it. The
// probabilities go into buckets by their leading bits, in candidate order, in two levels: first by
// exponent and kCoarseBits of the mantissa (buckets of a factor 2^(1/8)), then the tokens of the
// bucket where the buckets' running sum from the largest reaches TARGET by kFineBits more (a flat
// distribution puts most of the vocabulary in a few coarse buckets). Each bucket's sum is taken by
// id. Only the fine bucket where the sum reaches TARGET is sorted, to find the last token of the
// nucleus; the draw then walks the nucleus by id.
int32_t Sampler::nucleus_draw(const float* scan, double temperature, double target, double u) {
  constexpr int kCoarseBits = 3, kFineBits = 12;
  constexpr size_t kFine = size_t(1) << kFineBits;
  const size_t V = size_t(vocab_size_);
  // Probabilities are in [0, 1]: their exponent field is at most 1023.
  const auto key = [](double p) { return std::bit_cast<uint64_t>(p) >> (52 - kCoarseBits - kFineBits); };
  // The bucket of SUMS where their running sum from the last, after ABOVE, reaches TARGET (0 if
  // none does); ABOVE takes the buckets after it.
  const auto cut_of = [&](const std::vector<double>& sums, double& above) {
    size_t cut = sums.size() - 1;
    while (cut > 0 && above + sums[cut] < target) above += sums[cut--];
    return cut;
  };
  double above = 0;
  bucket_sums_.assign(size_t(1024) << kCoarseBits, 0.0);
  for (size_t i = 0; i < V; ++i) bucket_sums_[key(probs_[i]) / kFine] += probs_[i];
  const size_t coarse = cut_of(bucket_sums_, above);
  bucket_sums_.assign(kFine, 0.0);
  for (size_t i = 0; i < V; ++i)
    if (key(probs_[i]) / kFine == coarse) bucket_sums_[key(probs_[i]) % kFine] += probs_[i];
  const uint64_t cut = coarse * kFine + cut_of(bucket_sums_, above);

  // The cut bucket's tokens in order, as far as the nucleus takes them.
  kept_.clear();
  for (size_t i = 0; i < V; ++i)
    if (probs_[i] > 0 && key(probs_[i]) == cut) kept_.push_back(candidate(scan, temperature, i));
  std::sort(kept_.begin(), kept_.end(), before);
  double sum = above;
  size_t n = 0;
  while (n < kept_.size() && sum < target) sum += probs_[size_t(kept_[n++].id)];
  // N = 0: the buckets' sum fell short of TARGET by rounding, and the nucleus is everything.
  const Candidate last = n > 0 ? kept_[n - 1] : Candidate{-std::numeric_limits<double>::infinity(), vocab_size_};

  const auto in_nucleus = [&](size_t i) {
    const uint64_t k = key(probs_[i]);
    return k > cut || (k == cut && probs_[i] > 0 && !before(last, candidate(scan, temperature, i)));
  };
  return draw(V, u * sum, [&](size_t i) { return in_nucleus(i) ? probs_[i] : 0.0; },
              [](size_t i) { return int32_t(i); });
}

}  // namespace meg
