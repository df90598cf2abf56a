#include "retro/embedder.hpp"

#include "core/parallel.hpp"

namespace meg {

CpuEmbedder::CpuEmbedder(CheckpointModel checkpoint, size_t batch)
    : params_(std::move(checkpoint)),
      model_(params_.config, nullptr, {}, false, params_.params.data()),
      batch_(batch) {
  model_.set_training(false);
}

void CpuEmbedder::embed(const int32_t* tokens, const uint32_t* lengths, size_t n, size_t chunk_length, float* out) {
  model_.forward_hidden(tokens, int(n), int(chunk_length));
  const float* hidden = model_.final_hidden();
  const size_t C = dim();
  parallel_for(n, 1, [&](size_t begin, size_t end) {
    std::vector<double> sum(C);
    for (size_t i = begin; i < end; ++i) {
      std::fill(sum.begin(), sum.end(), 0.0);
      for (size_t t = 0; t < lengths[i]; ++t) {
        const float* h = hidden + (i * chunk_length + t) * C;
        for (size_t c = 0; c < C; ++c) sum[c] += h[c];
      }
      for (size_t c = 0; c < C; ++c) out[i * C + c] = float(sum[c] / double(lengths[i]));
    }
  });
}

}  // namespace meg
