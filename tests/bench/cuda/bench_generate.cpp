// Generation throughput of the CUDA inference model (meg-generate's path) on one GPU, random
// weights, bf16 by default: GPT-2 124M, GPT-2 1.56B and Llama 1B (presets of model/config.hpp).
//   prefill: prompts of --prompt tokens appended to empty slots, one prompt (batch 1) or 32 in one
//            call (batch 32); tokens/s = prompt tokens per second;
//   decode:  steps of one new token for each of 1 or 32 slots holding about --prompt tokens;
//            tokens/s = new tokens per second.
// The limits: a decode step must read every weight once and each slot's cached keys and values
// once, so (weight bytes + KV bytes) / the card's peak memory bandwidth (peak_bandwidth.hpp) bounds
// its time; weight bytes leave out the embedding tables the step only looks rows up in (the
// position table, and the token table when the output layer is untied). Prefill is bounded by its
// FLOPs, the forward's third of the repository's 6 N + 12 L d T per token, at 800 TFLOP/s (the bf16
// rate an 8192^3 cuBLAS product reaches on these cards). Ratio = measured / limit; the bar for
// batch-1 decode is 0.6.
//
// Each figure is the median of the timed calls after untimed warm-up calls, timed with CUDA events
// on the model's stream around append(). append() returns once the logits are on the host, so the
// time is the caller's: the device's work, the host's between launches (little, with the decode
// step replayed from a CUDA graph) and the copy of the fp32 logits out.
//
// With --sampling, each decode step also chooses the rows' next tokens as meg-generate does after
// every step: greedy from the device's argmax (InferenceModel::append_greedy: a token a row copied
// back rather than the logits); top-k 50 from the device's 50 largest logits a row (append_top_k,
// the draws on the host, infer/sampler.hpp, the rows in parallel); top-p 0.9, and temperature
// alone, drawn on the device (append_sample: a token a row); all three at temperature 1; and with
// "-penalty" (greedy too) a repetition penalty of 1.2 over the slot's tokens, applied on the
// device before the same choices (penalise_rows, over fp32 copies of the rows), or with
// --host-penalty on the host from all the logits. The random weights' logits are flatter than a
// trained model's, so top-p's nucleus is large: that case's worst.
//
// Usage: bench_generate [--precision bf16|fp16|fp32] [--prompt N] [--steps N] [--warmup N]
//                       [--no-graphs] [--no-small-linear] [--phase prefill|decode] [--batch B] [--layers L]
//                       [--sampling greedy|top-k|top-p|temperature[-penalty]] [--host-penalty] [--chained]
//                       [--profile] [--timeline] [MODEL ...]
// --phase and --batch keep to one phase and one batch size; --layers gives the models L layers
// (timing two depths splits a step into its per-layer time and the rest: embedding, output layer,
// logits copy); --chained queues each decode step behind the last (InferenceModel::queue_choices,
// as meg-generate runs steps whose tokens the model chooses: greedy, top-p or temperature) and
// times runs of --steps steps from the device's end of the step before to its end of the last, so
// that the host's turn between steps is hidden, as there; --profile brackets the last decode step
// of each batch size with cudaProfilerStart/Stop, for a profiler started with profiling off (ncu
// --profile-from-start off) to see one step; --timeline prints, for that step, when each launch's
// blocks started, waited and ended (a build with the CMake option MEG_KERNEL_TIMELINE, whose
// stamps make every step slower: kernels/kernel_timeline.cuh says what they are).
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/parallel.hpp"
#include "core/precision.hpp"
#include "infer/cuda_inference_model.hpp"
#include "infer/sampler.hpp"
#include "model/gpt.hpp"
#include "ops/cuda/check.hpp"
#include "ops/cuda/kernel_timeline.hpp"
#include "event_timer.hpp"
#include "peak_bandwidth.hpp"
#include "timeline_report.hpp"

namespace {

using meg::AppendRequest;

constexpr double kMatmulRate = 800e12;  // FLOP/s
constexpr int kBatches[] = {1, 32};
constexpr int kSlots = 32;  // the largest batch
constexpr int kPrefillRuns = 10, kPrefillWarmup = 2;

struct Options {
  double bandwidth = 0;  // B/s: peak_bandwidth()'s
  meg::Precision precision = meg::Precision::bf16;
  int prompt = 512, steps = 64, warmup = 8;
  int layers = 0;  // the preset's when 0
  meg::CudaInferenceOptions model;
  bool prefill = true, decode = true;
  bool profile = false;
  bool timeline = false;  // the last decode step's kernel timeline (a MEG_KERNEL_TIMELINE build)
  bool host_penalty = false;  // a penalty's choices from all the logits on the host, as before penalise_rows
  bool chained = false;       // decode steps queued one behind the other (queue_choices)
  std::vector<int> batches{std::begin(kBatches), std::end(kBatches)};
  std::string sampling;  // empty: the logits only
  meg::SamplingParams params;
};

// SAMPLING's parameters (--sampling); false for an unknown name.
bool parse_sampling(const std::string& sampling, meg::SamplingParams& p) {
  const std::string penalty = "-penalty";
  std::string kind = sampling;
  if (kind.size() > penalty.size() && kind.ends_with(penalty)) {
    kind.resize(kind.size() - penalty.size());
    p.repetition_penalty = 1.2;
  }
  if (kind == "greedy") return true;
  p.temperature = 1;
  if (kind == "top-k") p.top_k = 50;
  else if (kind == "top-p") p.top_p = 0.9;
  else if (kind != "temperature") return false;
  return true;
}

void print_row(const std::string& model, const char* phase, int batch, int context, double ms, double tokens,
               double limit_tokens_per_s, const char* limit) {
  const double tokens_per_s = tokens / (ms * 1e-3);
  std::printf("| %s | %s | %d | %d | %.3f | %.0f | %.0f | %s | %.2f |\n", model.c_str(), phase, batch, context, ms,
              tokens_per_s, limit_tokens_per_s, limit, tokens_per_s / limit_tokens_per_s);
  std::fflush(stdout);
}

void bench(const std::string& name, const Options& o) {
  meg::CheckpointModel ck;
  ck.config = meg::ModelConfig::preset(name);
  if (o.layers > 0) ck.config.num_layers = o.layers;
  std::string label = o.layers > 0 ? name + ", " + std::to_string(o.layers) + " layers" : name;
  if (!o.sampling.empty()) label += ", " + o.sampling + (o.host_penalty ? " (host)" : "");
  const meg::ModelConfig& c = ck.config;
  ck.params.resize(size_t(c.num_parameters()));
  meg::gpt_init_parameters(c, meg::gpt_parameter_table(c), 1, ck.params.data());
  // --chained times 6 calls of --steps steps (one untimed) after the first step.
  const int max_length = o.prompt + (o.chained ? 6 * o.steps + 1 : o.warmup + o.steps);
  auto model = meg::make_cuda_inference_model(ck, o.precision, kSlots, max_length, o.model);
  const cudaStream_t stream = model->stream();
  std::vector<float>().swap(ck.params);  // the model has its own copy: the host's 4 bytes a weight go

  const int V = int(c.vocab_size);
  const size_t x_bytes = o.precision == meg::Precision::fp32 ? 4 : 2;
  const double C = double(c.hidden_size);
  const double lookup_only = (c.learned_positions() ? double(c.seq_length) * C : 0) +
                             (c.tie_embeddings ? 0 : double(c.padded_vocab_size) * C);
  const double weight_bytes = (double(c.num_parameters()) - lookup_only) * double(x_bytes);
  const double kv_bytes_per_token =
      2.0 * double(c.num_layers) * double(c.num_kv_heads) * double(c.head_size()) * double(x_bytes);

  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(0, V - 1);
  std::vector<std::vector<int32_t>> prompts(size_t(kSlots), std::vector<int32_t>(size_t(o.prompt)));
  for (auto& p : prompts)
    for (auto& t : p) t = tok(rng);
  const std::span<float> logits = model->logits_buffer();  // page-locked, as meg-generate's

  // Empties the first B slots and appends their prompts in one call.
  const auto prefill = [&](int B) {
    std::vector<AppendRequest> reqs;
    for (int s = 0; s < B; ++s) {
      model->reset(s);
      reqs.push_back({s, prompts[size_t(s)]});
    }
    model->append(reqs, logits.data());
  };

  const double prefill_flops_per_token = double(c.flops_per_token(o.prompt)) / 3;
  for (const int B : o.prefill ? o.batches : std::vector<int>{}) {
    const double ms =
        meg::bench::median(meg::bench::time_calls(stream, kPrefillWarmup, kPrefillRuns, [&] { prefill(B); }));
    print_row(label, "prefill", B, o.prompt, ms, double(B) * o.prompt,
              kMatmulRate / prefill_flops_per_token, "compute");
  }
  for (const int B : o.decode ? o.batches : std::vector<int>{}) {
    prefill(B);
    std::vector<int32_t> next(static_cast<size_t>(B));
    std::vector<AppendRequest> reqs;
    for (int s = 0; s < B; ++s) reqs.push_back({s, std::span<const int32_t>(&next[size_t(s)], 1)});
    std::vector<meg::Sampler> samplers(static_cast<size_t>(B), meg::Sampler(V));
    std::vector<int32_t> top_tokens(size_t(B) * std::max(o.params.top_k, 1));
    std::vector<float> top_logits(top_tokens.size());
    // append_sample's draws: a fixed u a row (the draw's cost does not depend on it).
    std::vector<meg::SoftmaxDraw> draws;
    for (int s = 0; s < B; ++s) draws.push_back({o.params.temperature, o.params.top_p, (s + 0.5) / B});
    // The median step's context.
    const int context = o.prompt + (o.chained ? 1 + 3 * o.steps + o.steps / 2 : o.warmup + o.steps / 2);
    const double step_bytes = weight_bytes + double(B) * context * kv_bytes_per_token;
    if (o.chained) {
      // As the generator runs steps whose tokens the model chooses: each queued behind the last,
      // running its choices, and taken while the next runs. A timed call is --steps such steps,
      // the device's time from the end of the step queued before it to the end of its last.
      const bool argmax = o.params.argmax_of_logits(model->penalises());
      if (!argmax && !o.params.softmax_of_logits(V, model->penalises()))
        throw std::runtime_error("--chained: the model must choose the tokens (--sampling greedy, top-p or temperature)");
      std::vector<AppendRequest> chained;
      for (AppendRequest& r : reqs) {
        r.repetition_penalty = o.params.repetition_penalty;
        chained.push_back({r.slot, {}, r.repetition_penalty});
      }
      const auto d = argmax ? std::span<const meg::SoftmaxDraw>() : std::span<const meg::SoftmaxDraw>(draws);
      model->queue_choices(reqs, V, d, false);
      const double ms = meg::bench::median(meg::bench::time_calls(stream, 1, 5, [&] {
        for (int k = 0; k < o.steps; ++k) {
          model->queue_choices(chained, V, d, true);
          model->take_choices(next.data());
        }
      }));
      model->take_choices(next.data());
      print_row(label + ", chained", "decode", B, context, ms / o.steps, B, B / (step_bytes / o.bandwidth),
                "bandwidth");
      continue;
    }
    int call = 0;
    const double ms = meg::bench::median(meg::bench::time_calls(stream, o.warmup, o.steps, [&] {
      if (o.sampling.empty())
        for (auto& t : next) t = tok(rng);
      const bool last = ++call == o.warmup + o.steps, profiled = o.profile && last;
      // What the model hands over, as the generator asks for it: the argmax for greedy choices,
      // the top_k largest logits for top-k draws, else all the logits.
      const bool penalised = model->penalises() && !o.host_penalty;
      const bool sampled = !o.sampling.empty(), argmax = sampled && o.params.argmax_of_logits(penalised);
      const bool few = sampled && o.params.top_k_of_logits(V, penalised) && o.params.top_k <= meg::kMaxAppendTopK;
      const bool drawn = sampled && o.params.softmax_of_logits(V, penalised);
      for (auto& r : reqs) r.repetition_penalty = argmax || few || drawn ? o.params.repetition_penalty : 1;
      const size_t K = size_t(o.params.top_k);
      if (profiled) cudaProfilerStart();
      if (o.timeline && last) meg::cuda::reset_kernel_timeline();
      if (argmax)
        model->append_greedy(reqs, V, next.data());
      else if (drawn)
        model->append_sample(reqs, V, draws, next.data(), nullptr);
      else if (few)
        model->append_top_k(reqs, V, int(K), top_tokens.data(), top_logits.data());
      else
        model->append(reqs, logits.data());
      if (profiled) cudaProfilerStop();
      if (o.timeline && last)
        meg::bench::print_timeline(label + ", batch " + std::to_string(B), meg::cuda::read_kernel_timeline());
      if (!sampled || argmax || drawn) return;
      // The next tokens, the prompt as each row's history: top-k's on this thread, draws from all
      // the logits in parallel (as the generator's).
      meg::parallel_for(size_t(B), few ? size_t(B) : 1, [&](size_t begin, size_t end) {
        for (size_t r = begin; r < end; ++r)
          next[r] = few ? samplers[r].sample_top_k({top_tokens.data() + r * K, K}, {top_logits.data() + r * K, K},
                                                   o.params, 0.5)
                        : samplers[r].sample(logits.data() + r * size_t(V), prompts[r], o.params, 0.5);
      });
    }));
    print_row(label, "decode", B, context, ms, B, B / (step_bytes / o.bandwidth), "bandwidth");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--precision" && i + 1 < argc) o.precision = meg::parse_precision(argv[++i]);
    else if (a == "--prompt" && i + 1 < argc) o.prompt = std::atoi(argv[++i]);
    else if (a == "--steps" && i + 1 < argc) o.steps = std::atoi(argv[++i]);
    else if (a == "--warmup" && i + 1 < argc) o.warmup = std::atoi(argv[++i]);
    else if (a == "--no-graphs") o.model.cuda_graphs = false;
    else if (a == "--no-small-linear") o.model.small_linear = false;
    else if (a == "--phase" && i + 1 < argc) {
      const std::string phase = argv[++i];
      o.prefill = phase == "prefill";
      o.decode = phase == "decode";
    } else if (a == "--batch" && i + 1 < argc) o.batches = {std::atoi(argv[++i])};
    else if (a == "--layers" && i + 1 < argc) o.layers = std::atoi(argv[++i]);
    else if (a == "--sampling" && i + 1 < argc) {
      o.sampling = argv[++i];
      if (!parse_sampling(o.sampling, o.params)) {
        std::fprintf(stderr, "bench_generate: --sampling %s: not greedy, top-k, top-p or temperature (with -penalty)\n",
                     argv[i]);
        return 2;
      }
    } else if (a == "--profile") o.profile = true;
    else if (a == "--timeline") o.timeline = true;
    else if (a == "--host-penalty") o.host_penalty = true;
    else if (a == "--chained") o.chained = true;
    else if (a.rfind("--", 0) != 0) models.push_back(a);
    else {
      std::fprintf(stderr, "usage: bench_generate [--precision P] [--prompt N] [--steps N] [--warmup N] [--no-graphs] "
                           "[--no-small-linear] [--phase prefill|decode] [--batch B] [--layers L] [--sampling S] "
                           "[--host-penalty] [--chained] [--profile] [--timeline] [MODEL ...]\n");
      return 2;
    }
  }
  const bool batch_ok = o.batches.size() > 1 || (o.batches[0] >= 1 && o.batches[0] <= kSlots);
  if (o.prompt < 1 || o.steps < 1 || o.warmup < 0 || o.layers < 0 || !batch_ok || !(o.prefill || o.decode)) {
    std::fprintf(stderr, "bench_generate: --prompt, --steps and --layers must be positive, --batch in [1, %d], "
                         "--phase prefill or decode\n", kSlots);
    return 2;
  }
  if (o.timeline && (!meg::cuda::kernel_timeline_built() || o.chained)) {
    std::fprintf(stderr,
                 "bench_generate: --timeline needs a build with MEG_KERNEL_TIMELINE=ON and steps not --chained\n");
    return 2;
  }
  if (models.empty()) models = {"gpt2-124m", "gpt2-1.5b", "llama-1b"};

  cudaDeviceProp prop;
  MEG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const auto on = [](bool b) { return b ? "on" : "off"; };
  o.bandwidth = meg::bench::peak_bandwidth(0);
  std::printf("%s (%.2f TB/s), %s, CUDA graphs %s, small_linear %s; median of %d prefill calls and %d decode steps\n\n",
              prop.name, o.bandwidth * 1e-12, meg::precision_name(o.precision), on(o.model.cuda_graphs),
              on(o.model.small_linear), kPrefillRuns, o.steps);
  std::printf("| model | phase | batch | context | ms/call | tokens/s | limit tokens/s | limit | ratio |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& m : models) {
    try {
      bench(m, o);
    } catch (const std::exception& e) {
      std::printf("| %s | failed: %s |\n", m.c_str(), e.what());
    }
  }
  return 0;
}
