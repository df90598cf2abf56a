// meg-eval's scoring against brute force: each request's log-likelihood computed alone (the
// request cut as lm-evaluation-harness cuts it, one forward of GptModel on that row only, the
// log-softmax summed by hand in double) must equal what the batched path gives (rows sorted,
// padded, several per forward), for GPT-2 and Llama; rolling windows against windows worked out
// by hand (lm-eval's functions give the same).
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "catch.hpp"
#include "eval/batch_scoring.hpp"
#include "eval/cpu_scorer.hpp"
#include "eval/rolling_windows.hpp"
#include "eval/scorer.hpp"
#include "model/gpt.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr int64_t kVocab = 100;  // padded to 128: the padding columns must stay out of the softmax
constexpr int kMaxLength = 16;

CheckpointModel random_checkpoint(const std::string& preset, uint64_t seed) {
  ModelConfig c = ModelConfig::preset(preset);
  c.vocab_size = kVocab;
  c.seq_length = kMaxLength;
  c.init_std = 0.3;  // peaked distributions: greedy and non-greedy tokens both occur
  c.pad_vocab();
  GptModel<float> m(c);
  m.init(seed);
  CheckpointModel ck;
  ck.path = "random-" + preset;
  ck.config = c;
  ck.params.assign(m.params(), m.params() + m.num_parameters());
  return ck;
}

struct Expected {
  double loglikelihood = 0;
  bool greedy = true;
};

// The request alone: (context + continuation)[-(L+1):][:-1] through the model, the continuation's
// log-probabilities from the logits by hand.
Expected brute_force(GptModel<float>& model, const Request& r) {
  std::vector<int32_t> all(r.context_tokens);
  all.insert(all.end(), r.continuation_tokens.begin(), r.continuation_tokens.end());
  if (all.size() > size_t(kMaxLength) + 1) all.erase(all.begin(), all.end() - (kMaxLength + 1));
  const int T = static_cast<int>(all.size()) - 1;
  model.forward(all.data(), nullptr, 1, T);
  const int64_t Vp = model.config().padded_vocab_size;
  Expected e;
  for (int p = T - static_cast<int>(r.continuation_tokens.size()); p < T; ++p) {
    const float* row = model.logits() + p * Vp;
    double sum = 0;
    int64_t best = 0;
    for (int64_t v = 0; v < kVocab; ++v) {
      sum += std::exp(double(row[v]));
      if (row[v] > row[best]) best = v;
    }
    const int32_t target = all[p + 1];
    e.loglikelihood += double(row[target]) - std::log(sum);
    e.greedy = e.greedy && best == target;
  }
  return e;
}

// The model's greedy continuation of CONTEXT, N tokens long.
std::vector<int32_t> greedy_continuation(GptModel<float>& model, std::vector<int32_t> context, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    model.forward(context.data(), nullptr, 1, static_cast<int>(context.size()));
    const float* row = model.logits() + (context.size() - 1) * model.config().padded_vocab_size;
    const auto best = static_cast<int32_t>(std::max_element(row, row + kVocab) - row);
    out.push_back(best);
    context.push_back(best);
  }
  return out;
}

// Requests of every shape: short and long contexts (cut to the model's length), continuations of
// 1 to max_length tokens, repeats (ties in the sort), and greedy continuations.
std::vector<Request> make_requests(GptModel<float>& model) {
  std::mt19937 rng(5);
  std::vector<Request> rs;
  const auto tokens = [&](size_t n) { return random_tokens(n, kVocab, static_cast<uint32_t>(rng())); };
  for (int i = 0; i < 24; ++i) {
    Request r;
    r.context_tokens = tokens(1 + rng() % 30);
    r.continuation_tokens = tokens(1 + rng() % 6);
    rs.push_back(r);
  }
  rs.push_back({0, 0, "", "", tokens(1), tokens(kMaxLength)});  // the longest continuation
  rs.push_back({0, 0, "", "", tokens(20), tokens(kMaxLength)});
  rs.push_back(rs[3]);
  rs.push_back(rs[3]);
  for (int n : {1, 3, 4}) {
    Request r;
    r.context_tokens = tokens(2 + n * 2);
    r.continuation_tokens = greedy_continuation(model, r.context_tokens, n);
    rs.push_back(r);
  }
  return rs;
}

}  // namespace

TEST_CASE("eval scoring: batched log-likelihoods equal brute force, GPT-2 and Llama", "[eval]") {
  for (const char* preset : {"tiny", "tiny-llama"}) {
    const CheckpointModel ck = random_checkpoint(preset, 17);
    GptModel<float> model(ck.config);
    std::copy(ck.params.begin(), ck.params.end(), model.params());
    model.set_training(false);
    const std::vector<Request> requests = make_requests(model);
    std::vector<Expected> expected;
    for (const Request& r : requests) expected.push_back(brute_force(model, r));
    int greedy = 0;
    for (const Expected& e : expected) greedy += e.greedy ? 1 : 0;
    REQUIRE(greedy >= 3);                         // the greedy continuations at least...
    REQUIRE(greedy < int(expected.size()) - 10);  // ...and most random ones are not

    for (int batch : {1, 3, 8}) {
      INFO(preset << ", batch " << batch);
      const auto scorer = make_scorer(ck, "cpu", Precision::fp32, batch);
      CHECK(scorer->max_length() == kMaxLength);
      CHECK(scorer->max_batch() == batch);
      const std::vector<RequestScore> scores = score_requests(*scorer, requests, 64);
      REQUIRE(scores.size() == requests.size());
      for (size_t i = 0; i < requests.size(); ++i) {
        INFO("request " << i);
        // fp32 sums over a batch's rows in another order (by the BLAS's blocking of each shape).
        CHECK(std::abs(scores[i].loglikelihood - expected[i].loglikelihood) <
              1e-5 * std::max(1.0, std::abs(expected[i].loglikelihood)));
        CHECK(scores[i].greedy == expected[i].greedy);
      }
    }
  }
}

TEST_CASE("eval scoring: positions, cut to the model's length", "[eval]") {
  const Request r{0, 0, "", "", std::vector<int32_t>(30, 1), {2, 3}};
  CHECK(model_positions(r, 16) == 16);
  CHECK(model_positions(r, 40) == 31);
}

TEST_CASE("eval scoring: the CPU scorer checks its input", "[eval]") {
  const CheckpointModel ck = random_checkpoint("tiny", 3);
  const auto scorer = make_scorer(ck, "cpu", Precision::fp32, 2);
  const std::vector<int32_t> tokens(3 * 4, 1);
  std::vector<int32_t> targets(3 * 4, -1);
  std::vector<TokenScore> out(3 * 4);
  CHECK_THAT(input_error_of([&] { scorer->score(tokens.data(), targets.data(), 3, 4, out.data()); }),
             ContainsSubstring("a batch of 3 x 4 tokens; at most 2 x 16"));
  CHECK_THAT(input_error_of([&] { scorer->score(tokens.data(), targets.data(), 1, 17, out.data()); }),
             ContainsSubstring("at most 2 x 16"));
  targets[1] = kVocab;
  CHECK(input_error_of([&] { scorer->score(tokens.data(), targets.data(), 2, 4, out.data()); }) ==
        "score: target 100 outside the vocabulary of 100");
  // Positions without a target are left as they were.
  targets[1] = 5;
  out.assign(out.size(), TokenScore{-7, true});
  scorer->score(tokens.data(), targets.data(), 2, 4, out.data());
  CHECK(out[1].logprob < 0);
  CHECK(out[1].logprob > -50);
  CHECK(out[0].logprob == -7);
  CHECK(out[5].logprob == -7);

  CHECK(input_error_of([&] { make_scorer(ck, "cpu", Precision::bf16, 2); }) ==
        "--precision bf16: the CPU path computes in fp32 only; use --device cuda");
  CHECK(input_error_of([&] { make_scorer(ck, "tpu", Precision::fp32, 2); }) == "--device 'tpu': expected cpu or cuda");
#if !MEG_CUDA
  CHECK_THAT(input_error_of([&] { make_scorer(ck, "cuda", Precision::fp32, 2); }), ContainsSubstring("no CUDA"));
#endif
}

TEST_CASE("eval rolling windows: lm-eval's windows for context length 1", "[eval]") {
  using W = std::vector<std::vector<int32_t>>;
  const auto windows = [](int n, int max_length) {
    std::vector<int32_t> tokens(n);
    for (int i = 0; i < n; ++i) tokens[i] = i + 1;
    W out;
    for (const TokenWindow& w : rolling_windows(tokens, 0, max_length)) {
      out.push_back(w.context);
      out.push_back(w.continuation);
    }
    return out;
  };
  // Context and prediction of each window, in turn.
  CHECK(windows(0, 4).empty());
  CHECK(windows(3, 4) == W{{0}, {1, 2, 3}});
  CHECK(windows(4, 4) == W{{0}, {1, 2, 3, 4}});
  CHECK(windows(5, 4) == W{{0}, {1, 2, 3, 4}, {1, 2, 3, 4}, {5}});
  CHECK(windows(11, 4) == W{{0}, {1, 2, 3, 4}, {4}, {5, 6, 7, 8}, {7, 8}, {9, 10, 11}});
  CHECK(windows(13, 4) == W{{0}, {1, 2, 3, 4}, {4}, {5, 6, 7, 8}, {8}, {9, 10, 11, 12}, {9, 10, 11, 12}, {13}});
  CHECK(windows(3, 1) == W{{0}, {1}, {1}, {2}, {2}, {3}});

  // Any length: every token predicted once, in order, each window L + 1 tokens but the first.
  for (int n = 1; n < 40; ++n) {
    std::vector<int32_t> tokens = random_tokens(n, 50, n);
    std::vector<int32_t> predicted;
    const auto ws = rolling_windows(tokens, 99, 7);
    for (size_t i = 0; i < ws.size(); ++i) {
      predicted.insert(predicted.end(), ws[i].continuation.begin(), ws[i].continuation.end());
      CHECK(ws[i].continuation.size() <= 7);
      if (i > 0) CHECK(ws[i].context.size() + ws[i].continuation.size() == 8);
    }
    CHECK(predicted == tokens);
  }
}
