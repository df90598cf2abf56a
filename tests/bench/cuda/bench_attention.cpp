// Times the CUDA attention (kernels/attention.cu), forward and backward, on a CUDA machine: GPT-2
// 124M's attention shape, a Llama-8B-like one (GQA, head size 128) and a Mistral-7B-like one of 8192
// positions with and without its sliding window of 4096 keys (--window-size 4095,0), in bf16 and
// fp16, without dropout and with attention dropout 0.1.
//
// Each figure is the median of kRuns launches, each timed alone with CUDA events, after kWarmup
// untimed ones (module load, the first-launch costs). Inputs are random, never zeros. FLOPs count
// the causal half of the matrix products: forward 2 * B * NH * T^2 * HS (Q K^T and P V, halved;
// with a window, 4 * B * NH * HS times the (query, key) pairs inside it), backward 2.5 times that
// (five products); the backward's own recomputations are not counted.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <type_traits>
#include <vector>

#include "ops/cpu/dropout_mask.hpp"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"
#include "device_buffer.hpp"
#include "event_timer.hpp"

namespace {

constexpr int kWarmup = 5;
constexpr int kRuns = 30;

struct Case {
  const char* name;
  int B, T, NH, NKV, HS;
  int window = -1;  // the sliding window, -1 for none

  // The (query, key) pairs attended to: T^2 / 2 for full causal attention (the FLOP convention
  // above), those within the window otherwise.
  double pairs() const {
    if (window < 0) return double(T) * T / 2;
    double n = 0;
    for (int t = 0; t < T; ++t) n += std::min(t, window) + 1;
    return n;
  }
};

template <typename T>
using Buffer = meg::bench::DeviceBuffer<T>;

// n random values in [-1, 1], rounded to X, uploaded.
template <typename X>
void fill_random(X* dst, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<X> host(n);
  for (auto& x : host) {
    if constexpr (std::is_same_v<X, __half>) x = __float2half(dist(rng));
    else x = __float2bfloat16(dist(rng));
  }
  MEG_CUDA_CHECK(cudaMemcpy(dst, host.data(), n * sizeof(X), cudaMemcpyHostToDevice));
}

// Median milliseconds of one call of F.
double median_ms(const std::function<void()>& f) {
  return meg::bench::median(meg::bench::time_calls(nullptr, kWarmup, kRuns, f));
}

template <typename X>
void bench(const Case& c, const char* type, double dropout_p) {
  const uint64_t stream = meg::cpu::dropout_stream({1, 2, 3, 4});
  const size_t rows = size_t(c.B) * c.T;
  const size_t n_qkv = rows * (c.NH + 2 * c.NKV) * c.HS, n_out = rows * c.NH * c.HS;
  Buffer<X> qkv(n_qkv), out(n_out), dout(n_out), dqkv(n_qkv);
  Buffer<float> lse(size_t(c.B) * c.NH * c.T);
  Buffer<float> scratch(meg::cuda::attention_backward_scratch(c.B, c.T, c.NH));
  fill_random(qkv.get(), n_qkv, 1);
  fill_random(dout.get(), n_out, 2);

  const double fwd_ms = median_ms([&] {
    meg::cuda::attention_forward<X>(out.get(), lse.get(), qkv.get(), c.B, c.T, c.NH, c.NKV, c.HS, 0,
                                    dropout_p, stream, c.window);
  });
  const double bwd_ms = median_ms([&] {
    meg::cuda::attention_backward<X>(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(), c.B,
                                     c.T, c.NH, c.NKV, c.HS, scratch.get(), 0, dropout_p, stream, c.window);
  });
  MEG_CUDA_CHECK(cudaDeviceSynchronize());

  const double fwd_flop = 4.0 * c.B * c.NH * c.pairs() * c.HS;
  std::printf("%-14s %-5s %4.2f %-8s %9.3f %9.1f\n", c.name, type, dropout_p, "forward", fwd_ms,
              fwd_flop / (fwd_ms * 1e9));
  std::printf("%-14s %-5s %4.2f %-8s %9.3f %9.1f\n", c.name, type, dropout_p, "backward", bwd_ms,
              2.5 * fwd_flop / (bwd_ms * 1e9));
}

}  // namespace

int main() {
  const Case cases[] = {{"GPT-2 124M", 32, 1024, 12, 12, 64},
                        {"Llama-8B-like", 4, 2048, 32, 8, 128},
                        {"Mistral-like", 1, 8192, 32, 8, 128},
                        {"Mistral window", 1, 8192, 32, 8, 128, 4095}};
  cudaDeviceProp prop;
  MEG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s; median of %d runs\n", prop.name, kRuns);
  std::printf("%-14s %-5s %4s %-8s %9s %9s\n", "shape", "type", "drop", "pass", "ms", "TFLOP/s");
  for (const Case& c : cases)
    for (const double p : {0.0, 0.1}) {
      bench<__nv_bfloat16>(c, "bf16", p);
      bench<__half>(c, "fp16", p);
    }
  return 0;
}
