// Training throughput of meg-pretrain's CUDA path on one GPU: full optimizer steps (forward,
// fused loss, backward, global norm, fused AdamW) of GPT-2 124M, 355M and 1.56B and Llama 1B on
// random tokens at sequence length 1024, against the PyTorch figures measured on an H100
// (torch.compile + SDPA + fused AdamW, bf16).
//
// Each step waits for the device at its end (the loss is read back), so wall-clock time per step is
// the device's time plus whatever the host adds; the median of the timed steps is reported after
// warm-up steps. "host ms" is the time the host takes to queue the step's forward and backward:
// when it nears ms/step, launching, not the GPU, sets the pace. Model FLOPs per token are 6 N + 12 L d T; MFU is against 800 TFLOP/s, the bf16
// dense product rate an 8192^3 cuBLAS GEMM reaches on these cards.
//
// Usage: bench_train [--precision bf16|fp16|fp32] [--recompute none|selective|full] [--steps N]
//                    [--warmup N] [--profile] [MODEL:MICRO_BATCH ...]
// --profile brackets the last step with cudaProfilerStart/Stop, for a profiler started with
// profiling off (ncu --profile-from-start off) to see exactly one step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <cuda_profiler_api.h>
#include <fmt/format.h>

#include "model/config.hpp"
#include "train/backend.hpp"

namespace {

struct Case {
  std::string model;
  int micro_batch;
  double pytorch_tokens_per_s;  // 0: no reference
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string precision = "bf16", recompute = "none";
  int steps = 10, warmup = 3;
  bool profile = false;
  std::vector<Case> cases;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--precision" && i + 1 < argc) precision = argv[++i];
    else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--warmup" && i + 1 < argc) warmup = std::atoi(argv[++i]);
    else if (a == "--profile") profile = true;
    else if (a == "--recompute" && i + 1 < argc) recompute = argv[++i];
    else if (auto colon = a.find(':'); colon != std::string::npos)
      cases.push_back({a.substr(0, colon), std::atoi(a.c_str() + colon + 1), 0});
    else {
      std::fprintf(stderr, "usage: bench_train [--precision P] [--recompute R] [--steps N] [--warmup N] [--profile] "
                           "[MODEL:MICRO_BATCH ...]\n");
      return 2;
    }
  }
  if (cases.empty())
    cases = {{"gpt2-124m", 32, 484e3}, {"gpt2-355m", 16, 179e3}, {"gpt2-1.5b", 8, 41.3e3}, {"llama-1b", 8, 0}};
  for (auto& c : cases) {
    if (c.model == "gpt2-124m" && c.micro_batch == 32) c.pytorch_tokens_per_s = 484e3;
    if (c.model == "gpt2-355m" && c.micro_batch == 16) c.pytorch_tokens_per_s = 179e3;
    if (c.model == "gpt2-1.5b" && c.micro_batch == 8) c.pytorch_tokens_per_s = 41.3e3;
  }

  constexpr int T = 1024;
  std::printf("| model | micro-batch | ms/step | host ms | tokens/s | model TFLOP/s | MFU | peak memory | PyTorch tokens/s | ratio |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& c : cases) {
    try {
      meg::ModelConfig config = meg::ModelConfig::preset(c.model);
      config.seq_length = T;
      if (config.family == meg::ModelFamily::gpt2) {
        config.vocab_size = 50304;  // the reference's padded GPT-2 vocabulary
        config.pad_vocab();
      }
      auto backend = meg::make_cuda_backend(config, {}, 1234, meg::parse_precision(precision), recompute);
      std::mt19937 rng(1);
      std::uniform_int_distribution<int> tok(0, static_cast<int>(config.vocab_size) - 1);
      const int N = c.micro_batch * T;
      std::vector<int32_t> tokens(N), targets(N);
      std::vector<double> times, launch_times;
      for (int s = 0; s < warmup + steps; ++s) {
        for (int i = 0; i < N; ++i) tokens[i] = tok(rng), targets[i] = tok(rng);
        const bool profiled = profile && s == warmup + steps - 1;
        if (profiled) cudaProfilerStart();
        const auto start = std::chrono::steady_clock::now();
        backend->begin_step();
        backend->micro_batch(tokens.data(), targets.data(), c.micro_batch, T, 1, s, 0, 1);
        const auto launched = std::chrono::steady_clock::now();
        backend->end_step(1e-4, 1.0);
        if (profiled) cudaProfilerStop();
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (s >= warmup) {
          times.push_back(secs);
          launch_times.push_back(std::chrono::duration<double>(launched - start).count());
        }
      }
      const double secs = median(times);
      const double tps = N / secs;
      const double tflops = tps * static_cast<double>(config.flops_per_token(T)) / 1e12;
      const std::string ref = c.pytorch_tokens_per_s > 0 ? fmt::format("{:.1f}k", c.pytorch_tokens_per_s / 1e3) : "-";
      const std::string ratio = c.pytorch_tokens_per_s > 0 ? fmt::format("{:.2f}", tps / c.pytorch_tokens_per_s) : "-";
      std::printf("| %s | %d | %.1f | %.1f | %.1fk | %.0f | %.1f%% | %.1f GiB | %s | %s |\n", c.model.c_str(),
                  c.micro_batch, secs * 1e3, median(launch_times) * 1e3, tps / 1e3, tflops, 100.0 * tflops / 800.0,
                  static_cast<double>(backend->peak_memory()) / double(1 << 30), ref.c_str(), ratio.c_str());
    } catch (const std::exception& e) {
      std::printf("| %s | %d | failed: %s |\n", c.model.c_str(), c.micro_batch, e.what());
    }
    std::fflush(stdout);
  }
  return 0;
}
