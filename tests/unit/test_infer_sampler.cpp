// The sampler: greedy choice and its ties, the repetition penalty (once per distinct token, both
// signs), top-k and top-p and their edges, the draw's mapping, the counter-based uniforms
// (reproducible, independent per stream and step), and the sampled distribution.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "catch.hpp"
#include "test_util.hpp"
#include "core/error.hpp"
#include "infer/sampler.hpp"

using namespace meg;

namespace {

SamplingParams sampled(double temperature = 1, int top_k = 0, double top_p = 1) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

// Logits whose softmax is PROBS.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (const double p : probs) l.push_back(float(std::log(p)));
  return l;
}

// The ids drawn for u on a fine grid of [0, 1).
std::set<int32_t> reachable(Sampler& s, const std::vector<float>& logits, const SamplingParams& p) {
  std::set<int32_t> ids;
  for (int i = 0; i < 1000; ++i) ids.insert(s.sample(logits.data(), {}, p, i / 1000.0));
  return ids;
}

}  // namespace

TEST_CASE("sampler: greedy takes the largest logit, the lowest id among equals", "[infer][sampler]") {
  Sampler s(5);
  const SamplingParams greedy;
  CHECK(greedy.greedy());
  const std::vector<float> a = {0.1f, 2.0f, -3.0f, 1.9f, 0.0f};
  CHECK(s.sample(a.data(), {}, greedy, 0.7) == 1);
  const std::vector<float> tie = {0.5f, 3.0f, 1.0f, 3.0f, 3.0f};
  CHECK(s.sample(tie.data(), {}, greedy, 0.99) == 1);
  // top-k 1 at any temperature is greedy too.
  for (const double u : {0.0, 0.5, 0.999}) CHECK(s.sample(a.data(), {}, sampled(2.0, 1), u) == 1);
}

TEST_CASE("sampler: the repetition penalty divides positive logits, multiplies negative ones, once per token",
          "[infer][sampler]") {
  Sampler s(3);
  SamplingParams p;
  p.repetition_penalty = 2;
  // 2.0 / 2 = 1.0 still beats 0.9; applied twice (0.5) it would not.
  const std::vector<float> pos = {2.0f, 0.9f, -5.0f};
  const std::vector<int32_t> repeated = {0, 0, 0, 2};
  CHECK(s.sample(pos.data(), repeated, p, 0) == 0);
  p.repetition_penalty = 2.5;  // 2.0 / 2.5 = 0.8 < 0.9
  CHECK(s.sample(pos.data(), repeated, p, 0) == 1);
  // -1.0 * 2 = -2.0 falls below -1.5 (dividing would have raised it to -0.5).
  p.repetition_penalty = 2;
  const std::vector<float> neg = {-1.0f, -1.5f, -9.0f};
  const std::vector<int32_t> first = {0};
  CHECK(s.sample(neg.data(), first, p, 0) == 1);
  // A penalty below 1 favours the repeated tokens instead.
  p.repetition_penalty = 0.5;
  const std::vector<float> low = {1.0f, 1.5f, 0.0f};
  CHECK(s.sample(low.data(), first, p, 0) == 0);
  // The marks are cleared between calls: without history nothing is penalised.
  p.repetition_penalty = 2.5;
  CHECK(s.sample(pos.data(), {}, p, 0) == 0);
}

TEST_CASE("sampler: the repetition penalty is computed in fp32", "[infer][sampler]") {
  // A penalised logit of 2 / 1.1 in fp32 ties an unpenalised logit of exactly that value, and the
  // lower id wins; in double the penalised one would be above or below it. The tokens are placed
  // so that double arithmetic would choose the other one, whichever way it rounds.
  const float r = 1.1f, tied = 2.0f / r;
  REQUIRE(2.0 / 1.1 != double(tied));
  const bool above = 2.0 / 1.1 > double(tied);  // in double, the penalised token would win
  const int32_t penalised = above ? 1 : 0, other = 1 - penalised;
  std::vector<float> logits(3, -1.0f);
  logits[size_t(penalised)] = 2.0f;
  logits[size_t(other)] = tied;
  CHECK(penalised_logit(2.0f, r) == tied);
  Sampler s(3);
  SamplingParams p;
  p.repetition_penalty = 1.1;
  const std::vector<int32_t> history = {penalised};
  CHECK(s.sample(logits.data(), history, p, 0) == 0);
}

namespace {

// Draws from logits L whose tokens IDS have probabilities 0.5, 0.3 and 0.2 (every other token
// none) land where u falls in the cumulative probabilities.
void check_cumulative_draws(const std::vector<float>& l, const std::array<int32_t, 3>& ids) {
  Sampler s(int(l.size()));
  CHECK(s.sample(l.data(), {}, sampled(), 0.0) == ids[0]);
  CHECK(s.sample(l.data(), {}, sampled(), 0.49) == ids[0]);
  CHECK(s.sample(l.data(), {}, sampled(), 0.51) == ids[1]);
  CHECK(s.sample(l.data(), {}, sampled(), 0.79) == ids[1]);
  CHECK(s.sample(l.data(), {}, sampled(), 0.81) == ids[2]);
  CHECK(s.sample(l.data(), {}, sampled(), 1.0 - 0x1p-53) == ids[2]);
}

}  // namespace

TEST_CASE("sampler: a draw picks the token where u falls in the cumulative probabilities", "[infer][sampler]") {
  check_cumulative_draws(logits_of({0.5, 0.3, 0.2}), {0, 1, 2});
  // A token of probability 0 is never drawn, even at the top of the range.
  Sampler s(3);
  const std::vector<float> dead = {0.0f, 0.0f, -1e30f};
  CHECK(s.sample(dead.data(), {}, sampled(), 1.0 - 0x1p-53) == 1);
}

TEST_CASE("sampler: the draw's cumulative probabilities run across the sums' chunks", "[infer][sampler]") {
  // Three tokens in three chunks of 2048 ids, and chunks between and after with nothing to draw.
  std::vector<float> l(30000, -std::numeric_limits<float>::infinity());
  const std::array<int32_t, 3> ids = {100, 4500, 17000};
  const std::vector<double> probs = {0.5, 0.3, 0.2};
  for (size_t i = 0; i < ids.size(); ++i) l[size_t(ids[i])] = float(std::log(probs[i]));
  check_cumulative_draws(l, ids);
}

TEST_CASE("sampler: top-k keeps the k largest logits", "[infer][sampler]") {
  Sampler s(6);
  const std::vector<float> l = logits_of({0.1, 0.25, 0.05, 0.3, 0.2, 0.1});
  CHECK(reachable(s, l, sampled(1, 2)) == std::set<int32_t>{1, 3});
  CHECK(reachable(s, l, sampled(1, 3)) == std::set<int32_t>{1, 3, 4});
  // Equal logits are taken by id: of the two 0.1s, id 0.
  CHECK(reachable(s, l, sampled(1, 4)) == std::set<int32_t>{0, 1, 3, 4});
  // k at or above the vocabulary keeps everything.
  CHECK(reachable(s, l, sampled(1, 6)).size() == 6);
  CHECK(reachable(s, l, sampled(1, 100)).size() == 6);
}

TEST_CASE("sampler: top-p keeps the fewest largest probabilities reaching p", "[infer][sampler]") {
  Sampler s(4);
  const std::vector<float> l = logits_of({0.2, 0.5, 0.1, 0.2});
  CHECK(reachable(s, l, sampled(1, 0, 0.01)) == std::set<int32_t>{1});  // at least one
  CHECK(reachable(s, l, sampled(1, 0, 0.49)) == std::set<int32_t>{1});
  CHECK(reachable(s, l, sampled(1, 0, 0.51)) == std::set<int32_t>{0, 1});  // equal 0.2s: id 0 first
  CHECK(reachable(s, l, sampled(1, 0, 0.71)) == std::set<int32_t>{0, 1, 3});
  CHECK(reachable(s, l, sampled(1, 0, 0.95)) == std::set<int32_t>{0, 1, 2, 3});
  CHECK(reachable(s, l, sampled(1, 0, 1.0)) == std::set<int32_t>{0, 1, 2, 3});
  // After top-k the kept probabilities are renormalised: 0.5 of (0.5 + 0.2) is 0.71 > 0.6.
  CHECK(reachable(s, l, sampled(1, 2, 0.6)) == std::set<int32_t>{1});
  CHECK(reachable(s, l, sampled(1, 2, 0.8)) == std::set<int32_t>{0, 1});
}

TEST_CASE("sampler: seeded uniforms are reproducible and independent per seed, stream and step", "[infer][sampler]") {
  CHECK(sampling_uniform(1, 2, 3) == sampling_uniform(1, 2, 3));
  std::set<double> seen;
  for (uint64_t seed : {0ull, 1ull, 1ull << 40})
    for (uint64_t stream : {0ull, 1ull, 1ull << 33})
      for (uint64_t step : {0ull, 1ull, 2ull, 1ull << 32}) {
        const double u = sampling_uniform(seed, stream, step);
        CHECK(u >= 0);
        CHECK(u < 1);
        seen.insert(u);
      }
  CHECK(seen.size() == 36);
  // The same draws give the same tokens.
  Sampler s(4);
  const std::vector<float> l = logits_of({0.4, 0.3, 0.2, 0.1});
  std::vector<int32_t> a, b;
  for (uint64_t step = 0; step < 50; ++step) {
    a.push_back(s.sample(l.data(), {}, sampled(), sampling_uniform(42, 3, step)));
    b.push_back(s.sample(l.data(), {}, sampled(), sampling_uniform(42, 3, step)));
  }
  CHECK(a == b);
}

TEST_CASE("sampler: draws follow the softmax at the temperature", "[infer][sampler]") {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  const std::vector<float> l = logits_of(probs);
  Sampler s(4);
  const int n = 40000;
  for (const double temperature : {1.0, 2.0, 0.5}) {
    INFO("temperature " << temperature);
    std::vector<double> expected;
    double total = 0;
    for (const double p : probs) total += std::pow(p, 1 / temperature);
    for (const double p : probs) expected.push_back(std::pow(p, 1 / temperature) / total);
    std::vector<int> count(4, 0);
    for (int step = 0; step < n; ++step)
      ++count[s.sample(l.data(), {}, sampled(temperature), sampling_uniform(9, 0, step))];
    for (int i = 0; i < 4; ++i) {
      // Five standard deviations of a binomial count.
      const double sd = std::sqrt(n * expected[i] * (1 - expected[i]));
      CHECK(std::abs(count[i] - n * expected[i]) < 5 * sd + 1);
    }
  }
}

TEST_CASE("sampler: parameters out of range are refused", "[infer][sampler]") {
  SamplingParams p;
  p.validate("here");
  p.top_p = 0;
  CHECK(input_error_of([&] { p.validate("here"); }) == "here: top-p 0 must be in (0, 1]");
  p.top_p = 1.5;
  CHECK(input_error_of([&] { p.validate("here"); }) == "here: top-p 1.5 must be in (0, 1]");
  p.top_p = 1;
  p.temperature = -1;
  CHECK(input_error_of([&] { p.validate("here"); }) == "here: temperature -1 must be 0 (greedy) or above");
  p.temperature = 1;
  p.top_k = -2;
  CHECK(input_error_of([&] { p.validate("here"); }) == "here: top-k -2 must be 0 (off) or above");
  p.top_k = 0;
  p.repetition_penalty = 0;
  CHECK(input_error_of([&] { p.validate("here"); }) == "here: repetition penalty 0 must be above 0");
}

namespace {

// The sampler's choices by their definition (sampler.hpp), the plain way: every logit in double,
// the candidates sorted in full.
struct Reference {
  struct Candidate {
    double logit;
    int32_t id;
  };
  static bool before(const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  }

  // The candidates in order, logits penalised and divided by the temperature (1 when greedy).
  static std::vector<Candidate> sorted(const std::vector<float>& logits, const std::vector<int32_t>& history,
                                       const SamplingParams& p) {
    std::vector<double> l(logits.begin(), logits.end());
    std::set<int32_t> distinct(history.begin(), history.end());
    const float r = float(p.repetition_penalty);  // in fp32 (sampler.hpp)
    for (const int32_t t : distinct) {
      const float x = logits[size_t(t)];
      l[size_t(t)] = x > 0 ? x / r : x * r;
    }
    std::vector<Candidate> c;
    for (size_t i = 0; i < l.size(); ++i) c.push_back({p.greedy() ? l[i] : l[i] / p.temperature, int32_t(i)});
    std::sort(c.begin(), c.end(), before);
    return c;
  }

  // The tokens a draw can reach, the top-k (and then top-p) candidates of nonzero probability,
  // with their shares of the kept probability.
  static std::map<int32_t, double> kept(const std::vector<float>& logits, const std::vector<int32_t>& history,
                                        const SamplingParams& p) {
    std::vector<Candidate> c = sorted(logits, history, p);
    if (p.greedy()) return {{c[0].id, 1.0}};
    if (p.top_k > 0 && size_t(p.top_k) < c.size()) c.resize(size_t(p.top_k));
    std::vector<double> probs;
    double total = 0;
    for (const Candidate& x : c) total += probs.emplace_back(std::exp(x.logit - c[0].logit));
    double sum = 0;
    size_t n = 0;
    while (n < c.size() && sum < p.top_p * total) sum += probs[n++];
    std::map<int32_t, double> shares;
    for (size_t i = 0; i < n; ++i)
      if (probs[i] > 0) shares[c[i].id] = probs[i] / sum;
    return shares;
  }
};

// Logits of a vocabulary of V with SPREAD (the standard deviation), some of them repeated exactly
// so that ties occur; with a PLATEAU, a tenth of them 8 higher (nuclei of hundreds of tokens, each
// with a share of the grid's points).
std::vector<float> random_logits(std::mt19937& rng, int V, float spread, bool plateau) {
  std::normal_distribution<float> normal(0, spread);
  std::vector<float> l(static_cast<size_t>(V));
  for (float& x : l) x = normal(rng);
  for (int i = 0; plateau && i < V / 10; ++i) l[rng() % size_t(V)] += 8;
  for (int i = 0; i < V / 10; ++i) l[rng() % size_t(V)] = l[rng() % size_t(V)];
  return l;
}

}  // namespace

TEST_CASE("sampler: choices match the plain definition over random vocabularies", "[infer][sampler]") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 80; ++trial) {
    // The last trials' vocabularies span chunks of the softmax's sums (sampler.hpp).
    const int V = trial % 3 == 0 ? 7 : trial >= 76 ? 20000 : 3000;
    // Spreads from flat (nuclei of hundreds of tokens, over many buckets) to peaked (a handful).
    const float spread = std::array<float, 4>{0.3f, 1.0f, 3.0f, 8.0f}[size_t(trial % 4)];
    const std::vector<float> logits = random_logits(rng, V, spread, trial % 5 == 0);
    std::vector<int32_t> history;
    if (trial % 2 == 1)
      for (int i = 0; i < 20; ++i) history.push_back(int32_t(rng() % size_t(V)));
    SamplingParams p;
    p.repetition_penalty = history.empty() ? 1.0 : 1.3;
    for (const double temperature : {0.0, 0.7, 1.5})
      for (const int top_k : {0, 1, 5, 100})
        for (const double top_p : {1.0, 0.9, 0.3}) {
          p.temperature = temperature;
          p.top_k = top_k;
          p.top_p = top_p;
          INFO("trial " << trial << " V " << V << " temperature " << temperature << " top-k " << top_k
                        << " top-p " << top_p);
          Sampler s(V);
          const std::map<int32_t, double> expected = Reference::kept(logits, history, p);
          constexpr int kGrid = 400;
          std::set<int32_t> drawn;
          for (int i = 0; i < kGrid; ++i) drawn.insert(s.sample(logits.data(), history, p, (i + 0.5) / kGrid));
          // Every draw is a kept token, and every kept token whose share spans more than the grid's
          // step holds a point of it (whatever order the draw walks the tokens in).
          for (const int32_t t : drawn) CHECK(expected.count(t) == 1);
          for (const auto& [t, share] : expected)
            if (share > 1.01 / kGrid) CHECK(drawn.count(t) == 1);
          if (temperature == 0) CHECK(drawn == std::set<int32_t>{Reference::sorted(logits, history, p)[0].id});
        }
  }
}

TEST_CASE("sampler: top-k from the k largest logits alone draws as from all of them", "[infer][sampler]") {
  // What append_top_k gives (the k largest, best first, equal logits by id, NaN never, -1 past
  // the last), made here by a sort; sample_top_k must give sample()'s token at every u.
  std::mt19937 rng(12);
  for (int trial = 0; trial < 40; ++trial) {
    const int V = trial % 4 == 0 ? 7 : 3000;
    std::vector<float> logits = random_logits(rng, V, trial % 2 ? 1.0f : 4.0f, trial % 5 == 0);
    if (trial % 3 == 0) logits[1] = -0.0f, logits[2] = 0.0f;  // equal, of either sign
    for (const int top_k : {1, 5, 50}) {
      if (top_k >= V) continue;
      std::vector<int32_t> ids;
      for (int32_t t = 0; t < V; ++t)
        if (!std::isnan(logits[size_t(t)])) ids.push_back(t);
      std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
        return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
      });
      std::vector<int32_t> tokens(size_t(top_k), -1);
      std::vector<float> top(size_t(top_k), 0.0f);
      for (size_t j = 0; j < size_t(top_k) && j < ids.size(); ++j) tokens[j] = ids[j], top[j] = logits[size_t(ids[j])];
      for (const double temperature : {0.7, 1.5})
        for (const double top_p : {1.0, 0.8}) {
          SamplingParams p;
          p.temperature = temperature;
          p.top_k = top_k;
          p.top_p = top_p;
          INFO("trial " << trial << " top-k " << top_k << " temperature " << temperature << " top-p " << top_p);
          Sampler all(V), few(V);
          for (int i = 0; i < 200; ++i) {
            const double u = (i + 0.5) / 200;
            CHECK(few.sample_top_k(tokens, top, p, u) == all.sample(logits.data(), {}, p, u));
          }
        }
    }
  }
}

TEST_CASE("sampler: NaN logits are never chosen, an infinite one always", "[infer][sampler]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Sampler s(5);
  const std::vector<float> with_nan = {nan, 1.0f, nan, 2.0f, 0.5f};
  const std::vector<int32_t> history = {0, 3};
  SamplingParams penalised;
  penalised.repetition_penalty = 4;  // 2.0 / 4 < 1.0
  for (const SamplingParams& p : {SamplingParams{}, sampled(), sampled(1, 2), sampled(1, 0, 0.5), penalised}) {
    for (const std::vector<int32_t>& h : {std::vector<int32_t>{}, history}) {
      const std::set<int32_t> ids = reachable(s, with_nan, p);
      CHECK(ids.count(0) == 0);
      CHECK(ids.count(2) == 0);
      CHECK(s.sample(with_nan.data(), h, p, 0.99) != 0);
    }
  }
  CHECK(s.sample(with_nan.data(), history, penalised, 0) == 1);
  const std::vector<float> with_inf = {1.0f, inf, 3.0f, inf, nan};
  for (const SamplingParams& p : {SamplingParams{}, sampled(), sampled(1, 2), sampled(1, 0, 0.5)})
    CHECK(reachable(s, with_inf, p) == std::set<int32_t>{1});
}
