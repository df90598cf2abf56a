// Throughput of the loss, optimizer and activation kernels at GPT-2 (124M) training sizes:
// bf16 cross-entropy over 32768 positions x 50304 columns, AdamW over 124M parameters in GPT-2's
// 148 tensors (fp32 state, bf16 compute copy), the sum of squares over 124M gradients, and bf16
// GELU over 32768 x 3072. Each is memory-bound, so the figure of merit is the achieved bandwidth:
// the fewest bytes the op must move (each input read once, each output written once) over the
// median time of 25 runs, timed with CUDA events after 3 warm-up runs. A device-to-device copy
// gives the ceiling on the same GPU.
//
// Inputs are random (never zeros, which can run faster than real data), made on the host from a
// 16M-value pattern tiled over each buffer. Usage: bench_loss_optim (no arguments).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"

namespace {

using meg::cuda::bf16;

constexpr int kWarmup = 3;
constexpr int kRuns = 25;
constexpr size_t kPattern = size_t(1) << 24;

template <typename T>
T* device_alloc(size_t n) {
  T* p = nullptr;
  MEG_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  return p;
}

// Fills dst[n] with random values in [lo, hi], rounded to T, tiling one host pattern.
template <typename T>
void fill_random(T* dst, size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<T> pattern(std::min(n, kPattern));
  for (auto& x : pattern) {
    float v;
    do v = dist(rng);
    while (v == 0.0f);
    x = T(v);
  }
  for (size_t i = 0; i < n; i += pattern.size()) {
    const size_t count = std::min(pattern.size(), n - i);
    MEG_CUDA_CHECK(cudaMemcpy(dst + i, pattern.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  }
}

// Median milliseconds of RUN over kRuns timed launches, each between its own pair of events.
double median_ms(const std::function<void()>& run) {
  for (int i = 0; i < kWarmup; ++i) run();
  std::vector<cudaEvent_t> events(2 * kRuns);
  for (auto& e : events) MEG_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < kRuns; ++i) {
    MEG_CUDA_CHECK(cudaEventRecord(events[2 * i]));
    run();
    MEG_CUDA_CHECK(cudaEventRecord(events[2 * i + 1]));
  }
  MEG_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> ms(kRuns);
  for (int i = 0; i < kRuns; ++i) {
    float t = 0;
    MEG_CUDA_CHECK(cudaEventElapsedTime(&t, events[2 * i], events[2 * i + 1]));
    ms[i] = t;
  }
  for (auto& e : events) MEG_CUDA_CHECK(cudaEventDestroy(e));
  std::nth_element(ms.begin(), ms.begin() + kRuns / 2, ms.end());
  return ms[kRuns / 2];
}

void report(const char* name, double bytes, double ms) {
  std::printf("| %-44s | %8.3f | %8.1f |\n", name, ms, bytes / (ms * 1e-3) / 1e9);
}

// GPT-2 small's parameter tensors in llm.c's order: wte, wpe, 12 layers of 12 tensors, ln_f.
std::vector<size_t> gpt2_tensor_sizes() {
  const size_t V = 50304, T = 1024, C = 768, L = 12;
  std::vector<size_t> sizes = {V * C, T * C};
  for (size_t l = 0; l < L; ++l) {
    const size_t layer[] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
    sizes.insert(sizes.end(), std::begin(layer), std::end(layer));
  }
  sizes.push_back(C);
  sizes.push_back(C);
  return sizes;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  MEG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, median of %d runs after %d warm-up\n\n", prop.name,
              prop.multiProcessorCount, kRuns, kWarmup);
  std::printf("| %-44s | %8s | %8s |\n|---|---:|---:|\n", "op", "ms", "GB/s");

  {  // the ceiling: a device-to-device copy, bytes read plus bytes written
    const size_t bytes = size_t(1) << 30;
    char* a = device_alloc<char>(bytes);
    char* b = device_alloc<char>(bytes);
    MEG_CUDA_CHECK(cudaMemset(a, 0x3F, bytes));
    const double ms = median_ms([&] { MEG_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); });
    report("cudaMemcpy device to device, 1 GiB", 2.0 * bytes, ms);
    MEG_CUDA_CHECK(cudaFree(a));
    MEG_CUDA_CHECK(cudaFree(b));
  }

  {  // cross-entropy: the logits read, then overwritten by their gradient
    const int N = 32768, V = 50257, Vp = 50304;
    const size_t n = size_t(N) * Vp;
    bf16* logits = device_alloc<bf16>(n);
    float* losses = device_alloc<float>(N);
    int32_t* targets = device_alloc<int32_t>(N);
    fill_random(logits, n, -8.0f, 8.0f, 1);
    std::vector<int32_t> t(N);
    std::mt19937 rng(2);
    for (auto& x : t) x = int32_t(rng() % V);
    MEG_CUDA_CHECK(cudaMemcpy(targets, t.data(), N * sizeof(int32_t), cudaMemcpyHostToDevice));
    const double loss_ms = median_ms([&] {
      meg::cuda::cross_entropy_fused(logits, losses, targets, N, V, Vp, 0.0f, nullptr);
    });
    report("cross_entropy bf16 32768x50304, loss only", double(n) * 2 + N * 8.0, loss_ms);
    // Later runs see the previous run's gradient as logits: the same work on other values.
    const double fused_ms = median_ms([&] {
      meg::cuda::cross_entropy_fused(logits, losses, targets, N, V, Vp, 1.0f / N, nullptr);
    });
    report("cross_entropy bf16 32768x50304, loss + grad", double(n) * 4 + N * 8.0, fused_ms);
    MEG_CUDA_CHECK(cudaFree(logits));
    MEG_CUDA_CHECK(cudaFree(losses));
    MEG_CUDA_CHECK(cudaFree(targets));
  }

  {  // AdamW and the gradient norm over GPT-2 small's parameters
    const auto sizes = gpt2_tensor_sizes();
    std::vector<meg::cuda::AdamWSegment> segs;
    size_t n = 0;
    for (size_t s : sizes) {
      segs.push_back({n, s, s == 768 || s == 2304 || s == 3072 ? 0.0f : 0.1f});  // no decay on norms, biases
      n += s;
    }
    float* params = device_alloc<float>(n);
    float* grads = device_alloc<float>(n);
    float* m = device_alloc<float>(n);
    float* v = device_alloc<float>(n);
    bf16* params_x = device_alloc<bf16>(n);
    meg::cuda::AdamWSegment* d_segs = device_alloc<meg::cuda::AdamWSegment>(segs.size());
    MEG_CUDA_CHECK(cudaMemcpy(d_segs, segs.data(), segs.size() * sizeof(segs[0]), cudaMemcpyHostToDevice));
    fill_random(params, n, -0.1f, 0.1f, 3);
    fill_random(grads, n, -1e-2f, 1e-2f, 4);
    fill_random(m, n, -1e-3f, 1e-3f, 5);
    fill_random(v, n, 1e-6f, 1e-4f, 6);
    int64_t step = 1;
    const double adamw_ms = median_ms([&] {
      meg::cuda::adamw_step(params, params_x, grads, m, v, d_segs, int(segs.size()), 6e-4f, 0.9f,
                            0.95f, 1e-8f, 1.0f, step++, nullptr);
    });
    char name[64];
    std::snprintf(name, sizeof name, "adamw %.1fM params, %zu segments, bf16 copy", n / 1e6, segs.size());
    report(name, double(n) * (16 + 12 + 2), adamw_ms);

    double* out = device_alloc<double>(1);
    double* scratch = device_alloc<double>(meg::cuda::sum_squares_scratch(n));
    const double ss_ms = median_ms([&] { meg::cuda::sum_squares(out, grads, n, scratch, nullptr); });
    std::snprintf(name, sizeof name, "sum_squares %.1fM fp32", n / 1e6);
    report(name, double(n) * 4, ss_ms);
    for (void* p : {(void*)params, (void*)grads, (void*)m, (void*)v, (void*)params_x, (void*)d_segs,
                    (void*)out, (void*)scratch})
      MEG_CUDA_CHECK(cudaFree(p));
  }

  {  // GELU over the MLP's hidden activations
    const size_t n = size_t(32768) * 3072;
    bf16* inp = device_alloc<bf16>(n);
    bf16* out = device_alloc<bf16>(n);
    bf16* dout = device_alloc<bf16>(n);
    bf16* dinp = device_alloc<bf16>(n);
    fill_random(inp, n, -4.0f, 4.0f, 7);
    fill_random(dout, n, -1.0f, 1.0f, 8);
    const double fwd_ms = median_ms([&] { meg::cuda::gelu_forward(out, inp, n, nullptr); });
    report("gelu_forward bf16 32768x3072", double(n) * 4, fwd_ms);
    const double bwd_ms = median_ms([&] { meg::cuda::gelu_backward(dinp, dout, inp, n, nullptr); });
    report("gelu_backward bf16 32768x3072", double(n) * 6, bwd_ms);
    for (bf16* p : {inp, out, dout, dinp}) MEG_CUDA_CHECK(cudaFree(p));
  }
  return 0;
}
