// Memory-bound kernels of the CUDA path in bf16 at GPT-2 124M's shapes (B = 32, T = 1024, so
// N = 32768 rows, C = 768) and at C = 2048 (Llama 1B: 32 query and 8 key/value heads of 64):
// LayerNorm and RMSNorm forward and backward, the residual add, the embedding forward and
// backward, and RoPE.
//
// Each kernel is timed alone with CUDA events after warm-up runs, the L2 cache flushed before each
// run (the tensors are about its size, so back-to-back runs would partly read the cache), and the
// median of the runs is reported. Bandwidth counts the fewest bytes the op must move: each input
// read once, each output written once (an accumulated output both), the embedding tables' rows
// only for the distinct tokens of the batch; scratch traffic is not counted, so the figure is what
// the op achieves, not what the kernels move. The first row, a device-to-device copy, is the
// practical ceiling.
//
// Usage: bench_kernels [--runs N]   (default 25)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
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
template <typename T>
using Buffer = meg::bench::DeviceBuffer<T>;

constexpr int kB = 32, kT = 1024, kN = kB * kT;
constexpr int kWarmup = 3;
constexpr size_t kFlushBytes = size_t(256) << 20;  // several times the L2 cache

// BUFFER filled with random non-zero values in [LO, HI) (a random block of 1M values repeated:
// zeros would hide nothing here, but real-looking data costs little).
template <typename T>
void fill_random(Buffer<T>& buffer, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  const size_t n = buffer.size();
  std::vector<T> block(std::min<size_t>(n, 1 << 20));
  for (auto& x : block) {
    float v;
    do v = dist(rng);
    while (v == 0.0f);
    x = T(v);
  }
  for (size_t i = 0; i < n; i += block.size())
    MEG_CUDA_CHECK(cudaMemcpy(buffer.get() + i, block.data(), std::min(block.size(), n - i) * sizeof(T),
                              cudaMemcpyHostToDevice));
}

// Median milliseconds of RUNS runs of FN, each after an L2 flush, after kWarmup runs.
double time_ms(const std::function<void()>& fn, int runs, void* flush) {
  int i = 0;
  return meg::bench::median(meg::bench::time_calls(nullptr, kWarmup, runs, fn,
                                         [&] { MEG_CUDA_CHECK(cudaMemsetAsync(flush, i++ & 0xFF, kFlushBytes)); }));
}

struct Shape {
  int C, NH, NKV, HS, V;
};

void report(const char* op, const Shape& s, double ms, double bytes, double copy_gbs) {
  const double gbs = bytes / (ms * 1e-3) / 1e9;
  std::printf("| %s | %d | %.4f | %.0f | %.0f%% |\n", op, s.C, ms, gbs,
              copy_gbs > 0 ? 100 * gbs / copy_gbs : 100.0);
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = meg::bench::runs_option(argc, argv, "bench_kernels", 25);
  cudaDeviceProp prop;
  MEG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, bf16, N = %d rows (B = %d, T = %d), median of %d runs, L2 flushed before each\n\n",
              prop.name, kN, kB, kT, runs);
  std::printf("| op | C | ms | GB/s | of copy |\n|---|---|---|---|---|\n");

  void* flush = nullptr;
  MEG_CUDA_CHECK(cudaMalloc(&flush, kFlushBytes));
  std::mt19937 rng(1);

  // The ceiling: a device-to-device copy of 1 GiB (bytes read plus bytes written).
  double copy_gbs = 0;
  {
    const size_t bytes = size_t(1) << 30;
    Buffer<char> src(bytes), dst(bytes);
    MEG_CUDA_CHECK(cudaMemset(src.get(), 1, bytes));
    const double ms = time_ms(
        [&] { MEG_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice)); },
        runs, flush);
    copy_gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
    std::printf("| device-to-device copy (1 GiB) | - | %.4f | %.0f | 100%% |\n", ms, copy_gbs);
  }

  for (const Shape s : {Shape{768, 12, 12, 64, 50257}, Shape{2048, 32, 8, 64, 128256}}) {
    const int C = s.C;
    const double NC = double(kN) * C, X = sizeof(bf16), F = sizeof(float);
    Buffer<bf16> inp(size_t(kN) * C), out(size_t(kN) * C), dout(size_t(kN) * C),
        dinp(size_t(kN) * C), weight(C), bias(C);
    Buffer<float> mean(kN), rstd(kN), dweight(C), dbias(C);
    fill_random(inp, -1, 2, rng), fill_random(dout, -1, 1, rng), fill_random(dinp, -1, 1, rng);
    fill_random(weight, 0.5, 1.5, rng), fill_random(bias, -0.5, 0.5, rng);
    fill_random(dweight, -1, 1, rng), fill_random(dbias, -1, 1, rng);
    const size_t scratch_n = std::max(meg::cuda::layernorm_backward_scratch(kN, C),
                                      meg::cuda::rmsnorm_backward_scratch(kN, C));
    Buffer<float> scratch(scratch_n);

    double ms = time_ms([&] {
      meg::cuda::layernorm_forward(out.get(), mean.get(), rstd.get(), inp.get(), weight.get(),
                                   bias.get(), kN, C, 1e-5f, nullptr);
    }, runs, flush);
    report("layernorm fwd", s, ms, 2 * NC * X + 2 * C * X + 2.0 * kN * F, copy_gbs);
    ms = time_ms([&] {
      meg::cuda::layernorm_backward(dinp.get(), dweight.get(), dbias.get(), dout.get(), inp.get(),
                                    weight.get(), mean.get(), rstd.get(), kN, C, scratch.get(),
                                    nullptr);
    }, runs, flush);
    report("layernorm bwd", s, ms, 4 * NC * X + C * X + 2.0 * kN * F + 4.0 * C * F, copy_gbs);
    ms = time_ms([&] {
      meg::cuda::rmsnorm_forward(out.get(), rstd.get(), inp.get(), weight.get(), kN, C, 1e-5f,
                                 nullptr);
    }, runs, flush);
    report("rmsnorm fwd", s, ms, 2 * NC * X + C * X + double(kN) * F, copy_gbs);
    ms = time_ms([&] {
      meg::cuda::rmsnorm_backward(dinp.get(), dweight.get(), dout.get(), inp.get(), weight.get(),
                                  rstd.get(), kN, C, scratch.get(), nullptr);
    }, runs, flush);
    report("rmsnorm bwd", s, ms, 4 * NC * X + C * X + double(kN) * F + 2.0 * C * F, copy_gbs);
    ms = time_ms([&] { meg::cuda::add(out.get(), inp.get(), dout.get(), size_t(NC), nullptr); },
                 runs, flush);
    report("add", s, ms, 3 * NC * X, copy_gbs);

    // Embedding: uniform random tokens over the vocabulary.
    std::vector<int32_t> tokens(kN);
    std::uniform_int_distribution<int32_t> pick(0, s.V - 1);
    for (auto& t : tokens) t = pick(rng);
    const auto groups = meg::cuda::group_positions_by_token(tokens.data(), kN);
    const int U = int(groups.unique.size());
    Buffer<int32_t> d_tokens(kN), unique(U), starts(U + 1), positions(kN);
    d_tokens.upload(tokens), unique.upload(groups.unique), starts.upload(groups.starts);
    positions.upload(groups.positions);
    Buffer<bf16> wte(size_t(s.V) * C), wpe(size_t(kT) * C);
    Buffer<float> dwte(size_t(s.V) * C), dwpe(size_t(kT) * C);
    fill_random(wte, -1, 1, rng), fill_random(wpe, -1, 1, rng);
    fill_random(dwte, -1, 1, rng), fill_random(dwpe, -1, 1, rng);
    ms = time_ms([&] {
      meg::cuda::embedding_forward(out.get(), d_tokens.get(), wte.get(), wpe.get(), kB, kT, C, 0,
                                   s.V, nullptr);
    }, runs, flush);
    report("embedding fwd", s, ms, kN * 4.0 + double(U) * C * X + double(kT) * C * X + NC * X,
           copy_gbs);
    ms = time_ms([&] {
      meg::cuda::embedding_backward(dwte.get(), dwpe.get(), dout.get(), unique.get(), starts.get(),
                                    positions.get(), U, kB, kT, C, nullptr);
    }, runs, flush);
    report("embedding bwd", s, ms,
           NC * X + 2.0 * U * C * F + 2.0 * kT * C * F + (2.0 * U + 1 + kN) * 4, copy_gbs);

    // RoPE on the q and k heads of the fused qkv activation.
    const size_t width = size_t(s.NH + 2 * s.NKV) * s.HS;
    Buffer<bf16> qkv(size_t(kN) * width);
    fill_random(qkv, -2, 2, rng);
    const auto table_host = meg::cuda::rope_table(kT, s.HS, 10000.0);
    Buffer<float> table(table_host.size());
    table.upload(table_host);
    ms = time_ms([&] {
      meg::cuda::rope_forward(qkv.get(), table.get(), kB, kT, s.NH, s.NKV, s.HS, nullptr);
    }, runs, flush);
    report("rope fwd", s, ms,
           2.0 * kN * (s.NH + s.NKV) * s.HS * X + double(table_host.size()) * F, copy_gbs);
  }
  MEG_CUDA_CHECK(cudaFree(flush));
  return 0;
}
