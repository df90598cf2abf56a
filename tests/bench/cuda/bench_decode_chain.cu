// The linear layers of a batch-1 decode step alone, on a CUDA machine: for GPT-2 124M, GPT-2 1.56B
// and Llama 1B (the shapes of model/config.hpp's presets, which this file, compiled as CUDA C++17,
// cannot include) in bf16, each layer's four products (QKV, attention
// projection, FC1 with SwiGLU's gate and up rows together, FC2) against weights of their own, one
// row each, for all the model's layers: the weights a decode step streams, without its attention,
// embedding and output layer. Per layer, the time and the fraction of the card's peak bandwidth
// the weights' bytes make of it. The chain runs as the inference model runs it, a small_linear
// launch per product, each overlapping the one before (kernels/overlapped_launch.cuh), the whole
// chain replayed from a CUDA graph:
//   small_linear          the bare products;
//   small_linear, norms   the same with the norms a block has before QKV and FC1 (LayerNorm);
//   as the model, ...     the products as the model's blocks run them: its norms (RMSNorm for
//                         Llama), GPT-2's biases, the QKV product's kv_append epilogue (RoPE for
//                         Llama), GELU or SwiGLU, the residual adds; then with each of these
//                         left out in turn (store in its place): what each costs.
// The other ways of running the chain that were measured against these (kernels handing over
// through counters, one persistent kernel with grid-wide barriers, weights streamed through rings
// of shared memory) were all slower; docs/experiments.md gives their figures, and this
// file's history their code.
//
// Each figure is the median of kRuns timed runs of the whole chain after kWarmup untimed ones.
// Weights and inputs are pseudo-random, never zeros; the products' values are not checked here
// (tests/gpu/test_small_linear.cpp does that).
//
// With --sweep, it instead times chains of one product shape (kSweepProducts products of their own
// weights, replayed from a CUDA graph) for a range of sizes, and fits time = boundary + bytes /
// rate over them: what a kernel boundary costs and the rate at which small_linear streams within
// a kernel, against the rate of a plain streaming read of kSweepReadBytes (the card's practical
// ceiling for this access).
//
// Usage: bench_decode_chain [MODEL ...] | --sweep
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/cuda/check.hpp"
#include "ops/cuda/device_memory.hpp"
#include "ops/cuda/ops.hpp"
#include "ops/cuda/stream.hpp"
#include "event_timer.hpp"
#include "peak_bandwidth.hpp"

namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarmup = 5;
constexpr int kRuns = 30;

// The current device's peak memory bandwidth in B/s, read once.
double bandwidth() {
  static const double peak = [] {
    int device = 0;
    MEG_CUDA_CHECK(cudaGetDevice(&device));
    return meg::bench::peak_bandwidth(device);
  }();
  return peak;
}

// Values in (-1/64, 1/64) from a hash of the index: none zero (k + 1/2 is never 2^15 for an
// integer k), none large enough for the chain's products to overflow, and no host round trip for
// the gigabytes of weights.
__global__ void fill_kernel(bf16* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16(((float(h & 0xffff) + 0.5f) / 65536.0f - 0.5f) / 32.0f);
  }
}

void fill(bf16* x, size_t n, uint32_t seed) {
  fill_kernel<<<1024, 256>>>(x, n, seed);
  MEG_CUDA_CHECK(cudaGetLastError());
}

// A model's shape: hidden size, fused QKV width, FC1 rows (SwiGLU's gate and up together), FC2's
// input width, layers.
struct Shape {
  const char* name;
  int C, QKV, FC1, FC2, L;
  int NH, NKV, HS;
  bool llama;  // RMSNorm, no biases, SwiGLU, RoPE; else GPT-2's LayerNorm, biases, GELU
};
constexpr Shape kShapes[] = {
    {"gpt2-124m", 768, 3 * 768, 3072, 3072, 12, 12, 12, 64, false},
    {"gpt2-1.5b", 1600, 3 * 1600, 6400, 6400, 48, 25, 25, 64, false},
    {"llama-1b", 2048, (32 + 2 * 8) * 64, 2 * 8192, 8192, 16, 32, 8, 64, true},
};

// One product of the chain: out[OC] = W[OC, C] @ in[C].
struct Product {
  const bf16* W;
  const bf16* in;
  bf16* out;
  int C, OC;
};

// ---- the benchmark ------------------------------------------------------------------------------

// The median time of kRuns calls of LAUNCH, which queues work on STREAM, after kWarmup.
template <typename Launch>
double time_runs(cudaStream_t stream, Launch&& launch) {
  return meg::bench::median(meg::bench::time_calls(stream, kWarmup, kRuns, launch));
}

// The median time of kRuns replays, after kWarmup, of a CUDA graph of the launches LAUNCH queues
// on STREAM.
template <typename Launch>
double time_graph(cudaStream_t stream, Launch&& launch) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MEG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  launch();
  MEG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MEG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = time_runs(stream, [&] { MEG_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
  MEG_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MEG_CUDA_CHECK(cudaGraphDestroy(graph));
  return ms;
}

void print_row(const std::string& model, const char* variant, double ms, int layers, double layer_bytes) {
  const double us = ms * 1e3 / layers;
  std::printf("| %s | %s | %.2f | %.1f | %.2f | %.2f |\n", model.c_str(), variant, us, layer_bytes / 1e6,
              layer_bytes / (us * 1e-6) / 1e12, layer_bytes / (us * 1e-6) / bandwidth());
  std::fflush(stdout);
}

void bench(const Shape& m) {
  const std::string name = m.name;
  const int C = m.C, L = m.L;
  // Per layer: QKV, projection, FC1, FC2.
  const int in[4] = {C, C, C, m.FC2}, out[4] = {m.QKV, C, m.FC1, C};
  size_t per_layer = 0;
  for (int k = 0; k < 4; ++k) per_layer += size_t(in[k]) * out[k];

  // The chain's activations, each its own row: x -> qkv -> y (as if the attention's output) -> x,
  // x -> h -> x.
  const size_t width = size_t(std::max({C, m.QKV, m.FC1}));
  meg::cuda::DeviceAllocator alloc;
  meg::cuda::DeviceArray<bf16> weights(alloc, per_layer * L), acts(alloc, 4 * width), norm(alloc, 2 * size_t(C));
  fill(weights.get(), per_layer * L, 1);
  fill(acts.get(), 4 * width, 2);
  fill(norm.get(), 2 * size_t(C), 3);
  bf16 *x = acts.get(), *qkv = x + width, *y = qkv + width, *h = y + width;
  bf16* const ins[4] = {x, qkv, y, h};
  bf16* const outs[4] = {qkv, y, h, x};
  std::vector<Product> chain;
  const bf16* w = weights.get();
  for (int l = 0; l < L; ++l)
    for (int k = 0; k < 4; ++k) {
      chain.push_back({w, ins[k], outs[k], in[k], out[k]});
      w += size_t(in[k]) * out[k];
    }
  const double layer_bytes = double(per_layer) * sizeof(bf16);

  const meg::cuda::Stream owned_stream;
  const cudaStream_t stream = owned_stream.get();
  MEG_CUDA_CHECK(cudaDeviceSynchronize());  // the fills, on the default stream

  for (const bool norms : {false, true}) {
    const double ms = time_graph(stream, [&] {
      for (size_t i = 0; i < chain.size(); ++i) {
        const Product& p = chain[i];
        meg::cuda::SmallLinearNorm<bf16> n{};
        if (norms && (i % 4 == 0 || i % 4 == 2)) n = {norm.get(), norm.get() + C, 1e-5f, false};
        if (!meg::cuda::small_linear<bf16>(p.out, p.in, p.W, nullptr, 1, p.C, p.OC, n,
                                           meg::cuda::SmallLinearEpilogue::store, stream))
          throw std::runtime_error("small_linear declined a product of the chain");
      }
    });
    print_row(name, norms ? "small_linear, norms" : "small_linear", ms, L, layer_bytes);
  }

  // As the model's blocks run them (CudaTransformer::blocks, the attention left out): the norms
  // (RMSNorm for Llama), GPT-2's biases, the QKV product's kv_append epilogue, the activation and
  // the residual adds; then each of these left out in turn (store in its place).
  {
    constexpr int kMaxLength = 1024, kPosition = 552;
    const int FC1 = m.FC1, Fh = m.FC2;
    const size_t layer_bias = size_t(m.QKV) + C + FC1 + C;
    meg::cuda::DeviceArray<bf16> biases(alloc, layer_bias * L), atty(alloc, size_t(C));
    const size_t cache = size_t(m.NKV) * kMaxLength * m.HS;  // one slot's
    meg::cuda::DeviceArray<bf16> kc(alloc, cache), vc(alloc, cache);
    meg::cuda::DeviceArray<int32_t> ints(alloc, 2);
    meg::cuda::DeviceArray<float> rope(alloc, size_t(kMaxLength) * m.HS);
    fill(biases.get(), layer_bias * L, 4);
    fill(atty.get(), size_t(C), 5);
    const int32_t host_ints[2] = {0, kPosition};  // slot, position
    MEG_CUDA_CHECK(cudaMemcpy(ints.get(), host_ints, sizeof(host_ints), cudaMemcpyHostToDevice));
    const std::vector<float> table = meg::cuda::rope_table(kMaxLength, m.HS, 500000.0);
    MEG_CUDA_CHECK(cudaMemcpy(rope.get(), table.data(), table.size() * sizeof(float), cudaMemcpyHostToDevice));
    const meg::cuda::SmallLinearKvAppend<bf16> append{kc.get(), vc.get(), ints.get(), ints.get() + 1,
                                                      m.llama ? rope.get() : nullptr, m.NH, m.NKV, m.HS, kMaxLength};
    struct Variant {
      const char* name;
      bool bias, kv_append, activation, residual;
    };
    using E = meg::cuda::SmallLinearEpilogue;
    for (const Variant& v : {Variant{"as the model", true, true, true, true},
                             Variant{"as the model, no biases", false, true, true, true},
                             Variant{"as the model, QKV stored", true, false, true, true},
                             Variant{"as the model, FC1 stored", true, true, false, true},
                             Variant{"as the model, no residual adds", true, true, true, false}}) {
      if (m.llama && !v.bias) continue;  // Llama has none
      const meg::cuda::SmallLinearNorm<bf16> n{norm.get(), m.llama ? nullptr : norm.get() + C, 1e-5f, m.llama};
      const E act = !v.activation ? E::store : m.llama ? E::swiglu : E::gelu;
      const E res = v.residual ? E::residual : E::store;
      const double ms = time_graph(stream, [&] {
        for (int l = 0; l < L; ++l) {
          const bf16* w = weights.get() + size_t(l) * per_layer;
          const bf16* b = biases.get() + size_t(l) * layer_bias;
          auto bias = [&](size_t at) { return v.bias && !m.llama ? b + at : nullptr; };
          bool ok = meg::cuda::small_linear<bf16>(qkv, x, w, bias(0), 1, C, m.QKV, n,
                                                  v.kv_append ? E::kv_append : E::store, stream,
                                                  v.kv_append ? &append : nullptr);
          w += size_t(C) * m.QKV;
          ok = ok && meg::cuda::small_linear<bf16>(x, atty.get(), w, bias(m.QKV), 1, C, C, {}, res, stream);
          w += size_t(C) * C;
          ok = ok && meg::cuda::small_linear<bf16>(h, x, w, bias(m.QKV + C), 1, C, FC1, n, act, stream);
          w += size_t(C) * FC1;
          ok = ok && meg::cuda::small_linear<bf16>(x, h, w, bias(m.QKV + C + FC1), 1, Fh, C, {}, res, stream);
          if (!ok) throw std::runtime_error("small_linear declined a product of the model's chain");
        }
      });
      print_row(name, v.name, ms, L, layer_bytes);
    }
  }
}

// ---- the sweep ----------------------------------------------------------------------------------

constexpr int kSweepProducts = 32;
constexpr size_t kSweepReadBytes = size_t(1) << 30;

// Sums the 16-byte vectors of IN (N of them) with the products' streaming hint, grid-striding,
// into one float per thread, written only when it is exactly 12345 (never, for the fill's values)
// so that the loads are not dead code.
__global__ void read_kernel(const uint4* in, size_t n, float* sink) {
  float s = 0.0f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(in + i);
    s += __uint_as_float(v.x) + __uint_as_float(v.y) + __uint_as_float(v.z) + __uint_as_float(v.w);
  }
  if (s == 12345.0f) *sink = s;
}

void sweep() {
  struct Size {
    int C, OC;
  };
  const Size sizes[] = {{1600, 1600}, {1600, 3200}, {1600, 4800}, {1600, 6400}, {6400, 1600},
                        {1600, 12800}, {1600, 25600}, {768, 768}, {768, 3072}, {3072, 768}, {2048, 16384}};
  size_t most = 0;
  for (const Size& z : sizes) most = std::max(most, size_t(z.C) * z.OC);
  meg::cuda::DeviceAllocator alloc;
  meg::cuda::DeviceArray<bf16> weights(alloc, std::max(most * kSweepProducts, kSweepReadBytes / sizeof(bf16)));
  meg::cuda::DeviceArray<bf16> acts(alloc, 2 * 25600);
  meg::cuda::DeviceArray<float> sink(alloc, 1);
  fill(weights.get(), std::max(most * kSweepProducts, kSweepReadBytes / sizeof(bf16)), 1);
  fill(acts.get(), 2 * 25600, 2);
  const meg::cuda::Stream owned_stream;
  const cudaStream_t stream = owned_stream.get();
  MEG_CUDA_CHECK(cudaDeviceSynchronize());

  int sms = 0, device = 0;
  MEG_CUDA_CHECK(cudaGetDevice(&device));
  MEG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const double read_ms = meg::bench::median(meg::bench::time_calls(stream, 3, 20, [&] {
    read_kernel<<<4 * sms, 512, 0, stream>>>(reinterpret_cast<const uint4*>(weights.get()), kSweepReadBytes / 16,
                                             sink.get());
    MEG_CUDA_CHECK(cudaGetLastError());
  }));
  const double ceiling = double(kSweepReadBytes) / (read_ms * 1e-3);
  std::printf("plain streaming read of %zu MB: %.2f TB/s (%.2f of %.2f)\n\n", kSweepReadBytes >> 20, ceiling / 1e12,
              ceiling / bandwidth(), bandwidth() / 1e12);
  std::printf("| C | OC | MB | us/product | TB/s |\n|---|---|---|---|---|\n");
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const Size& z : sizes) {
    const size_t elems = size_t(z.C) * z.OC;
    const double ms = time_graph(stream, [&] {
      for (int k = 0; k < kSweepProducts; ++k)  // alternating between two rows, as a chain does
        if (!meg::cuda::small_linear<bf16>(acts.get() + (k % 2 ? 0 : 25600), acts.get() + (k % 2 ? 25600 : 0),
                                           weights.get() + size_t(k) * elems, nullptr, 1, z.C, z.OC, {},
                                           meg::cuda::SmallLinearEpilogue::store, stream))
          throw std::runtime_error("small_linear declined a product of the sweep");
    });
    const double us = ms * 1e3 / kSweepProducts, mb = double(elems) * sizeof(bf16) / 1e6;
    std::printf("| %d | %d | %.1f | %.2f | %.2f |\n", z.C, z.OC, mb, us, mb / us);
    sx += mb;
    sy += us;
    sxx += mb * mb;
    sxy += mb * us;
  }
  const double n = double(std::size(sizes)), slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  const double boundary = (sy - slope * sx) / n;
  std::printf("\nfit: %.2f us a boundary + bytes at %.2f TB/s (%.2f of the plain read)\n", boundary,
              1.0 / slope, 1e12 / slope / ceiling);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--sweep") == 0) {
    sweep();
    return 0;
  }
  std::vector<Shape> models;
  for (int i = 1; i < argc; ++i) {
    const auto it = std::find_if(std::begin(kShapes), std::end(kShapes),
                                 [&](const Shape& s) { return std::strcmp(s.name, argv[i]) == 0; });
    if (it == std::end(kShapes)) {
      std::fprintf(stderr, "usage: bench_decode_chain [gpt2-124m | gpt2-1.5b | llama-1b ...]\n");
      return 2;
    }
    models.push_back(*it);
  }
  if (models.empty()) models.assign(std::begin(kShapes), std::end(kShapes));
  cudaDeviceProp prop;
  MEG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s (%.2f TB/s), bf16, one row; median of %d runs of each model's whole chain\n\n", prop.name,
              bandwidth() / 1e12, kRuns);
  std::printf("| model | variant | us/layer | MB/layer | TB/s | of peak |\n|---|---|---|---|---|---|\n");
  for (const Shape& m : models) {
    try {
      bench(m);
    } catch (const std::exception& e) {
      std::printf("| %s | failed: %s |\n", m.name, e.what());
    }
  }
  return 0;
}
