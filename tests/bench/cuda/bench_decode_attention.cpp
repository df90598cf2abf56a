// The cached attention of decode steps (kernels/cached_attention.cu) alone, on a CUDA machine: the
// attention shapes of GPT-2 124M, GPT-2 1.5B and Llama 1B (64-element heads; Llama's 32 query heads
// share 8 key/value heads) in bf16, at 1, 4, 8, 12, 16 and 32 query rows of one new token each against
// 552 cached keys (bench_generate's median decode step: a 512-token prompt, 80 tokens generated),
// as many launches as the model has layers, each against its own layer's cache, replayed from a
// CUDA graph (the launches overlap one another as a step's kernels do).
//
// A launch reads each row's keys and values once: Q * NKV * keys * HS * 2 elements, against which
// the table gives its rate and the fraction of the card's peak bandwidth. Where a chain's caches
// together fit in L2 (a few rows of the smaller models), the launches read them from there, and
// the rate says more about the kernel's latency than about the memory: in a decode step the
// weights streamed between two layers' attention evict them.
//
// Each figure is the median of --runs replays after kWarmup.
//
// Usage: bench_decode_attention [--runs N]   (default 30)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"
#include "device_buffer.hpp"
#include "event_timer.hpp"
#include "peak_bandwidth.hpp"

namespace {

using meg::cuda::bf16;
template <typename T>
using Buffer = meg::bench::DeviceBuffer<T>;

constexpr int kWarmup = 5;
constexpr int kKeys = 552, kMaxLength = 1024, kHS = 64;

struct Shape {
  const char* name;
  int NH, NKV, L;
};
constexpr Shape kShapes[] = {{"GPT-2 124M", 12, 12, 12}, {"GPT-2 1.5B", 25, 25, 48}, {"Llama 1B", 32, 8, 16}};

// N values uniform in [-1, 1] rounded to bf16 (one random block of 1M values repeated).
std::vector<bf16> random_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<bf16> block(std::min(n, size_t(1) << 20));
  for (auto& x : block) x = bf16(dist(rng));
  std::vector<bf16> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = block[i % block.size()];
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = meg::bench::runs_option(argc, argv, "bench_decode_attention", 30);
  int device = 0;
  MEG_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop;
  MEG_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const double peak = meg::bench::peak_bandwidth(device);
  std::printf("%s (%.2f TB/s), bf16, %d cached keys a row, median of %d replays of a model's layers\n\n", prop.name,
              peak / 1e12, kKeys, runs);
  std::printf("| model | rows | µs a launch | MB a launch | TB/s | of peak |\n|---|---|---|---|---|---|\n");

  cudaStream_t stream;
  MEG_CUDA_CHECK(cudaStreamCreate(&stream));
  std::mt19937 rng(7);
  for (const Shape& m : kShapes) {
    for (const int Q : {1, 4, 8, 12, 16, 32}) {
      const int width = (m.NH + 2 * m.NKV) * kHS;
      const size_t cache = size_t(Q) * m.NKV * kMaxLength * kHS;  // one layer's K (or V): a slot a row
      Buffer<bf16> qkv(size_t(Q) * width), out(size_t(Q) * m.NH * kHS);
      Buffer<bf16> k_cache(cache * m.L), v_cache(cache * m.L);
      qkv.upload(random_values(qkv.size(), rng));
      k_cache.upload(random_values(cache, rng));  // the first layer's, copied to the others
      v_cache.upload(random_values(cache, rng));
      for (int l = 1; l < m.L; ++l) {
        const size_t bytes = cache * sizeof(bf16);
        MEG_CUDA_CHECK(cudaMemcpy(k_cache.get() + l * cache, k_cache.get(), bytes, cudaMemcpyDeviceToDevice));
        MEG_CUDA_CHECK(cudaMemcpy(v_cache.get() + l * cache, v_cache.get(), bytes, cudaMemcpyDeviceToDevice));
      }
      std::vector<int32_t> ints(3 * size_t(Q));
      for (int q = 0; q < Q; ++q) {
        ints[q] = q;                  // rows
        ints[Q + q] = q;              // slots
        ints[2 * Q + q] = kKeys - 1;  // positions
      }
      Buffer<int32_t> int_buffer(ints.size());
      int_buffer.upload(ints);
      const size_t scratch_floats = meg::cuda::cached_attention_scratch(Q, m.NH, m.NKV, kHS);
      Buffer<float> scratch(scratch_floats);
      MEG_CUDA_CHECK(cudaMemset(scratch.get(), 0, scratch_floats * sizeof(float)));
      const int32_t* rows = int_buffer.get();

      cudaGraph_t graph;
      cudaGraphExec_t exec;
      MEG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int l = 0; l < m.L; ++l)
        meg::cuda::cached_attention<bf16>(out.get(), qkv.get(), k_cache.get() + l * cache, v_cache.get() + l * cache,
                                          rows, rows + Q, rows + 2 * Q, Q, m.NH, m.NKV, kHS, kMaxLength, kKeys, 1,
                                          scratch_floats ? scratch.get() : nullptr, stream);
      MEG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      MEG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      const double ms = meg::bench::median(meg::bench::time_calls(
          stream, kWarmup, runs, [&] { MEG_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }));
      MEG_CUDA_CHECK(cudaGraphExecDestroy(exec));
      MEG_CUDA_CHECK(cudaGraphDestroy(graph));

      const double us = ms * 1e3 / m.L;
      const double bytes = double(Q) * m.NKV * kKeys * kHS * 2 * sizeof(bf16);
      std::printf("| %s | %d | %.2f | %.2f | %.2f | %.2f |\n", m.name, Q, us, bytes / 1e6, bytes / (us * 1e-6) / 1e12,
                  bytes / (us * 1e-6) / peak);
      std::fflush(stdout);
    }
  }
  MEG_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
