// The CPU inference model: KV-cache decoding (prompts, single tokens, several slots interleaved in
// one call) gives the logits of GptModel's full recomputation over the whole sequence, for GPT-2
// and Llama (Llama also past its training length); slots reset; bad calls are refused. A model's
// tensor-parallel shards put back together are the model, its vocabulary padded for the group
// (the split model's logits: tests/mpi/test_infer_tp.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "infer_test_models.hpp"
#include "test_util.hpp"
#include "core/error.hpp"
#include "infer/cpu_inference_model.hpp"
#include "infer/inference_model.hpp"
#include "infer/sampler.hpp"
#include "model/gpt.hpp"
#include "model/tensor_parallel.hpp"
#include "model/tensor_parallel_shard.hpp"
#include "ops/cpu/ops.hpp"

using namespace meg;

namespace {

// 4 heads (Llama: 2 key/value heads), vocab 50 padded to 64.
ModelConfig small_config(ModelFamily family) { return small_inference_config(family, 4, 2, 50); }

// Logits [T, vocab_size] of the full forward over TOKENS (the padded columns dropped).
std::vector<float> full_logits(const ModelConfig& c, const std::vector<float>& params,
                               const std::vector<int32_t>& tokens) {
  GptModel<float> m(c);
  std::copy(params.begin(), params.end(), m.params());
  m.set_training(false);
  const int T = int(tokens.size());
  m.forward(tokens.data(), nullptr, 1, T);
  std::vector<float> out(size_t(T) * c.vocab_size);
  for (int t = 0; t < T; ++t)
    std::copy_n(m.logits() + size_t(t) * c.padded_vocab_size, c.vocab_size, out.begin() + size_t(t) * c.vocab_size);
  return out;
}

}  // namespace

TEST_CASE("cpu ops: rope from a position and cached attention give the rows of the whole sequence's",
          "[infer][kvcache]") {
  const int T = 12, NH = 4, NKV = 2, first = 7, n = T - first;
  for (const int HS : {8, 12}) {  // 12: a partial vector of lanes in the decode path's dot products
    CAPTURE(HS);
    std::vector<float> q(size_t(T) * NH * HS), k(size_t(T) * NKV * HS), v(k.size());
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    for (auto* a : {&q, &k, &v})
      for (float& x : *a) x = normal(rng);

    // Rows first.. of rope over the whole sequence are rope_forward_from over those rows alone.
    std::vector<float> whole(k.size()), tail(k.begin() + first * NKV * HS, k.end());
    cpu::rope_forward(whole.data(), k.data(), 1, T, NKV, HS, 10000.0f);
    cpu::rope_forward_from(tail.data(), tail.data(), n, NKV, HS, first, 10000.0f);
    CHECK(std::equal(tail.begin(), tail.end(), whole.begin() + first * NKV * HS));

    // The last N queries against all T keys (the cache) are the last rows of the full attention; so
    // is the last query alone (a decode step, which has a path of its own). Likewise under a
    // sliding window, shorter and longer than the sequence.
    for (const int window : {-1, 0, 3, T + 1}) {
      CAPTURE(window);
      std::vector<float> out(q.size()), att(size_t(NH) * T * T), cached(size_t(n) * NH * HS), scores(size_t(n) * T);
      cpu::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), 1, T, NH, NKV, HS, 0, {}, window);
      cpu::attention_cached_forward(cached.data(), q.data() + first * NH * HS, k.data(), v.data(), n, first, NH, NKV,
                                    HS, scores.data(), window);
      CHECK(row_error(cached.data(), out.data() + first * NH * HS, int(cached.size())) < 1e-6);
      std::vector<float> last(size_t(NH) * HS), head_scores(size_t(NH) * T);
      cpu::attention_cached_forward(last.data(), q.data() + (T - 1) * NH * HS, k.data(), v.data(), 1, T - 1, NH, NKV,
                                    HS, head_scores.data(), window);
      CHECK(row_error(last.data(), out.data() + (T - 1) * NH * HS, int(last.size())) < 1e-6);
    }
  }
}

TEST_CASE("inference model: KV-cache decoding equals full recomputation, slots interleaved", "[infer][kvcache]") {
  for (const auto& [family, window] : {std::pair{ModelFamily::gpt2, -1}, std::pair{ModelFamily::llama, -1},
                                       std::pair{ModelFamily::llama, 4}}) {
    INFO(family_name(family) << ", window-size " << window);
    ModelConfig c = small_config(family);
    c.window_size = window;  // a window shorter than the 16 positions: the cache keeps them all
    const std::vector<float> params = init_params(c, 7);
    const int V = int(c.vocab_size);
    // Three sequences of 16 tokens; each slot is fed in chunks of its own sizes, so that one call
    // mixes prompts and single decode tokens of different slots at different positions.
    const std::vector<std::vector<int32_t>> seqs = {random_tokens(16, V, 1), random_tokens(16, V, 2),
                                                    random_tokens(16, V, 3)};
    const std::vector<std::vector<int>> chunks = {{5, 1, 1, 3, 1, 1, 1, 1, 1, 1},
                                                  {1, 1, 7, 1, 1, 1, 1, 1, 1, 1},
                                                  {16}};
    std::vector<std::vector<float>> ref;
    for (const auto& s : seqs) ref.push_back(full_logits(c, params, s));

    CpuInferenceModel model(c, params, 3, 0);
    CHECK(model.max_length() == 16);
    std::vector<size_t> done(3, 0), step(3, 0);
    std::vector<float> logits(3 * size_t(V));
    int calls = 0;
    for (;;) {
      std::vector<AppendRequest> reqs;
      std::vector<int> slots;
      // Slot order rotates so that the packing order changes too.
      for (int k = 0; k < 3; ++k) {
        const int s = (k + calls) % 3;
        if (step[s] == chunks[s].size()) continue;
        const size_t n = size_t(chunks[s][step[s]]);
        reqs.push_back({s, std::span<const int32_t>(seqs[s]).subspan(done[s], n)});
        slots.push_back(s);
      }
      if (reqs.empty()) break;
      model.append(reqs, logits.data());
      ++calls;
      for (size_t i = 0; i < reqs.size(); ++i) {
        const int s = slots[i];
        done[s] += reqs[i].tokens.size();
        ++step[s];
        CHECK(model.length(s) == int(done[s]));
        INFO("slot " << s << " at position " << done[s] - 1);
        CHECK(row_error(logits.data() + i * V, ref[s].data() + (done[s] - 1) * V, V) < 1e-5);
      }
    }
    CHECK(calls == 10);

    // A reset slot starts a new sequence: the same logits as from a fresh model.
    model.reset(1);
    CHECK(model.length(1) == 0);
    const AppendRequest again{1, std::span<const int32_t>(seqs[2]).first(9)};
    model.append({&again, 1}, logits.data());
    CHECK(row_error(logits.data(), ref[2].data() + 8 * V, V) < 1e-5);
  }
}

// A decode step's linear layers give each row the same bits whatever rows share it (up to 32:
// ops/cpu/matmul.cpp), and each row attends to its own slot alone, so a slot's logits are the same
// bits alone or beside 23 others (three groups of the products' 8 rows), and a sequence's tokens
// do not depend on --batch.
TEST_CASE("inference model: a decode step gives a slot the same logits alone or among 24", "[infer][kvcache]") {
  for (const ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    INFO(family_name(family));
    const ModelConfig c = small_config(family);
    const std::vector<float> params = init_params(c, 9);
    const int V = int(c.vocab_size), kSlots = 24;
    CpuInferenceModel many(c, params, kSlots, 0), one(c, params, 1, 0);
    std::vector<std::vector<int32_t>> seqs;
    for (int s = 0; s < kSlots; ++s) seqs.push_back(random_tokens(6, V, 20 + s));
    // Each slot's prompt (its first 5 tokens) alone, then one step of every slot's 6th token.
    std::vector<float> logits(size_t(kSlots) * V), alone(V);
    std::vector<AppendRequest> step;
    for (int s = 0; s < kSlots; ++s) {
      const AppendRequest prompt{s, std::span<const int32_t>(seqs[s]).first(5)};
      many.append({&prompt, 1}, logits.data());
      step.push_back({s, std::span<const int32_t>(seqs[s]).subspan(5, 1)});
    }
    many.append(step, logits.data());
    for (const int s : {0, 7, 8, 15, 23}) {
      INFO("slot " << s);
      one.reset(0);
      const AppendRequest prompt{0, std::span<const int32_t>(seqs[s]).first(5)};
      const AppendRequest next{0, std::span<const int32_t>(seqs[s]).subspan(5, 1)};
      one.append({&prompt, 1}, alone.data());
      one.append({&next, 1}, alone.data());
      CHECK(std::equal(alone.begin(), alone.end(), logits.begin() + ptrdiff_t(s) * V));
    }
  }
}

TEST_CASE("inference model: queued choices are the calls' tokens, a chained call running the previous choices",
          "[infer][kvcache]") {
  const ModelConfig c = small_config(ModelFamily::llama);
  const std::vector<float> params = init_params(c, 10);
  const int V = int(c.vocab_size);
  const std::vector<int32_t> a = random_tokens(6, V, 6), b = random_tokens(4, V, 7);
  // The queue against the same calls made one at a time, each chained call's tokens the
  // previous call's choices: two prompts, then steps greedy and drawn in turn.
  CpuInferenceModel queued(c, params, 2, 0), direct(c, params, 2, 0);
  const AppendRequest prompts[] = {{1, b}, {0, a}};
  int32_t expected[2], got[2];
  direct.append_greedy(prompts, V, expected);
  queued.queue_choices(prompts, V, {}, false);
  const AppendRequest chained[] = {{1, {}}, {0, {}}};
  const SoftmaxDraw draws[] = {{0.8, 1, 0.3}, {1.2, 0.9, 0.6}};
  for (int step = 0; step < 4; ++step) {
    INFO("step " << step);
    queued.queue_choices(chained, V, step % 2 ? std::span<const SoftmaxDraw>(draws) : std::span<const SoftmaxDraw>(),
                         true);
    CHECK(queued.length(0) == int(a.size()) + step + 1);  // the queued call's token counted
    queued.take_choices(got);
    CHECK(std::vector<int32_t>(got, got + 2) == std::vector<int32_t>(expected, expected + 2));
    const AppendRequest next[] = {{1, {&expected[0], 1}}, {0, {&expected[1], 1}}};
    if (step % 2)
      direct.append_sample(next, V, draws, expected, nullptr);
    else
      direct.append_greedy(next, V, expected);
  }
  queued.take_choices(got);
  CHECK(std::vector<int32_t>(got, got + 2) == std::vector<int32_t>(expected, expected + 2));
  CHECK_THROWS_AS(queued.take_choices(got), std::logic_error);  // nothing queued

  // A third call queued before the first is taken; chained requests with tokens, in another
  // order, or of another count; a draw missing.
  queued.queue_choices(chained, V, {}, true);
  queued.queue_choices(chained, V, {}, true);
  CHECK_THROWS_AS(queued.queue_choices(chained, V, {}, true), std::logic_error);
  queued.take_choices(got);
  queued.take_choices(got);
  const AppendRequest with_tokens[] = {{1, {&got[0], 1}}, {0, {&got[1], 1}}};
  const AppendRequest swapped[] = {{0, {}}, {1, {}}};
  CHECK_THROWS_AS(queued.queue_choices(with_tokens, V, {}, true), std::invalid_argument);
  CHECK_THROWS_AS(queued.queue_choices(swapped, V, {}, true), std::invalid_argument);
  CHECK_THROWS_AS(queued.queue_choices({chained, 1}, V, {}, true), std::invalid_argument);
  CHECK_THROWS_AS(queued.queue_choices(chained, V, {draws, 1}, true), std::invalid_argument);
  CpuInferenceModel fresh(c, params, 2, 0);
  CHECK_THROWS_AS(fresh.queue_choices(chained, V, {}, true), std::logic_error);  // nothing before it

  // While a call is queued, no call runs tokens; a reset may come (a slot whose sequence ended
  // while its step was queued). A chained call follows neither.
  queued.queue_choices(chained, V, {}, true);
  std::vector<float> logits(size_t(2) * size_t(V));
  const int32_t token = 3;
  const AppendRequest more{0, {&token, 1}};
  CHECK_THROWS_AS(queued.append({&more, 1}, logits.data()), std::logic_error);
  CHECK_THROWS_AS(queued.append_greedy({&more, 1}, V, got), std::logic_error);
  CHECK_THROWS_AS(queued.append_sample({&more, 1}, V, {draws, 1}, got, nullptr), std::logic_error);
  const int length = queued.length(0);
  queued.reset(1);
  CHECK(queued.length(1) == 0);
  CHECK_THROWS_AS(queued.queue_choices(chained, V, {}, true), std::logic_error);  // after a reset
  queued.take_choices(got);
  CHECK(queued.length(0) == length);  // the refused calls ran nothing
  const AppendRequest restart{1, {&token, 1}}, restart_follow{1, {}};
  queued.queue_choices({&restart, 1}, V, {}, false);
  queued.take_choices(got);
  queued.append_greedy({&restart, 1}, V, got);
  CHECK_THROWS_AS(queued.queue_choices({&restart_follow, 1}, V, {}, true), std::logic_error);  // after a direct call
  queued.queue_choices({&restart, 1}, V, {}, false);
  queued.queue_choices({&restart_follow, 1}, V, {}, true);  // right after a queued call
  queued.take_choices(got);
  queued.take_choices(got);
  CHECK(queued.length(1) == 4);
}

TEST_CASE("inference model: append_greedy and append_sample give the sampler's choices among the first tokens",
          "[infer][kvcache]") {
  const ModelConfig c = small_config(ModelFamily::gpt2);
  const std::vector<float> params = init_params(c, 9);
  const int V = int(c.vocab_size);
  const std::vector<int32_t> a = random_tokens(12, V, 4), b = random_tokens(12, V, 5);
  std::mt19937 rng(12);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (const int choices : {V, V / 2, 1}) {
    INFO("choices " << choices);
    // The same calls to two models: the logits from one, the chosen tokens from the other, greedy
    // and drawn in turn (one request sampled, the other greedy or sampled with top-p; on some
    // calls the logits too, which must be append()'s).
    CpuInferenceModel with_logits(c, params, 2, 0), with_tokens(c, params, 2, 0);
    Sampler sampler(choices);
    std::vector<float> logits(2 * size_t(V));
    size_t done = 0;
    int call = 0;
    for (const size_t n : {size_t(5), size_t(1), size_t(1), size_t(3), size_t(2)}) {
      const AppendRequest reqs[] = {{1, std::span(b).subspan(done, n)}, {0, std::span(a).subspan(done, n)}};
      SoftmaxDraw draws[] = {{0, 1, 0}, {0, 1, 0}};
      if (call % 2) {
        draws[0] = {0.7, 1, uniform(rng)};
        draws[1] = {call % 4 == 1 ? 1.5 : 0.0, 0.8, uniform(rng)};
      }
      with_logits.append(reqs, logits.data());
      int32_t tokens[2] = {-1, -1};
      std::vector<float> also(2 * size_t(V), NAN);
      if (call % 2 == 0)
        with_tokens.append_greedy(reqs, choices, tokens);
      else
        with_tokens.append_sample(reqs, choices, draws, tokens, call % 4 == 3 ? also.data() : nullptr);
      if (call++ % 4 == 3) CHECK(also == logits);
      done += n;
      for (size_t i = 0; i < 2; ++i) {
        SamplingParams p;
        p.temperature = draws[i].temperature;
        p.top_p = draws[i].top_p;
        CHECK(tokens[i] == sampler.sample(logits.data() + i * size_t(V), {}, p, draws[i].u));
        CHECK(tokens[i] < choices);
      }
      CHECK(with_tokens.length(0) == int(done));
      CHECK(with_tokens.length(1) == int(done));
    }
  }
  CpuInferenceModel model(c, params, 1, 0);
  const AppendRequest one{0, std::span(a).first(1)};
  int32_t token = 0;
  CHECK_THROWS_AS(model.append_greedy({&one, 1}, 0, &token), std::invalid_argument);
  CHECK_THROWS_AS(model.append_greedy({&one, 1}, V + 1, &token), std::invalid_argument);
  const auto refused = [&](SoftmaxDraw d, int choices = 0) {
    CHECK_THROWS_AS(model.append_sample({&one, 1}, choices > 0 ? choices : V, {&d, 1}, &token, nullptr),
                    std::invalid_argument);
  };
  refused({-1, 1, 0.5});
  refused({NAN, 1, 0.5});
  refused({1, 0, 0.5});
  refused({1, 1.5, 0.5});
  refused({1, 1, 1.0});
  refused({1, 1, -0.1});
  refused({1, 1, 0.5}, V + 1);
  CHECK_THROWS_AS(model.append_sample({&one, 1}, V, {}, &token, nullptr), std::invalid_argument);  // no draw for it
  // The CPU model does not apply a repetition penalty (penalises(): the generator applies it on the
  // host), so its choosing calls refuse one.
  CHECK(!model.penalises());
  const AppendRequest penalised{0, std::span(a).first(1), 1.2};
  std::vector<int32_t> top_tokens(2);
  std::vector<float> top_logits(2);
  const SoftmaxDraw draw{1, 1, 0.5};
  CHECK_THROWS_AS(model.append_greedy({&penalised, 1}, V, &token), std::invalid_argument);
  CHECK_THROWS_AS(model.append_top_k({&penalised, 1}, V, 2, top_tokens.data(), top_logits.data()),
                  std::invalid_argument);
  CHECK_THROWS_AS(model.append_sample({&penalised, 1}, V, {&draw, 1}, &token, nullptr), std::invalid_argument);
  CHECK(model.length(0) == 0);
}

TEST_CASE("inference model: append_top_k gives the k largest logits among the first tokens, in order", "[infer][kvcache]") {
  const ModelConfig c = small_config(ModelFamily::llama);
  const std::vector<float> params = init_params(c, 10);
  const int V = int(c.vocab_size);
  const std::vector<int32_t> a = random_tokens(9, V, 6);
  for (const auto& [choices, k] : {std::pair{V, 1}, std::pair{V, 7}, std::pair{V / 2, 5}, std::pair{V, V}}) {
    INFO("choices " << choices << ", k " << k);
    CpuInferenceModel with_logits(c, params, 1, 0), with_top(c, params, 1, 0);
    std::vector<float> logits(static_cast<size_t>(V)), top(static_cast<size_t>(k));
    std::vector<int32_t> tokens(static_cast<size_t>(k));
    for (const size_t n : {size_t(6), size_t(1), size_t(2)}) {
      const AppendRequest r{0, std::span(a).subspan(size_t(with_top.length(0)), n)};
      with_logits.append({&r, 1}, logits.data());
      with_top.append_top_k({&r, 1}, choices, k, tokens.data(), top.data());
      std::vector<int32_t> want(static_cast<size_t>(choices));
      for (int32_t t = 0; t < choices; ++t) want[size_t(t)] = t;
      std::stable_sort(want.begin(), want.end(),
                       [&](int32_t x, int32_t y) { return logits[size_t(x)] > logits[size_t(y)]; });
      for (int j = 0; j < k; ++j) {
        CHECK(tokens[size_t(j)] == want[size_t(j)]);
        CHECK(top[size_t(j)] == logits[size_t(want[size_t(j)])]);
      }
    }
  }
  // Candidates in any order are put in order, the -1 past them left.
  std::vector<int32_t> tokens = {4, 2, 9, 3, -1};
  std::vector<float> top = {1.0f, 2.0f, 1.0f, -0.0f, 0.0f};
  order_top_k(tokens.data(), top.data(), 5);
  CHECK(tokens == std::vector<int32_t>{2, 4, 9, 3, -1});
  CHECK(top == std::vector<float>{2.0f, 1.0f, 1.0f, 0.0f, 0.0f});
  CpuInferenceModel model(c, params, 1, 0);
  const AppendRequest one{0, std::span(a).first(1)};
  std::vector<int32_t> t(300);
  std::vector<float> l(300);
  CHECK_THROWS_AS(model.append_top_k({&one, 1}, V, 0, t.data(), l.data()), std::invalid_argument);
  CHECK_THROWS_AS(model.append_top_k({&one, 1}, 4, 5, t.data(), l.data()), std::invalid_argument);
  CHECK_THROWS_AS(model.append_top_k({&one, 1}, V, kMaxAppendTopK + 1, t.data(), l.data()), std::invalid_argument);
  CHECK(model.length(0) == 0);
}

TEST_CASE("inference model: Llama decodes past its training length as a longer model computes", "[infer][kvcache]") {
  ModelConfig c = small_config(ModelFamily::llama);
  const std::vector<float> params = init_params(c, 11);
  const int V = int(c.vocab_size);
  const std::vector<int32_t> seq = random_tokens(24, V, 5);
  ModelConfig longer = c;
  longer.seq_length = 24;  // RoPE has no learned positions: the same parameters
  const std::vector<float> ref = full_logits(longer, params, seq);

  CpuInferenceModel model(c, params, 1, 24);
  std::vector<float> logits(static_cast<size_t>(V));
  const AppendRequest prompt{0, std::span<const int32_t>(seq).first(10)};
  model.append({&prompt, 1}, logits.data());
  CHECK(row_error(logits.data(), ref.data() + 9 * V, V) < 1e-5);
  for (size_t t = 10; t < seq.size(); ++t) {
    const AppendRequest one{0, std::span<const int32_t>(seq).subspan(t, 1)};
    model.append({&one, 1}, logits.data());
    INFO("position " << t);
    CHECK(row_error(logits.data(), ref.data() + t * V, V) < 1e-5);
  }
}

TEST_CASE("inference model: bad sizes and calls are refused before any work", "[infer][kvcache]") {
  const ModelConfig gpt = small_config(ModelFamily::gpt2);
  const std::vector<float> params = init_params(gpt, 1);
  CHECK(input_error_of([&] { CpuInferenceModel(gpt, params, 1, 17); }) ==
        "--max-length 17: this GPT-2 model has only 16 learned positions");
  CHECK(input_error_of([&] { CpuInferenceModel(gpt, params, 0, 0); }) == "--batch 0: must be at least 1");
  CHECK_THROWS_AS(CpuInferenceModel(gpt, std::vector<float>(10), 1, 0), InputError);

  CpuInferenceModel model(gpt, params, 2, 8);
  std::vector<float> logits(2 * size_t(gpt.vocab_size));
  const std::vector<int32_t> five = {1, 2, 3, 4, 5}, bad = {1, 50};
  const AppendRequest a{0, five}, b{0, five}, c{2, five}, d{1, bad};
  const AppendRequest twice[] = {a, b};
  CHECK(input_error_of([&] { model.append(twice, logits.data()); }) ==
        "inference model: slot 0 appears twice in one append");
  CHECK(input_error_of([&] { model.append({&c, 1}, logits.data()); }) == "inference model: slot 2 outside [0, 2)");
  CHECK(input_error_of([&] { model.append({&d, 1}, logits.data()); }) ==
        "inference model: token 50 outside the vocabulary [0, 50)");
  model.append({&a, 1}, logits.data());
  // A failed call leaves every slot as it was.
  const AppendRequest both[] = {AppendRequest{1, five}, a};
  CHECK(input_error_of([&] { model.append(both, logits.data()); }) ==
        "inference model: slot 0 would hold 10 tokens, more than its 8");
  CHECK(model.length(0) == 5);
  CHECK(model.length(1) == 0);
}

TEST_CASE("inference model: the factory gives the CPU model and refuses what the build lacks", "[infer][kvcache]") {
  CheckpointModel ck;
  ck.config = small_config(ModelFamily::gpt2);
  ck.params = init_params(ck.config, 3);
  const auto model = make_inference_model(ck, "cpu", Precision::fp32, 2, 0);
  CHECK(model->slots() == 2);
  CHECK(model->max_length() == 16);
  CHECK(input_error_of([&] { make_inference_model(ck, "cpu", Precision::bf16, 1, 0); }) ==
        "--precision bf16: the CPU path computes in fp32 only; use --device cuda");
  CHECK(input_error_of([&] { make_inference_model(ck, "tpu", Precision::fp32, 1, 0); }) ==
        "--device 'tpu': expected cpu or cuda");
#if !MEG_CUDA
  CHECK(input_error_of([&] { make_inference_model(ck, "cuda", Precision::bf16, 1, 0); }) ==
        "--device cuda: this build of meg has no CUDA support; use --device cpu");
#endif
}

TEST_CASE("inference model: tensor-parallel shards put together are the model, the vocabulary padded for the group",
          "[infer][kvcache]") {
  for (const ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    INFO(family_name(family));
    ModelConfig narrow = small_config(family);
    narrow.vocab_size = 70;
    narrow.pad_vocab();  // 80 rows: grown to 96 for 2 ranks
    ModelConfig wide = narrow;
    wide.pad_vocab(4);  // 128 rows: cut to 96
    for (const ModelConfig& c : {narrow, wide}) {
      const std::vector<float> params = init_params(c, 5);
      const ModelConfig sharded = tensor_parallel_config(c, params.size(), 2);
      CHECK(sharded.padded_vocab_size == 96);
      const std::vector<float> s0 = tensor_parallel_shard(c, params, sharded, 2, 0);
      const std::vector<float> s1 = tensor_parallel_shard(c, params, sharded, 2, 1);
      // A member may be given its shard alone (load_checkpoint_model with the group's size and rank).
      CHECK(tensor_parallel_config(c, s0.size(), 2).padded_vocab_size == 96);
      std::vector<float> whole(size_t(sharded.num_parameters()));
      unshard_parameters<float>(sharded, 2, {s0.data(), s1.data()}, whole.data());
      const auto from = gpt_parameter_table(c), to = gpt_parameter_table(sharded);
      for (size_t i = 0; i < to.size(); ++i) {
        INFO(to[i].name);
        const size_t same = std::min(from[i].numel, to[i].numel);
        CHECK(std::equal(whole.begin() + to[i].offset, whole.begin() + to[i].offset + same,
                         params.begin() + from[i].offset));
        CHECK(std::all_of(whole.begin() + to[i].offset + same, whole.begin() + to[i].offset + to[i].numel,
                          [](float x) { return x == 0; }));
      }
    }
    // The whole model keeps its padding.
    CHECK(tensor_parallel_config(wide, size_t(wide.num_parameters()), 1).padded_vocab_size == 128);
  }
  const ModelConfig llama = small_config(ModelFamily::llama);
  const size_t n = size_t(llama.num_parameters());
  CHECK(input_error_of([&] { tensor_parallel_config(llama, 10, 1); }) ==
        fmt::format("model: 10 parameters given, the model has {}", n));
  CHECK(input_error_of([&] { tensor_parallel_config(llama, n, 4); }) ==
        "--tp 4: the model's key/value heads (2) do not divide over 4 ranks");
  ModelConfig padded = llama;
  padded.pad_vocab(2);
  const size_t shard = table_size(gpt_parameter_table(padded, 2));
  CHECK(input_error_of([&] { tensor_parallel_config(llama, 10, 2); }) ==
        fmt::format("model: 10 parameters given, the model has {} ({} on each of 2 ranks)", n, shard));

  // A shard is only for the member it was read for.
  CheckpointModel part{"ck", llama, std::vector<float>(shard), "", "", 2, 1};
  CHECK_THROWS_AS(make_inference_model(part, "cpu", Precision::fp32, 1, 16), std::invalid_argument);
}
