// What a decode step reads off its output rows (kernels/logits.cu), at the step's sizes: 1 and 32
// rows of bf16 logits over GPT-2's vocabulary (50257 of 50304 columns) and Llama 3's (128256):
// argmax_rows (greedy), top_k_rows with K = 50 (top-k sampling), sample_rows at temperature 1
// alone and with top-p 0.9.
//
// The rows are small (100 KB to 8 MB) and were just written by the output layer, so they sit in
// L2: what counts is each kernel's latency within the step, not its bandwidth. Each figure is
// the median over runs of the time of kCalls calls launched back to back (as in a step, each
// overlapped with the one before it), divided by kCalls.
//
// Two kinds of rows: "flat", uniform in [-4, 4] (a model of random weights, as bench_generate's:
// top-p's nucleus is then most of the vocabulary, its worst case), and "peaked", normal with a
// standard deviation of 3 (a trained model's spread: a nucleus of hundreds of tokens).
//
// Usage: bench_logits [--runs N]   (default 25)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"
#include "device_buffer.hpp"
#include "event_timer.hpp"

namespace {

using meg::cuda::bf16;

constexpr int kCalls = 20, kWarmup = 3, kTopK = 50;

struct Vocabulary {
  const char* name;
  int V, Vp;
};

// ROWS rows of V logits (Vp apart; the padding -inf, as the output layer's never-read columns
// hold anything), flat or peaked.
std::vector<bf16> make_rows(int rows, int V, int Vp, bool peaked, std::mt19937& rng) {
  std::uniform_real_distribution<float> flat(-4, 4);
  std::normal_distribution<float> normal(0, 3);
  std::vector<bf16> v(size_t(rows) * Vp, bf16(-INFINITY));
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < V; ++j) v[size_t(r) * Vp + j] = bf16(peaked ? normal(rng) : flat(rng));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = meg::bench::runs_option(argc, argv, "bench_logits", 25);
  cudaDeviceProp prop;
  MEG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, bf16 logits, median of %d runs of %d calls back to back\n\n", prop.name, runs, kCalls);
  std::printf("| vocabulary | rows | logits | kernel | µs a call |\n|---|---|---|---|---|\n");

  cudaStream_t stream;
  MEG_CUDA_CHECK(cudaStreamCreate(&stream));
  std::mt19937 rng(3);
  for (const Vocabulary voc : {Vocabulary{"GPT-2", 50257, 50304}, Vocabulary{"Llama 3", 128256, 128256}}) {
    for (const int rows : {1, 32}) {
      for (const bool peaked : {false, true}) {
        meg::bench::DeviceBuffer<bf16> logits_buffer(size_t(rows) * voc.Vp);
        meg::bench::DeviceBuffer<int32_t> tokens_buffer(size_t(rows) * kTopK);
        meg::bench::DeviceBuffer<float> values_buffer(size_t(rows) * kTopK);
        meg::bench::DeviceBuffer<meg::cuda::RowDraw> draws_buffer(static_cast<size_t>(rows));
        logits_buffer.upload(make_rows(rows, voc.V, voc.Vp, peaked, rng));
        const bf16* logits = logits_buffer.get();
        int32_t* tokens = tokens_buffer.get();
        float* values = values_buffer.get();
        const meg::cuda::RowDraw* draws = draws_buffer.get();

        const auto draws_of = [&](double top_p) {
          std::vector<meg::cuda::RowDraw> d;
          for (int r = 0; r < rows; ++r) d.push_back({1.0, top_p, (r + 0.5) / rows});
          draws_buffer.upload(d);
        };
        const auto report = [&](const char* kernel, const std::function<void()>& call) {
          const double ms = meg::bench::median(meg::bench::time_calls(stream, kWarmup, runs, [&] {
            for (int c = 0; c < kCalls; ++c) call();
          }));
          std::printf("| %s | %d | %s | %s | %.1f |\n", voc.name, rows, peaked ? "peaked" : "flat", kernel,
                      ms * 1e3 / kCalls);
          std::fflush(stdout);
        };
        report("argmax_rows", [&] { meg::cuda::argmax_rows(tokens, logits, rows, voc.V, voc.Vp, stream); });
        report("top_k_rows, K 50",
               [&] { meg::cuda::top_k_rows(tokens, values, logits, rows, voc.V, voc.Vp, kTopK, stream); });
        draws_of(1);
        report("sample_rows, temperature 1",
               [&] { meg::cuda::sample_rows(tokens, logits, draws, rows, voc.V, voc.Vp, stream); });
        draws_of(0.9);
        report("sample_rows, top-p 0.9",
               [&] { meg::cuda::sample_rows(tokens, logits, draws, rows, voc.V, voc.Vp, stream); });
      }
    }
  }
  MEG_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
