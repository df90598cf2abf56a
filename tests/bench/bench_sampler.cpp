// Time to choose a token from a row of logits on the CPU (infer/sampler.hpp), for each kind of
// sampling meg-generate offers, at GPT-2's and Llama 3's vocabularies: per row on one thread, and
// per decode step of 32 rows sampled in parallel on every thread (as the generator does). A token
// is chosen after every decode step, before the next can start, so the reference is the step it
// follows: GPT-2 124M's batch-1 decode step on an H100, 0.26 ms (bench_generate), the shortest
// this repository has; the ratio is the sampling's share of it.
//
// The logits are normal: "peaked" (standard deviation 5: top-p 0.9 keeps about 50 of GPT-2's
// tokens) or "flat" (deviation 1: it keeps about 30,000). The penalty rows carry a history of 512
// tokens. Each figure is the median of 51 timed calls after 5 untimed ones.
//   bench_sampler        MEG_NUM_THREADS=N sets the 32-row figures' thread count (default: the cores)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "core/parallel.hpp"
#include "infer/sampler.hpp"

namespace {

using namespace meg;

constexpr double kReferenceStepUs = 260;  // GPT-2 124M, batch-1 decode step, H100
constexpr int kRows = 32, kRuns = 51, kWarmup = 5;

template <typename Fn>
double median_us(Fn&& fn) {
  std::vector<double> us;
  for (int run = 0; run < kWarmup + kRuns; ++run) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    if (run >= kWarmup) us.push_back(t);
  }
  std::nth_element(us.begin(), us.begin() + kRuns / 2, us.end());
  return us[kRuns / 2];
}

struct Case {
  const char* name;
  SamplingParams params;
  double spread;  // of the logits
};

SamplingParams params(double temperature, int top_k, double top_p, double penalty) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.repetition_penalty = penalty;
  return p;
}

}  // namespace

int main() {
  const Case cases[] = {
      {"greedy", params(0, 0, 1, 1), 5},
      {"greedy, penalty 1.2", params(0, 0, 1, 1.2), 5},
      {"temperature 1", params(1, 0, 1, 1), 5},
      {"top-k 50", params(1, 50, 1, 1), 5},
      {"top-k 50, top-p 0.9", params(1, 50, 0.9, 1), 5},
      {"top-p 0.9, peaked", params(1, 0, 0.9, 1), 5},
      {"top-p 0.9, flat", params(1, 0, 0.9, 1), 1},
      {"top-p 0.9, penalty 1.2", params(1, 0, 0.9, 1.2), 5},
  };
  std::printf("%u threads; reference: a %.0f us decode step\n\n", num_threads(), kReferenceStepUs);
  std::printf("| sampling | vocabulary | us a row | share of step | us for %d rows | share of step |\n", kRows);
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (const int V : {50257, 128256}) {
    std::mt19937 rng(5);
    std::vector<int32_t> history(512);
    for (int32_t& t : history) t = int32_t(rng() % uint32_t(V));
    for (const Case& c : cases) {
      std::normal_distribution<float> normal(0, float(c.spread));
      std::vector<float> logits(size_t(kRows) * size_t(V));
      for (float& l : logits) l = normal(rng);
      std::vector<Sampler> samplers(kRows, Sampler(V));
      std::vector<int32_t> tokens(kRows);
      const auto sample = [&](size_t row) {
        tokens[row] = samplers[row].sample(logits.data() + row * size_t(V), history, c.params, 0.37);
      };
      const double one = median_us([&] { sample(0); });
      const double all = median_us([&] {
        parallel_for(kRows, 1, [&](size_t begin, size_t end) {
          for (size_t r = begin; r < end; ++r) sample(r);
        });
      });
      std::printf("| %s | %d | %.1f | %.2f | %.1f | %.2f |\n", c.name, V, one, one / kReferenceStepUs, all,
                  all / kReferenceStepUs);
    }
  }
}
