// Generation throughput of the CPU inference model (meg-generate --device cpu, infer/
// cpu_inference_model.hpp) with random weights in fp32: GPT-2 124M by default (presets of
// model/config.hpp).
//   prefill: one prompt of --prompt tokens appended to an empty slot; tokens/s = prompt tokens per
//            second;
//   decode:  steps of one new token for each of B slots (--batch, default 1, 8 and 32) holding about
//            --prompt tokens; tokens/s = new tokens per second.
// The limit of a decode step: it reads every weight once (4 bytes each; the position table, which
// it only looks rows up in, left out) and each slot's cached keys and values once, so those bytes
// over this machine's memory bandwidth bound its time. The bandwidth is measured here, as the best
// of 5 reads of a 1 GiB array spread over the threads the model uses (parallel_for's pool, sized by
// MEG_NUM_THREADS or the cores), each thread summing its part. Ratio = measured / limit: a little
// above 1 where the processor's last-level cache keeps some weights from one step to the next.
// Each figure is the median of the timed calls after untimed warm-up calls (std::chrono around
// append(), which returns with the logits written).
//
// Usage: bench_generate_cpu [--prompt N] [--steps N] [--batch B] [MODEL ...]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/parallel.hpp"
#include "infer/inference_model.hpp"
#include "model/gpt.hpp"

namespace {

constexpr int kWarmup = 2, kPrefillRuns = 5;
constexpr size_t kBandwidthBytes = size_t(1) << 30;

struct Options {
  int prompt = 128, steps = 16;
  std::vector<int> batches = {1, 8, 32};
  std::vector<std::string> models;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Bytes per second of reading a 1 GiB array over parallel_for's threads, the best of 5. Each
// thread sums its chunk as 64-bit integers, which the compiler vectorises; the sums go to a
// volatile, so that the reads cannot be left out.
double read_bandwidth() {
  std::vector<uint64_t> data(kBandwidthBytes / sizeof(uint64_t));
  for (size_t i = 0; i < data.size(); ++i) data[i] = i * 0x9e3779b97f4a7c15ull;  // touched: no zero pages
  const size_t threads = meg::num_threads(), grain = (data.size() + threads - 1) / threads;
  std::vector<uint64_t> sums(threads);
  double best = 0;
  for (int run = 0; run < 5; ++run) {
    const auto start = std::chrono::steady_clock::now();
    meg::parallel_for(data.size(), grain, [&](size_t begin, size_t end) {
      uint64_t s = 0;
      for (size_t i = begin; i < end; ++i) s += data[i];
      sums[begin / grain] = s;
    });
    best = std::max(best, double(kBandwidthBytes) / seconds_since(start));
  }
  static volatile uint64_t sink;
  for (const uint64_t s : sums) sink = sink + s;
  return best;
}

void print_row(const std::string& model, const char* phase, int batch, int context, double ms, double tokens,
               double limit, const char* bound) {
  const double rate = tokens / (ms * 1e-3);
  if (limit > 0)
    std::printf("| %s | %s | %d | %d | %.2f | %.1f | %.1f | %s | %.2f |\n", model.c_str(), phase, batch, context, ms,
                rate, limit, bound, rate / limit);
  else
    std::printf("| %s | %s | %d | %d | %.2f | %.1f | - | - | - |\n", model.c_str(), phase, batch, context, ms, rate);
  std::fflush(stdout);
}

void bench(const std::string& name, const Options& o, double bandwidth) {
  meg::CheckpointModel ck;
  ck.config = meg::ModelConfig::preset(name);
  const meg::ModelConfig& c = ck.config;
  ck.params.resize(size_t(c.num_parameters()));
  meg::gpt_init_parameters(c, meg::gpt_parameter_table(c), 1, ck.params.data());
  const int slots = *std::max_element(o.batches.begin(), o.batches.end());
  const int max_length = o.prompt + kWarmup + o.steps + 1;
  auto model = meg::make_inference_model(ck, "cpu", meg::Precision::fp32, slots, max_length);
  std::vector<float>().swap(ck.params);

  const double C = double(c.hidden_size);
  const double weight_bytes = (double(c.num_parameters()) - (c.learned_positions() ? double(c.seq_length) * C : 0)) * 4;
  const double kv_bytes_per_token = 2.0 * double(c.num_layers) * double(c.num_kv_heads) * double(c.head_size()) * 4;

  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(0, int(c.vocab_size) - 1);
  std::vector<std::vector<int32_t>> prompts(size_t(slots), std::vector<int32_t>(size_t(o.prompt)));
  for (auto& p : prompts)
    for (auto& t : p) t = tok(rng);
  std::vector<float> logits(size_t(slots) * size_t(c.vocab_size));
  const auto prefill = [&](int B) {
    std::vector<meg::AppendRequest> reqs;
    for (int s = 0; s < B; ++s) {
      model->reset(s);
      reqs.push_back({s, prompts[size_t(s)]});
    }
    model->append(reqs, logits.data());
  };

  std::vector<double> ms;
  for (int run = 0; run < kWarmup + kPrefillRuns; ++run) {
    const auto start = std::chrono::steady_clock::now();
    prefill(1);
    if (run >= kWarmup) ms.push_back(seconds_since(start) * 1e3);
  }
  print_row(name, "prefill", 1, o.prompt, median(ms), o.prompt, 0, "");

  for (const int B : o.batches) {
    prefill(B);
    std::vector<int32_t> next(static_cast<size_t>(B));
    std::vector<meg::AppendRequest> reqs;
    for (int s = 0; s < B; ++s) reqs.push_back({s, std::span<const int32_t>(&next[size_t(s)], 1)});
    ms.clear();
    for (int step = 0; step < kWarmup + o.steps; ++step) {
      for (int s = 0; s < B; ++s) next[size_t(s)] = tok(rng);
      const auto start = std::chrono::steady_clock::now();
      model->append(reqs, logits.data());
      if (step >= kWarmup) ms.push_back(seconds_since(start) * 1e3);
    }
    const int context = o.prompt + kWarmup + o.steps / 2;
    const double step_bytes = weight_bytes + double(B) * context * kv_bytes_per_token;
    print_row(name, "decode", B, context, median(ms), B, B / (step_bytes / bandwidth), "bandwidth");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool batches_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> int {
      const int v = i + 1 < argc ? std::atoi(argv[++i]) : 0;
      if (v < 1) {
        std::fprintf(stderr, "bench_generate_cpu: %s needs a positive number\n", a.c_str());
        std::exit(1);
      }
      return v;
    };
    if (a == "--prompt") o.prompt = value();
    else if (a == "--steps") o.steps = value();
    else if (a == "--batch") {
      if (!batches_given) o.batches.clear();
      batches_given = true;
      o.batches.push_back(value());
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "usage: bench_generate_cpu [--prompt N] [--steps N] [--batch B ...] [MODEL ...]\n");
      return 1;
    } else {
      o.models.push_back(a);
    }
  }
  if (o.models.empty()) o.models = {"gpt2-124m"};
  const double bandwidth = read_bandwidth();
  std::printf("CPU, %u threads, %.1f GB/s read (best of 5 reads of 1 GiB); fp32; median of %d decode steps\n\n",
              meg::num_threads(), bandwidth / 1e9, o.steps);
  std::printf("| model | phase | batch | context | ms/call | tokens/s | limit tokens/s | limit | ratio |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& m : o.models) {
    try {
      bench(m, o, bandwidth);
    } catch (const std::exception& e) {
      std::printf("| %s | failed: %s |\n", m.c_str(), e.what());
    }
  }
  return 0;
}
