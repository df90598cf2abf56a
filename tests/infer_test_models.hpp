// Small models for the inference tests (tests/unit/test_infer_model.cpp, the tensor-parallel
// ones in tests/mpi/test_infer_tp*.cpp), a schedule of calls that mixes prompts and decode steps,
// and how the logits are compared.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "catch.hpp"
#include "infer/inference_model.hpp"
#include "infer/sampler.hpp"
#include "model/config.hpp"
#include "model/gpt.hpp"
#include "parallel/comm.hpp"
#include "test_util.hpp"

namespace meg {

// 2 layers, C 32, HEADS heads (Llama: KV_HEADS key/value heads; GPT-2: as many as heads), VOCAB
// tokens padded to a multiple of 16, 16 positions; a larger init than Megatron's so that the
// logits are far from uniform.
inline ModelConfig small_inference_config(ModelFamily family, int heads, int kv_heads, int vocab) {
  ModelConfig c = ModelConfig::defaults(family);
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_heads = heads;
  c.num_kv_heads = family == ModelFamily::llama ? kv_heads : heads;
  c.ffn_hidden_size = family == ModelFamily::llama ? 48 : 128;
  c.seq_length = 16;
  c.vocab_size = vocab;
  c.make_vocab_size_divisible_by = 16;
  c.pad_vocab();
  c.init_std = 0.2;
  if (family == ModelFamily::llama) c.rope_theta = 10000;
  c.validate();
  return c;
}

// Megatron's initialisation from SEED, with random biases (it starts them at zero), so that a
// bias added twice or not at all shows.
inline std::vector<float> init_params(const ModelConfig& c, uint64_t seed) {
  std::vector<float> p(size_t(c.num_parameters()));
  const std::vector<ParamTensor> table = gpt_parameter_table(c);
  gpt_init_parameters(c, table, seed, p.data());
  std::mt19937 rng{uint32_t(seed)};
  std::normal_distribution<float> normal(0.0f, 0.2f);
  for (const ParamTensor& t : table)
    if (t.name.ends_with(".bias"))
      for (size_t i = 0; i < t.numel; ++i) p[t.offset + i] = normal(rng);
  return p;
}

// Row ROW [V] under the host sampler's repetition penalty: each distinct token of HISTORY's logit
// penalised (infer/sampler.hpp's penalised_logit).
inline std::vector<float> penalised_row(const float* row, int V, const std::vector<int32_t>& history, double penalty) {
  std::vector<float> out(row, row + V);
  for (const int32_t t : std::set<int32_t>(history.begin(), history.end()))
    out[size_t(t)] = penalised_logit(row[t], float(penalty));
  return out;
}

// max |a - b| over the row, relative to the row's largest |b|.
inline double row_error(const float* a, const float* b, int V) {
  double diff = 0, scale = 0;
  for (int i = 0; i < V; ++i) {
    diff = std::max(diff, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return diff / scale;
}

// A fixed schedule of calls over MODEL: three sequences of 16 tokens, each fed in chunks of its own
// sizes, so that one call mixes prompts and decode steps of different slots at different
// positions; then slot 1 reset and given a new prompt. CALL(requests) makes each call (an append
// of some kind); the slots are 0, 1 and 2.
template <typename Call>
void drive_schedule(InferenceModel& model, Call call) {
  const int V = int(model.config().vocab_size);
  const std::vector<std::vector<int32_t>> seqs = {random_tokens(16, V, 1), random_tokens(16, V, 2),
                                                  random_tokens(16, V, 3)};
  const std::vector<std::vector<int>> chunks = {{5, 1, 1, 3, 1, 1, 1, 1, 1, 1}, {1, 1, 7, 1, 1, 1, 1, 1, 1, 1}, {16}};
  std::vector<size_t> done(3, 0), step(3, 0);
  for (;;) {
    std::vector<AppendRequest> reqs;
    for (int s = 0; s < 3; ++s) {
      if (step[s] == chunks[s].size()) continue;
      const size_t n = size_t(chunks[s][step[s]++]);
      reqs.push_back({s, std::span<const int32_t>(seqs[s]).subspan(done[s], n)});
      done[s] += n;
    }
    if (reqs.empty()) break;
    call(std::span<AppendRequest>(reqs));
    for (int s = 0; s < 3; ++s) CHECK(model.length(s) == int(done[s]));
  }
  model.reset(1);
  AppendRequest again{1, std::span<const int32_t>(seqs[2]).first(9)};
  call(std::span<AppendRequest>(&again, 1));
}

// The logits of every call of drive_schedule's schedule.
inline std::vector<std::vector<float>> run_schedule(InferenceModel& model) {
  const size_t V = size_t(model.config().vocab_size);
  std::vector<std::vector<float>> calls;
  drive_schedule(model, [&](std::span<AppendRequest> reqs) {
    calls.emplace_back(reqs.size() * V);
    model.append(reqs, calls.back().data());
  });
  return calls;
}

// Every row of every call of GOT within TOLERANCE (row_error) of EXPECTED's.
inline void check_logits_close(const std::vector<std::vector<float>>& got,
                               const std::vector<std::vector<float>>& expected, int V, double tolerance) {
  REQUIRE(got.size() == expected.size());
  for (size_t k = 0; k < got.size(); ++k) {
    INFO("call " << k);
    REQUIRE(got[k].size() == expected[k].size());
    for (size_t i = 0; i < got[k].size() / size_t(V); ++i)
      CHECK(row_error(got[k].data() + i * V, expected[k].data() + i * V, V) < tolerance);
  }
}

// Every call's logits the same bits on every member of GROUP as on member 0.
inline void check_same_on_every_member(const std::vector<std::vector<float>>& calls, Comm& group) {
  for (size_t k = 0; k < calls.size(); ++k) {
    std::vector<float> root = calls[k];
    group.broadcast(root.data(), root.size() * sizeof(float), 0);
    INFO("call " << k);
    CHECK(std::memcmp(root.data(), calls[k].data(), root.size() * sizeof(float)) == 0);
  }
}

inline const char* family_name(ModelFamily f) { return f == ModelFamily::gpt2 ? "gpt2" : "llama"; }

}  // namespace meg
