// The sampler: greedy choice and its ties, the repetition penalty (once per distinct token, both
// signs), top-k and top-p and their edges, the draw's mapping, the counter-based uniforms
// (reproducible, independent per stream and step), and the sampled distribution.
#include <cmath>
#include <cstdint>
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

TEST_CASE("sampler: a draw picks the token where u falls in the cumulative probabilities", "[infer][sampler]") {
  Sampler s(3);
  const std::vector<float> l = logits_of({0.5, 0.3, 0.2});
  CHECK(s.sample(l.data(), {}, sampled(), 0.0) == 0);
  CHECK(s.sample(l.data(), {}, sampled(), 0.49) == 0);
  CHECK(s.sample(l.data(), {}, sampled(), 0.51) == 1);
  CHECK(s.sample(l.data(), {}, sampled(), 0.79) == 1);
  CHECK(s.sample(l.data(), {}, sampled(), 0.81) == 2);
  CHECK(s.sample(l.data(), {}, sampled(), 1.0 - 0x1p-53) == 2);
  // A token of probability 0 is never drawn, even at the top of the range.
  const std::vector<float> dead = {0.0f, 0.0f, -1e30f};
  CHECK(s.sample(dead.data(), {}, sampled(), 1.0 - 0x1p-53) == 1);
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
