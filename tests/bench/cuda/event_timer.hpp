// Timing of GPU work for the CUDA benchmarks: CUDA events around each call, after untimed warm-up
// calls, and the median of the times; and the --runs option of the benchmarks that take no other.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "ops/cuda/check.hpp"

namespace meg::bench {

// Milliseconds of each of RUNS calls of F, timed with events on STREAM, after WARMUP untimed calls.
// BEFORE, when given, runs before each timed call, outside its time (an L2 flush, say).
inline std::vector<double> time_calls(cudaStream_t stream, int warmup, int runs, const std::function<void()>& f,
                                      const std::function<void()>& before = {}) {
  cudaEvent_t start, stop;
  MEG_CUDA_CHECK(cudaEventCreate(&start));
  MEG_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    if (before) before();
    MEG_CUDA_CHECK(cudaEventRecord(start, stream));
    f();
    MEG_CUDA_CHECK(cudaEventRecord(stop, stream));
    MEG_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    MEG_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  MEG_CUDA_CHECK(cudaEventDestroy(start));
  MEG_CUDA_CHECK(cudaEventDestroy(stop));
  return ms;
}

// The runs a benchmark takes from its only option, --runs N (DEFAULT without it); anything else
// prints the usage of PROGRAM and exits with status 2.
inline int runs_option(int argc, char** argv, const char* program, int default_runs) {
  int runs = default_runs;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--runs" && i + 1 < argc && std::atoi(argv[i + 1]) > 0) {
      runs = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--runs N]   (N above 0, default %d)\n", program, default_runs);
      std::exit(2);
    }
  }
  return runs;
}

inline double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace meg::bench
