// Inverted dropout with a counter-based (stateless) mask; see ops.hpp.
#include <cstddef>
#include <cstdint>

#include "core/parallel.hpp"
#include "ops/cpu/ops.hpp"

namespace meg::cpu {

namespace {
constexpr size_t kGrain = 1 << 15;
}  // namespace

template <typename F>
void dropout_forward(F* out, const F* inp, size_t n, double p, const DropoutKey& key, uint64_t first) {
  if (p == 0) {
    if (out != inp)
      for (size_t i = 0; i < n; ++i) out[i] = inp[i];
    return;
  }
  const uint64_t stream = dropout_stream(key);
  const uint64_t threshold = dropout_threshold(p);
  const F scale = F(1.0 / (1.0 - p));
  parallel_for(n, kGrain, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i)
      out[i] = dropout_bits(stream, first + i) >= threshold ? F(inp[i] * scale) : F(0);
  });
}

template <typename F>
void dropout_backward(F* dinp, const F* dout, size_t n, double p, const DropoutKey& key, uint64_t first) {
  const uint64_t stream = dropout_stream(key);
  const uint64_t threshold = dropout_threshold(p);
  const F scale = F(1.0 / (1.0 - p));
  parallel_for(n, kGrain, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i)
      if (dropout_bits(stream, first + i) >= threshold) dinp[i] += F(dout[i] * scale);
  });
}

template void dropout_forward<float>(float*, const float*, size_t, double, const DropoutKey&, uint64_t);
template void dropout_forward<double>(double*, const double*, size_t, double, const DropoutKey&, uint64_t);
template void dropout_backward<float>(float*, const float*, size_t, double, const DropoutKey&, uint64_t);
template void dropout_backward<double>(double*, const double*, size_t, double, const DropoutKey&, uint64_t);

}  // namespace meg::cpu
