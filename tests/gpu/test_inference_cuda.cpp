// The CUDA inference paths against the CPU model's full recomputation (GptModel<double>, evaluation
// mode), for GPT-2 and Llama (grouped-query attention), in fp32, bf16 and fp16:
//   - the inference model: logits after prompts, decode steps, prompts appended after cached
//     tokens, one-token prompts and slot resets, several slots interleaved in one call at different
//     lengths, equal the full forward's at each request's last position. The schedule runs decode
//     steps of the same size several times, so that the CUDA graph path (captured at the second,
//     replayed after) is checked too, and contexts past 64 keys, so that the key splits of the
//     cached attention and their merge are; once more with passes of 16 rows, which cut a long
//     prompt into pieces that attend through the cache;
//   - append_greedy, append_top_k and append_sample: a twin model given the same calls returns, for
//     every request, the host sampler's greedy choice, the 7 (or 1) largest logits in order, or the token
//     whose share of the softmax (or of its nucleus) holds u, from the first model's logits (over
//     the whole vocabulary, and on some calls over its first half), on the graph path too;
//     argmax_rows, top_k_rows and sample_rows, the kernels behind them, on rows of ties, NaN, zeros
//     of both signs and infinities;
//   - the scorer: log p(target) and the greedy flag of every scored position of a padded batch,
//     against a log-softmax in double over the reference's logits; unscored positions untouched.
//
// Bounds. Per logits row, max |gpu - cpu| over the real vocabulary relative to the row's largest
// |cpu|: fp32 computes the same function in another order (1e-4 leaves a wide margin over fp32
// rounding, ~1e-6, while any wrong index or missing term is of order 1); bf16 and fp16 round every
// activation and weight (unit roundoff 2^-8 and 2^-11) through ~10 ops per block and store the
// logits in X: 5e-2 and 2e-2. Greedy choices must agree wherever the reference's two best
// logits differ by more than the error bound, and, in bf16/fp16, in at least 80% of the rows (the
// larger initialisation keeps most rows far from ties).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "eval/scorer.hpp"
#include "tokenizer/tokenizer.hpp"
#include "infer/cuda_inference_model.hpp"
#include "infer/generator.hpp"
#include "infer/inference_model.hpp"
#include "infer/sampler.hpp"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"
#include "model/gpt.hpp"
#include "test_util.hpp"

namespace {

using namespace meg;

// 2 layers, vocabulary 300 (padded to 384), a larger init than Megatron's so that the logits are
// far from uniform: 0.2 at C = 32, scaled as 1/sqrt(C) so that every size sees products of about
// the same spread (a sharper softmax would turn bf16's rounding into large changes).
ModelConfig test_config(ModelFamily family, int hidden, int heads, int kv_heads, int seq_length) {
  ModelConfig c = ModelConfig::defaults(family);
  c.num_layers = 2;
  c.hidden_size = hidden;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.ffn_hidden_size = family == ModelFamily::llama ? 3 * hidden : 4 * hidden;
  c.seq_length = seq_length;
  c.vocab_size = 300;
  c.pad_vocab();
  c.init_std = 0.2 * std::sqrt(32.0 / hidden);
  if (family == ModelFamily::llama) c.rope_theta = 10000;
  c.validate();
  return c;
}

// Megatron's initialisation plus noise: its zero biases and unit norm weights would hide a bias or
// a norm weight applied in the wrong place.
CheckpointModel random_checkpoint(const ModelConfig& c, uint64_t seed) {
  CheckpointModel ck;
  ck.config = c;
  ck.params.resize(size_t(c.num_parameters()));
  gpt_init_parameters(c, gpt_parameter_table(c), seed, ck.params.data());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> jitter(-0.05f, 0.05f);
  for (float& p : ck.params) p += jitter(rng);
  return ck;
}

// Logits [T, Vp] of the CPU model's forward over TOKENS, in double.
std::vector<double> reference_logits(const CheckpointModel& ck, const std::vector<int32_t>& tokens) {
  GptModel<double> m(ck.config);
  std::copy(ck.params.begin(), ck.params.end(), m.params());
  m.set_training(false);
  const int T = int(tokens.size());
  m.forward(tokens.data(), nullptr, 1, T);
  return {m.logits(), m.logits() + size_t(T) * ck.config.padded_vocab_size};
}

int argmax(const double* row, int V) { return int(std::max_element(row, row + V) - row); }

// The two best of a row differ by more than GAP.
bool clear_winner(const double* row, int V, double gap) {
  std::vector<double> r(row, row + V);
  std::partial_sort(r.begin(), r.begin() + 2, r.end(), std::greater<>());
  return r[0] - r[1] > gap;
}

// The tokens [0, CHOICES) of ROW, the largest first, equal ones by token, NaN left out.
std::vector<int32_t> largest_first(const float* row, int choices) {
  std::vector<int32_t> ids;
  for (int32_t t = 0; t < choices; ++t)
    if (!std::isnan(row[t])) ids.push_back(t);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  return ids;
}

// The draw sample_rows makes from ROW [0, V) at temperature T > 0 and TOP_P, in long double: the
// exact sums its integer ones stand for. ONLY: the choice when it does not depend on u (a row of
// NaN, an infinite largest logit), else -1. Otherwise the nucleus, its running sums by column
// (before[j]: of the nucleus's columns before j; p[j]: j's share, 0 outside), their total S, and
// MARGIN: how close, relative to the row's total, a running sum in order (the largest first, equal
// logits by column) comes to top_p of the total, which the device's roundings may put on the
// other side where it is small.
struct ExactDraw {
  int only = -1;
  std::vector<long double> before, p;
  long double S = 0;
  double margin = 1;

  ExactDraw(const float* row, int V, double T, double top_p) : before(size_t(V)), p(size_t(V)) {
    const std::vector<int32_t> order = largest_first(row, V);
    if (order.empty() || !std::isfinite(row[order[0]])) {
      only = order.empty() ? 0 : order[0];
      return;
    }
    const long double max = row[order[0]];
    long double total = 0;
    std::vector<long double> e(size_t(V), 0.0L);
    for (const int32_t j : order) total += e[size_t(j)] = std::exp((row[j] - max) / T);
    const long double target = top_p * total;
    long double running = 0;
    for (const int32_t j : order) {
      if (top_p < 1 && running >= target) break;
      running += p[size_t(j)] = e[size_t(j)];
      margin = std::min(margin, double(std::abs(running - target) / total));
    }
    for (int j = 0; j < V; ++j) {
      before[size_t(j)] = S;
      S += p[size_t(j)];
    }
  }
  // The u at the middle of token J's share.
  double middle(int j) const { return double((before[size_t(j)] + p[size_t(j)] / 2) / S); }
  // Whether the device may draw J at U: J in the nucleus and U within SLACK of J's share.
  bool allows(int j, double u, double slack) const {
    if (only >= 0) return j == only;
    if (j < 0 || j >= int(p.size()) || p[size_t(j)] == 0) return false;
    const long double r = u * S;
    return r >= before[size_t(j)] - slack * S && r <= before[size_t(j)] + p[size_t(j)] + slack * S;
  }
};

// TOP_P for row I of LOGITS [*, V] over its first CHOICES, or 1 where the nucleus of TOP_P is
// within 1e-5 of another (ExactDraw::margin): the draw is then certain.
double exact_top_p(const std::vector<float>& logits, size_t i, int V, int choices, double top_p) {
  return top_p < 1 && ExactDraw(logits.data() + i * size_t(V), choices, 1.0, top_p).margin < 1e-5 ? 1.0 : top_p;
}

// Checks one row of logits against the reference; counts rows and greedy agreements.
struct RowChecker {
  double tol;
  int rows = 0, agree = 0;

  void check(const float* got, const double* want, int V) {
    double err = 0, scale = 0;
    for (int j = 0; j < V; ++j) {
      err = std::max(err, std::abs(double(got[j]) - want[j]));  // NaN fails below
      scale = std::max(scale, std::abs(want[j]));
    }
    INFO("relative error " << err / scale);
    CHECK(err <= tol * scale);
    const int g = int(std::max_element(got, got + V) - got), w = argmax(want, V);
    if (clear_winner(want, V, 2 * tol * scale)) CHECK(g == w);
    ++rows;
    agree += g == w;
  }
};

// One slot's sequence: its tokens, the reference logits over all of them, and how many are cached.
struct Sequence {
  std::vector<int32_t> tokens;
  std::vector<double> ref;
  size_t done = 0;
};

// Runs the schedule of the file's comment on a model of CK with 3 slots.
void check_inference(const CheckpointModel& ck, Precision precision, double tol,
                     const CudaInferenceOptions& options = {}) {
  const ModelConfig& c = ck.config;
  const int V = int(c.vocab_size), Vp = int(c.padded_vocab_size);
  auto model = make_cuda_inference_model(ck, precision, 3, int(c.seq_length), options);
  auto twin = make_cuda_inference_model(ck, precision, 3, int(c.seq_length), options);
  REQUIRE(model->max_length() == int(c.seq_length));
  std::vector<Sequence> seqs(3);
  uint32_t seed = 1;
  const auto start = [&](int slot, size_t n) {
    seqs[size_t(slot)] = {random_tokens(n, V, seed++), {}, 0};
    seqs[size_t(slot)].ref = reference_logits(ck, seqs[size_t(slot)].tokens);
  };
  start(0, 200);
  start(1, 48);
  start(2, 64);

  RowChecker rows{tol};
  std::vector<float> logits(3 * size_t(V));
  std::vector<int32_t> tokens(3);
  int calls_made = 0;
  // One append of (slot, tokens) requests, checked request by request.
  const auto run = [&](const std::vector<std::pair<int, int>>& calls) {
    std::vector<AppendRequest> reqs;
    for (const auto& [slot, n] : calls) {
      const Sequence& s = seqs[size_t(slot)];
      reqs.push_back({slot, std::span<const int32_t>(s.tokens).subspan(s.done, size_t(n))});
    }
    std::fill(logits.begin(), logits.end(), NAN);
    model->append(reqs, logits.data());
    const int choices = ++calls_made % 4 == 0 ? V / 2 : V;
    if (calls_made % 3 == 1) {
      // K = 1 on every other such call: the argmax, from the output layer's epilogue (a few rows).
      const size_t K = calls_made % 2 ? 7 : 1;
      std::vector<int32_t> top_tokens(calls.size() * K);
      std::vector<float> top_logits(calls.size() * K);
      twin->append_top_k(reqs, choices, int(K), top_tokens.data(), top_logits.data());
      for (size_t i = 0; i < calls.size(); ++i) {
        INFO("request " << i << " of call " << calls_made << ", " << choices << " choices");
        const float* row = logits.data() + i * size_t(V);
        const std::vector<int32_t> want = largest_first(row, choices);
        for (size_t j = 0; j < K; ++j) {
          CHECK(top_tokens[i * K + j] == want[j]);
          CHECK(top_logits[i * K + j] == row[want[j]]);
        }
      }
    } else if (calls_made % 3 == 2) {
      // Each request's draw at temperature 1 (top-p 0.9 on some calls), u at the middle of the
      // share of the nucleus's token of median share among those above 1e-3.
      const double top_p = calls_made % 2 ? 0.9 : 1.0;
      std::vector<SoftmaxDraw> draws;
      std::vector<int32_t> want;
      for (size_t i = 0; i < calls.size(); ++i) {
        const ExactDraw exact(logits.data() + i * size_t(V), choices, 1.0, exact_top_p(logits, i, V, choices, top_p));
        std::vector<int32_t> kept;
        for (int j = 0; j < choices; ++j)
          if (exact.only < 0 && exact.p[size_t(j)] / exact.S > 1e-3) kept.push_back(j);
        std::sort(kept.begin(), kept.end(), [&](int a, int b) { return exact.p[size_t(a)] > exact.p[size_t(b)]; });
        want.push_back(kept.empty() ? exact.only : kept[kept.size() / 2]);
        draws.push_back({1.0, exact_top_p(logits, i, V, choices, top_p), kept.empty() ? 0.5 : exact.middle(want.back())});
      }
      // On some calls the logits too, which must be the first model's.
      std::vector<float> also(calls_made % 4 == 2 ? logits.size() : 0, NAN);
      twin->append_sample(reqs, choices, draws, tokens.data(), also.empty() ? nullptr : also.data());
      for (size_t i = 0; i < calls.size(); ++i) {
        INFO("request " << i << " of call " << calls_made << ", " << choices << " choices, top-p " << draws[i].top_p);
        CHECK(tokens[i] == want[i]);
        if (!also.empty())
          CHECK(std::equal(also.begin() + ptrdiff_t(i * V), also.begin() + ptrdiff_t((i + 1) * V),
                           logits.begin() + ptrdiff_t(i * V)));
      }
    } else {
      twin->append_greedy(reqs, choices, tokens.data());
      Sampler greedy(choices);
      for (size_t i = 0; i < calls.size(); ++i) {
        INFO("request " << i << " of call " << calls_made << ", " << choices << " choices");
        CHECK(tokens[i] == greedy.sample(logits.data() + i * size_t(V), {}, SamplingParams{}, 0));
      }
    }
    for (const auto& call : calls) CHECK(twin->length(call.first) == model->length(call.first));
    for (size_t i = 0; i < calls.size(); ++i) {
      Sequence& s = seqs[size_t(calls[i].first)];
      s.done += size_t(calls[i].second);
      CHECK(model->length(calls[i].first) == int(s.done));
      INFO("slot " << calls[i].first << ", position " << s.done - 1);
      rows.check(logits.data() + i * size_t(V), s.ref.data() + (s.done - 1) * size_t(Vp), V);
    }
  };

  run({{0, 150}, {2, 7}});                                    // fresh prompts
  for (int k = 0; k < 3; ++k) run({{0, 1}, {2, 1}});          // decode: direct, captured, replayed
  run({{1, 5}, {0, 1}, {2, 1}});                              // a prompt among decode steps
  run({{2, 1}, {1, 4}});                                      // a prompt after cached tokens
  for (int k = 0; k < 5; ++k) run({{0, 1}, {1, 1}, {2, 1}});  // 3 slots at different lengths
  for (int k = 0; k < 3; ++k) run({{2, 1}});                  // batch 1
  model->reset(0);
  twin->reset(0);
  CHECK(model->length(0) == 0);
  start(0, 40);
  run({{1, 1}, {0, 9}, {2, 1}});                              // a reset slot's new prompt
  for (int k = 0; k < 4; ++k) run({{0, 1}, {1, 1}, {2, 1}});
  model->reset(1);
  twin->reset(1);
  start(1, 8);
  run({{1, 1}});                                              // a one-token prompt
  run({{1, 3}, {0, 1}});

  if (precision != Precision::fp32) {
    INFO("greedy agreement " << rows.agree << " of " << rows.rows);
    CHECK(rows.agree >= 0.8 * rows.rows);
  }
}

// Scores a padded batch (rows of 40, 25 and 33 tokens in a 3 x 40 batch, some positions unscored,
// a third of the targets the reference's greedy token), then one full row of T tokens.
void check_scorer(const CheckpointModel& ck, Precision precision, double tol, int T_full) {
  const ModelConfig& c = ck.config;
  const int V = int(c.vocab_size), Vp = int(c.padded_vocab_size);
  auto scorer = make_cuda_scorer(ck, precision, 4);
  CHECK(scorer->max_batch() == 4);
  CHECK(scorer->max_length() == int(c.seq_length));

  const auto score = [&](int B, int T, const std::vector<int>& lengths) {
    std::mt19937 rng(static_cast<uint32_t>(B * 1000 + T));
    std::uniform_int_distribution<int> tok(0, V - 1);
    std::vector<int32_t> tokens(size_t(B) * T, 3), targets(size_t(B) * T, -1);
    std::vector<std::vector<double>> refs;
    for (int b = 0; b < B; ++b) {
      std::vector<int32_t> row(static_cast<size_t>(lengths[size_t(b)]));
      for (auto& t : row) t = tok(rng);
      std::copy(row.begin(), row.end(), tokens.begin() + size_t(b) * T);
      refs.push_back(reference_logits(ck, row));
      for (int t = 0; t < lengths[size_t(b)]; ++t) {
        if (t % 11 == 5) continue;  // unscored inside the row too
        const double* ref = refs.back().data() + size_t(t) * Vp;
        targets[size_t(b) * T + t] = t % 3 == 0 ? argmax(ref, V) : tok(rng);
      }
    }
    const TokenScore untouched{42.0, true};
    std::vector<TokenScore> out(size_t(B) * T, untouched);
    scorer->score(tokens.data(), targets.data(), B, T, out.data());

    int scored = 0, greedy = 0;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        const size_t i = size_t(b) * T + t;
        INFO("row " << b << ", position " << t);
        if (targets[i] == -1) {
          CHECK((out[i].logprob == 42.0 && out[i].greedy));
          continue;
        }
        const double* ref = refs[size_t(b)].data() + size_t(t) * Vp;
        const double mx = *std::max_element(ref, ref + V);
        double sum = 0;
        for (int j = 0; j < V; ++j) sum += std::exp(ref[j] - mx);
        const double want = ref[targets[i]] - mx - std::log(sum);
        CHECK(std::abs(out[i].logprob - want) <= tol * std::max(1.0, std::abs(want)));
        const bool want_greedy = argmax(ref, V) == targets[i];
        double scale = 0;
        for (int j = 0; j < V; ++j) scale = std::max(scale, std::abs(ref[j]));
        if (clear_winner(ref, V, 2 * tol * scale)) CHECK(out[i].greedy == want_greedy);
        ++scored;
        greedy += out[i].greedy == want_greedy;
      }
    if (precision != Precision::fp32) CHECK(greedy >= 0.8 * scored);
  };
  score(3, 40, {40, 25, 33});
  score(1, T_full, {T_full});

  const std::vector<int32_t> tokens(10, 1), bad_targets(10, V);
  std::vector<TokenScore> out(10);
  CHECK_THROWS_AS(scorer->score(tokens.data(), tokens.data(), 5, 2, out.data()), InputError);
  CHECK_THROWS_AS(scorer->score(tokens.data(), bad_targets.data(), 1, 10, out.data()), InputError);
}

}  // namespace

TEST_CASE("CUDA inference model equals the CPU model's full forward in fp32", "[gpu][infer]") {
  SECTION("gpt2, head size 16") {
    check_inference(random_checkpoint(test_config(ModelFamily::gpt2, 64, 4, 4, 256), 1), Precision::fp32, 1e-4);
  }
  SECTION("gpt2, head size 64") {
    check_inference(random_checkpoint(test_config(ModelFamily::gpt2, 128, 2, 2, 256), 2), Precision::fp32, 1e-4);
  }
  SECTION("llama, 2 query heads per kv head, head size 16") {
    check_inference(random_checkpoint(test_config(ModelFamily::llama, 64, 4, 2, 256), 3), Precision::fp32, 1e-4);
  }
  SECTION("llama, 4 query heads per kv head, head size 32") {
    check_inference(random_checkpoint(test_config(ModelFamily::llama, 128, 4, 1, 256), 4), Precision::fp32, 1e-4);
  }
  SECTION("llama, tied embeddings, passes of 16 rows, no graphs") {
    ModelConfig c = test_config(ModelFamily::llama, 64, 4, 2, 256);
    c.tie_embeddings = true;
    check_inference(random_checkpoint(c, 5), Precision::fp32, 1e-4, {.cuda_graphs = false, .pass_tokens = 16});
  }
  SECTION("gpt2, passes of 16 rows") {
    check_inference(random_checkpoint(test_config(ModelFamily::gpt2, 64, 4, 4, 256), 6), Precision::fp32, 1e-4,
                    {.cuda_graphs = true, .pass_tokens = 16});
  }
  SECTION("gpt2 and llama, decode steps through cuBLASLt (small_linear off)") {
    const CudaInferenceOptions unfused{.cuda_graphs = true, .pass_tokens = 4096, .small_linear = false};
    check_inference(random_checkpoint(test_config(ModelFamily::gpt2, 64, 4, 4, 256), 7), Precision::fp32, 1e-4,
                    unfused);
    check_inference(random_checkpoint(test_config(ModelFamily::llama, 64, 4, 2, 256), 8), Precision::fp32, 1e-4,
                    unfused);
  }
}

TEST_CASE("CUDA inference with Qwen2, Qwen3 and Llama 3.1 features equals the CPU model in fp32", "[gpu][infer]") {
  ModelConfig c = test_config(ModelFamily::llama, 64, 4, 2, 256);
  SECTION("add-qkv-bias") { c.add_qkv_bias = true; }
  SECTION("qk-layernorm, kv-channels 32") {
    c.qk_layernorm = true;
    c.kv_channels = 32;
  }
  SECTION("llama3 RoPE scaling") {
    c.use_rope_scaling = true;
    c.rope_scaling_original_max_position_embeddings = 64;
  }
  SECTION("window-size 5") { c.window_size = 5; }
  SECTION("window-size 0") { c.window_size = 0; }
  c.validate();
  check_inference(random_checkpoint(c, 21), Precision::fp32, 1e-4);
  check_inference(random_checkpoint(c, 22), Precision::fp32, 1e-4,
                  {.cuda_graphs = true, .pass_tokens = 4096, .small_linear = false});
  check_scorer(random_checkpoint(c, 23), Precision::fp32, 1e-4, 64);
}

// ROWS converted to X in a new device array (cudaFree it).
template <typename X>
X* upload_as(const std::vector<float>& rows) {
  std::vector<X> converted(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) converted[i] = X(rows[i]);
  X* device = nullptr;
  MEG_CUDA_CHECK(cudaMalloc(&device, rows.size() * sizeof(X)));
  MEG_CUDA_CHECK(cudaMemcpy(device, converted.data(), rows.size() * sizeof(X), cudaMemcpyHostToDevice));
  return device;
}

// N rows of logits, V real columns padded to Vp, for the row kernels' tests: row r's column j is
// at(r, j), and pad() sets the padding to 100, larger than every real value, so that a kernel
// that reads a padding column as a real one fails.
struct PaddedRows {
  int N, V, Vp;
  std::vector<float> values = std::vector<float>(size_t(N) * size_t(Vp));
  float& at(int r, int j) { return values[size_t(r) * Vp + j]; }
  void pad() {
    for (int r = 0; r < N; ++r)
      for (int j = V; j < Vp; ++j) at(r, j) = 100.0f;
  }
};

// Rows of V = 37 columns (padded to 40, the padding the largest of all) on the device in X: each
// row's argmax_rows is the host sampler's greedy choice. Row 0 ties at its maximum; row 1 is NaN
// then -inf; row 2 all NaN; row 3 has two +inf and a NaN; row 4 is -inf but one finite value.
// Then the rows as a vocabulary split over two members at column 20 (row 0's tie and row 1's -inf
// across the split): each half's argmax_rows with its values, merged by merge_argmax_rows, makes
// the same choices.
template <typename X>
void check_argmax_rows() {
  constexpr int V = 37, Vp = 40, N = 5;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  PaddedRows rows{N, V, Vp};
  for (float& x : rows.values) x = std::round(u(rng));  // whole numbers: ties, and exact in bf16
  const auto at = [&](int r, int j) -> float& { return rows.at(r, j); };
  at(0, 9) = at(0, 30) = 8.0f;
  for (int j = 0; j < V; ++j) at(1, j) = j == 0 ? NAN : -INFINITY;
  for (int j = 0; j < V; ++j) at(2, j) = NAN;
  at(3, 4) = NAN;
  at(3, 21) = at(3, 33) = INFINITY;
  for (int j = 0; j < V; ++j) at(4, j) = j == 17 ? -3.0f : -INFINITY;
  rows.pad();

  X* logits = upload_as<X>(rows.values);
  int32_t* out = nullptr;
  MEG_CUDA_CHECK(cudaMalloc(&out, N * sizeof(int32_t)));
  cuda::argmax_rows(out, logits, N, V, Vp, nullptr);
  std::vector<int32_t> got(N);
  MEG_CUDA_CHECK(cudaMemcpy(got.data(), out, N * sizeof(int32_t), cudaMemcpyDeviceToHost));

  constexpr int kShard = 20;  // each member's rows [N, kShard], the second's last 3 columns padding
  int32_t* parts = nullptr;   // [2 members][2][N]: columns, then values
  MEG_CUDA_CHECK(cudaMalloc(&parts, 4 * N * sizeof(int32_t)));
  for (int m = 0; m < 2; ++m) {
    std::vector<float> shard(size_t(N) * kShard, 100.0f);
    for (int r = 0; r < N; ++r)
      for (int j = 0; j < kShard && m * kShard + j < V; ++j) shard[size_t(r) * kShard + j] = at(r, m * kShard + j);
    X* shard_logits = upload_as<X>(shard);
    int32_t* part = parts + 2 * m * N;
    cuda::argmax_rows(part, shard_logits, N, std::min(kShard, V - m * kShard), kShard, nullptr,
                      reinterpret_cast<float*>(part + N));
    MEG_CUDA_CHECK(cudaDeviceSynchronize());
    cudaFree(shard_logits);
  }
  int32_t* merged = nullptr;
  MEG_CUDA_CHECK(cudaMalloc(&merged, N * sizeof(int32_t)));
  cuda::merge_argmax_rows(merged, parts, 2, N, kShard, nullptr);
  std::vector<int32_t> got_split(N);
  MEG_CUDA_CHECK(cudaMemcpy(got_split.data(), merged, N * sizeof(int32_t), cudaMemcpyDeviceToHost));
  std::vector<float> member_values(N);
  MEG_CUDA_CHECK(cudaMemcpy(member_values.data(), parts + N, N * sizeof(float), cudaMemcpyDeviceToHost));
  for (void* p : {static_cast<void*>(logits), static_cast<void*>(out), static_cast<void*>(parts),
                  static_cast<void*>(merged)})
    cudaFree(p);

  Sampler greedy(V);
  const int want[N] = {9, 1, 0, 21, 17};
  for (int r = 0; r < N; ++r) {
    INFO("row " << r);
    CHECK(greedy.sample(&at(r, 0), {}, SamplingParams{}, 0) == want[r]);
    CHECK(got[size_t(r)] == want[r]);
    CHECK(got_split[size_t(r)] == want[r]);
  }
  // Member 0's values: row 0's 8, row 1's -inf, row 2's none (NaN), row 4's -3.
  CHECK(member_values[0] == 8.0f);
  CHECK(member_values[1] == -INFINITY);
  CHECK(std::isnan(member_values[2]));
  CHECK(member_values[4] == -3.0f);
}

// top_k_rows over rows of V = 37 (padded to 40, the padding the largest of all): whole numbers in
// [-4, 4] (ties everywhere, the K-th among them), zeros of both signs, NaN, -inf and +inf, a row
// with fewer values that are not NaN than K; K = 1, 5 and 30. Its candidates, put in order, must
// be the row's K largest in order, then -1.
template <typename X>
void check_top_k_rows() {
  constexpr int V = 37, Vp = 40, N = 4;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> u(-4, 4);
  PaddedRows rows{N, V, Vp};
  for (float& x : rows.values) x = float(u(rng));
  const auto at = [&](int r, int j) -> float& { return rows.at(r, j); };
  at(1, 3) = -0.0f, at(1, 8) = 0.0f, at(1, 20) = NAN, at(1, 30) = INFINITY, at(1, 31) = -INFINITY;
  for (int j = 0; j < V; ++j) at(2, j) = j % 4 == 0 ? float(j % 3) : NAN;  // 10 values, 3 distinct
  for (int j = 0; j < V; ++j) at(3, j) = j == 5 ? NAN : -INFINITY;
  rows.pad();
  X* logits = upload_as<X>(rows.values);
  int32_t* columns = nullptr;
  float* values = nullptr;
  constexpr int kMaxK = 30;
  MEG_CUDA_CHECK(cudaMalloc(&columns, N * kMaxK * sizeof(int32_t)));
  MEG_CUDA_CHECK(cudaMalloc(&values, N * kMaxK * sizeof(float)));
  for (const int K : {1, 5, kMaxK}) {
    cuda::top_k_rows(columns, values, logits, N, V, Vp, K, nullptr);
    std::vector<int32_t> got(size_t(N) * K);
    std::vector<float> got_values(size_t(N) * K);
    MEG_CUDA_CHECK(cudaMemcpy(got.data(), columns, got.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
    MEG_CUDA_CHECK(cudaMemcpy(got_values.data(), values, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int r = 0; r < N; ++r) {
      INFO("K " << K << ", row " << r);
      order_top_k(got.data() + size_t(r) * K, got_values.data() + size_t(r) * K, K);
      const std::vector<int32_t> want = largest_first(&at(r, 0), V);
      for (size_t j = 0; j < size_t(K); ++j) {
        CHECK(got[size_t(r) * K + j] == (j < want.size() ? want[j] : -1));
        if (j < want.size()) CHECK(got_values[size_t(r) * K + j] == at(r, want[j]));
      }
    }
  }
  cudaFree(logits);
  cudaFree(columns);
  cudaFree(values);
}

// sample_rows against ExactDraw, on rows in X (the host's copies rounded alike): rows of V = 37
// (padded to 40, the padding the largest of all) of whole numbers in [-4, 4] (ties everywhere,
// the nucleus's last logit among them), zeros of both signs, NaN and -inf, a row of NaN, rows
// whose largest is +inf or -inf; and rows of GPT-2's 50257 columns, normal with spread 2 (in bf16,
// ties again). For each row, temperature (0.5, 1, 2; 0: the argmax) and top-p (1, 0.9, 0.3): u at
// the middle of up to 12 of the nucleus's largest shares must draw that token, and 8 u's at random
// (0 among them) a token of the nucleus whose share holds u, within 1e-6. Cases whose nucleus is
// within 1e-6 of taking one token more or fewer are left out (ExactDraw::margin): the device's
// sums are within about 1e-7 (its exponentials' rounding). The draws run all together (a block a
// row), 20 at a time (clusters of 4 blocks a row on 132 multiprocessors) and one at a time
// (clusters of 16 where the device runs them, else of 8).
template <typename X>
void check_sample_rows() {
  struct Case {
    int row;
    cuda::RowDraw draw;
    int want;  // -1: any token ExactDraw allows
  };
  for (const auto& [V, Vp] : {std::pair{37, 40}, std::pair{50257, 50304}}) {
    INFO("V " << V);
    std::mt19937 rng(static_cast<uint32_t>(V));
    std::vector<float> rows;
    const auto add_row = [&](const std::function<float(int)>& value) {
      for (int j = 0; j < Vp; ++j) rows.push_back(j < V ? float(X(value(j))) : 1e4f);
    };
    std::uniform_int_distribution<int> whole(-4, 4);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    if (V < 100) {
      add_row([&](int) { return float(whole(rng)); });
      add_row([&](int j) { return j == 3 ? -0.0f : j == 8 ? 0.0f : j == 20 ? NAN : j == 31 ? -INFINITY : float(whole(rng)); });
      add_row([&](int j) { return j % 4 == 0 ? float(j % 3) : NAN; });
      add_row([&](int) { return NAN; });
      add_row([&](int j) { return j == 11 || j == 29 ? INFINITY : j == 2 ? NAN : float(whole(rng)); });
      add_row([&](int j) { return j == 5 ? NAN : -INFINITY; });
    } else {
      for (int r = 0; r < 2; ++r) add_row([&](int) { return normal(rng); });
    }
    const int base_rows = int(rows.size()) / Vp;
    std::vector<Case> cases;
    int left_out = 0;
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (int r = 0; r < base_rows; ++r) {
      const float* row = rows.data() + size_t(r) * Vp;
      cases.push_back({r, {0.0, 1.0, 0.5}, Sampler(V).sample(row, {}, SamplingParams{}, 0)});
      for (const double T : {0.5, 1.0, 2.0})
        for (const double top_p : {1.0, 0.9, 0.3}) {
          const ExactDraw exact(row, V, T, top_p);
          if (exact.only < 0 && top_p < 1 && exact.margin < 1e-6) {
            ++left_out;
            continue;
          }
          std::vector<int32_t> kept;
          for (int j = 0; j < V; ++j)
            if (exact.only < 0 && exact.p[size_t(j)] / exact.S > 1e-3) kept.push_back(j);
          std::stable_sort(kept.begin(), kept.end(), [&](int a, int b) { return exact.p[size_t(a)] > exact.p[size_t(b)]; });
          for (size_t k = 0; k < kept.size() && k < 12; ++k) cases.push_back({r, {T, top_p, exact.middle(kept[k])}, kept[k]});
          for (int k = 0; k < 8; ++k) cases.push_back({r, {T, top_p, k == 0 ? 0.0 : uniform(rng)}, -1});
        }
    }
    CHECK(left_out < 4);
    const int N = int(cases.size());
    int sms = 0;
    MEG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    REQUIRE(2 * N > sms);  // a block a row when run together
    std::vector<float> case_rows;
    std::vector<cuda::RowDraw> draws;
    for (const Case& c : cases) {
      case_rows.insert(case_rows.end(), rows.begin() + ptrdiff_t(c.row) * Vp, rows.begin() + ptrdiff_t(c.row + 1) * Vp);
      draws.push_back(c.draw);
    }
    X* logits = upload_as<X>(case_rows);
    cuda::RowDraw* device_draws = nullptr;
    int32_t* out = nullptr;
    MEG_CUDA_CHECK(cudaMalloc(&device_draws, draws.size() * sizeof(cuda::RowDraw)));
    MEG_CUDA_CHECK(cudaMalloc(&out, size_t(N) * sizeof(int32_t)));
    MEG_CUDA_CHECK(cudaMemcpy(device_draws, draws.data(), draws.size() * sizeof(cuda::RowDraw), cudaMemcpyHostToDevice));
    std::vector<int32_t> together(static_cast<size_t>(N)), alone(together), by_20(together);
    const auto draw_in = [&](int rows, std::vector<int32_t>& got) {
      for (int i = 0; i < N; i += rows)
        cuda::sample_rows(out + i, logits + size_t(i) * Vp, device_draws + i, std::min(rows, N - i), V, Vp, nullptr);
      MEG_CUDA_CHECK(cudaMemcpy(got.data(), out, size_t(N) * sizeof(int32_t), cudaMemcpyDeviceToHost));
    };
    draw_in(N, together);
    draw_in(1, alone);
    draw_in(20, by_20);
    cudaFree(logits);
    cudaFree(device_draws);
    cudaFree(out);
    for (int i = 0; i < N; ++i) {
      const Case& c = cases[size_t(i)];
      INFO("case " << i << ": row " << c.row << ", temperature " << c.draw.temperature << ", top-p " << c.draw.top_p
                   << ", u " << c.draw.u);
      const float* row = rows.data() + size_t(c.row) * Vp;
      CHECK(together[size_t(i)] == alone[size_t(i)]);
      CHECK(together[size_t(i)] == by_20[size_t(i)]);
      if (c.want >= 0) {
        CHECK(together[size_t(i)] == c.want);
      } else {
        const ExactDraw exact(row, V, c.draw.temperature, c.draw.top_p);
        CHECK(exact.allows(together[size_t(i)], c.draw.u, 1e-6));
      }
    }
  }
}

TEST_CASE("sample_rows draws from each row's softmax and nucleus", "[gpu][infer]") {
  check_sample_rows<float>();
  check_sample_rows<__nv_bfloat16>();
}

TEST_CASE("top_k_rows gives each row's k largest logits", "[gpu][infer]") {
  check_top_k_rows<float>();
  check_top_k_rows<__nv_bfloat16>();
}

TEST_CASE("argmax_rows makes the host sampler's greedy choice, over whole or split rows", "[gpu][infer]") {
  check_argmax_rows<float>();
  check_argmax_rows<__nv_bfloat16>();
}

TEST_CASE("CUDA inference model in bf16 and fp16 tracks the CPU model", "[gpu][infer]") {
  SECTION("gpt2 bf16, head size 64") {
    check_inference(random_checkpoint(test_config(ModelFamily::gpt2, 128, 2, 2, 256), 7), Precision::bf16, 5e-2);
  }
  SECTION("llama bf16, head size 64") {
    check_inference(random_checkpoint(test_config(ModelFamily::llama, 256, 4, 2, 256), 8), Precision::bf16, 5e-2);
  }
  SECTION("llama fp16, head size 64") {
    check_inference(random_checkpoint(test_config(ModelFamily::llama, 256, 4, 2, 256), 9), Precision::fp16, 2e-2);
  }
}

// On the GPU a request drawn from the softmax of all its logits (sample_rows) is drawn there
// whatever shares its steps: alone, or beside requests whose choices need all the logits (a
// repetition penalty) or their top k, its completion is the same.
TEST_CASE("CUDA generation: a sampled completion does not depend on which requests share its steps", "[gpu][infer]") {
  const auto tok = load_tokenizer(std::string(MEG_TEST_DATA) + "/megatron/fortunes_spm.model");
  CheckpointModel ck;
  ck.config = ModelConfig::preset("tiny-llama");
  ck.config.set_vocab_from_tokenizer(tok->vocab_size());
  ck.config.seq_length = 48;
  ck.config.init_std = 0.2;  // far from uniform
  ck.config.validate();
  ck.params.resize(size_t(ck.config.num_parameters()));
  gpt_init_parameters(ck.config, gpt_parameter_table(ck.config), 5, ck.params.data());
  std::vector<GenerationRequest> reqs;
  for (const char* prompt : {"The cat", "Life is a series", "People who take cat naps"}) {
    GenerationRequest r;
    tok->encode(prompt, r.prompt);
    r.max_tokens = 24;
    r.sampling.seed = 17;
    r.sampling.temperature = 0.9;
    reqs.push_back(std::move(r));
  }
  reqs[0].sampling.top_p = 0.9;  // drawn on the device
  reqs[1].sampling.repetition_penalty = 1.3;
  reqs[2].sampling.top_k = 20;
  auto model = make_cuda_inference_model(ck, Precision::bf16, 3, 0);
  const std::vector<Completion> together = generate(*model, *tok, reqs);
  const std::vector<Completion> alone = generate(*model, *tok, {reqs[0]});
  CHECK(!together[0].ids.empty());
  CHECK(alone[0].ids == together[0].ids);
  reqs.resize(1);
  reqs[0].sampling.seed = 18;
  CHECK(generate(*model, *tok, reqs)[0].ids != together[0].ids);  // the draw does depend on the seed
}

// Queued calls (queue_choices) against a twin making the same calls one at a time: every chained
// call's tokens are the ones the twin is given, the previous call's choices, through greedy and
// drawn steps, with and without a repetition penalty, at 3 rows and at 1, each shape run directly,
// captured and replayed; and the calls the queue refuses, and the reset it takes.
void check_queued(Precision precision) {
  const CheckpointModel ck = random_checkpoint(test_config(ModelFamily::llama, 128, 4, 2, 96), 12);
  const int V = int(ck.config.vocab_size);
  auto queued = make_cuda_inference_model(ck, precision, 3, 0), direct = make_cuda_inference_model(ck, precision, 3, 0);
  REQUIRE(queued->overlaps());
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 3; ++i) prompts.push_back(random_tokens(5 + 7 * i, V, 20 + i));
  const SoftmaxDraw draws[] = {{0.9, 1, 0.25}, {1.1, 0.8, 0.5}, {0.7, 0.95, 0.75}};
  for (const size_t rows : {size_t(3), size_t(1)}) {
    for (int slot = 0; slot < 3; ++slot) {
      queued->reset(slot);
      direct->reset(slot);
    }
    std::vector<AppendRequest> start, chained;
    for (size_t r = 0; r < rows; ++r) {
      const int slot = int(2 - r);  // not in slot order
      start.push_back({slot, prompts[r], r == 1 ? 1.3 : 1.0});
      chained.push_back({slot, {}, start.back().repetition_penalty});
    }
    std::vector<int32_t> want(rows), got(rows);
    direct->append_greedy(start, V, want.data());
    queued->queue_choices(start, V, {}, false);
    for (int step = 0; step < 8; ++step) {
      INFO(rows << " rows, step " << step);
      const bool draw = step / 4 == 1;  // 4 greedy steps, then 4 drawn
      const auto d = draw ? std::span<const SoftmaxDraw>(draws, rows) : std::span<const SoftmaxDraw>();
      queued->queue_choices(chained, V, d, true);
      queued->take_choices(got.data());
      CHECK(got == want);
      std::vector<AppendRequest> next = start;
      for (size_t r = 0; r < rows; ++r) next[r].tokens = {&want[r], 1};
      std::vector<int32_t> chosen(rows);
      if (draw)
        direct->append_sample(next, V, d, chosen.data(), nullptr);
      else
        direct->append_greedy(next, V, chosen.data());
      want = chosen;
      for (const AppendRequest& a : start) CHECK(queued->length(a.slot) == direct->length(a.slot));
    }
    queued->take_choices(got.data());
    CHECK(got == want);
  }
  int32_t token[3];
  const std::vector<int32_t> one = {7};
  const AppendRequest fresh{0, one}, follow{0, {}};
  queued->queue_choices({&fresh, 1}, V, {}, false);
  CHECK_THROWS_AS(queued->append_greedy({&fresh, 1}, V, token), std::logic_error);  // one queued
  queued->take_choices(token);
  CHECK_THROWS_AS(queued->take_choices(token), std::logic_error);
  queued->append_greedy({&fresh, 1}, V, token);
  CHECK_THROWS_AS(queued->queue_choices({&follow, 1}, V, {}, true), std::logic_error);  // not after a queued call
  const AppendRequest other{1, {}};
  queued->queue_choices({&fresh, 1}, V, {}, false);
  CHECK_THROWS_AS(queued->queue_choices({&other, 1}, V, {}, true), std::invalid_argument);  // another slot
  queued->take_choices(token);
  queued->queue_choices({&fresh, 1}, V, {}, false);
  queued->reset(1);  // a sequence that ended while its step was queued
  CHECK_THROWS_AS(queued->queue_choices({&follow, 1}, V, {}, true), std::logic_error);  // not after a reset
  queued->take_choices(token);
}

TEST_CASE("CUDA inference model: queued calls choose as calls made one at a time", "[gpu][infer]") {
  SECTION("fp32") { check_queued(Precision::fp32); }
  SECTION("bf16") { check_queued(Precision::bf16); }
}

TEST_CASE("CUDA inference model refuses bad sizes and calls before any work", "[gpu][infer]") {
  const CheckpointModel ck = random_checkpoint(test_config(ModelFamily::gpt2, 64, 4, 4, 16), 1);
  CHECK(input_error_of([&] { make_cuda_inference_model(ck, Precision::bf16, 1, 17); }) ==
        "--max-length 17: this GPT-2 model has only 16 learned positions");
  CHECK(input_error_of([&] { make_cuda_inference_model(ck, Precision::bf16, 0, 0); }) ==
        "--batch 0: must be at least 1");
  auto model = make_cuda_inference_model(ck, Precision::fp32, 2, 8);
  std::vector<float> logits(2 * size_t(ck.config.vocab_size));
  const std::vector<int32_t> five = {1, 2, 3, 4, 5}, bad = {1, 300};
  const AppendRequest a{0, five}, c{2, five}, d{1, bad};
  const AppendRequest twice[] = {a, a};
  CHECK(input_error_of([&] { model->append(twice, logits.data()); }) ==
        "inference model: slot 0 appears twice in one append");
  CHECK(input_error_of([&] { model->append({&c, 1}, logits.data()); }) == "inference model: slot 2 outside [0, 2)");
  CHECK(input_error_of([&] { model->append({&d, 1}, logits.data()); }) ==
        "inference model: token 300 outside the vocabulary [0, 300)");
  model->append({&a, 1}, logits.data());
  const AppendRequest both[] = {AppendRequest{1, five}, a};
  CHECK(input_error_of([&] { model->append(both, logits.data()); }) ==
        "inference model: slot 0 would hold 10 tokens, more than its 8");
  CHECK(model->length(0) == 5);
  CHECK(model->length(1) == 0);
}

TEST_CASE("CUDA scorer equals the CPU model's log-softmax", "[gpu][infer]") {
  SECTION("gpt2 fp32, head size 16") {
    check_scorer(random_checkpoint(test_config(ModelFamily::gpt2, 64, 4, 4, 64), 11), Precision::fp32, 1e-4, 64);
  }
  SECTION("llama fp32, grouped-query, head size 16") {
    check_scorer(random_checkpoint(test_config(ModelFamily::llama, 64, 4, 2, 64), 12), Precision::fp32, 1e-4, 64);
  }
  SECTION("gpt2 bf16, head size 64") {
    check_scorer(random_checkpoint(test_config(ModelFamily::gpt2, 128, 2, 2, 128), 13), Precision::bf16, 5e-2, 128);
  }
  SECTION("llama bf16, head size 64") {
    check_scorer(random_checkpoint(test_config(ModelFamily::llama, 256, 4, 2, 128), 14), Precision::bf16, 5e-2, 128);
  }
}
