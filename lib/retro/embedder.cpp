#include "retro/embedder.hpp"

#include <algorithm>
#include <stdexcept>

#include "core/device.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"

namespace meg {

CpuEmbedder::CpuEmbedder(CheckpointModel checkpoint, size_t batch)
    : params_(std::move(checkpoint)),
      model_(params_.config, nullptr, {}, false, params_.params.data()),
      batch_(batch) {
  model_.set_training(false);
}

std::unique_ptr<ChunkEmbedder> make_chunk_embedder(CheckpointModel checkpoint, const std::string& device,
                                                   Precision precision, size_t batch,
                                                   [[maybe_unused]] size_t chunk_length) {
  if (checked_device(device, precision) == Device::cpu)
    return std::make_unique<CpuEmbedder>(std::move(checkpoint), batch);
#if MEG_CUDA
  return make_cuda_embedder(checkpoint, precision, batch, chunk_length);
#else
  throw std::logic_error("make_chunk_embedder: checked_device let cuda through in a build without CUDA");
#endif
}

void embed_chunks(ChunkEmbedder& embedder, const ChunkReader& read, size_t chunk_length, uint64_t first, size_t n,
                  float* out) {
  const size_t batch = embedder.batch();
  std::vector<int32_t> tokens(batch * chunk_length);
  std::vector<uint32_t> lengths(batch);
  for (size_t b = 0; b < n; b += batch) {
    const size_t m = std::min(batch, n - b);
    read(first + b, m, tokens.data(), lengths.data());
    // Padding is fed as token 0, inside every vocabulary: being after the real tokens, it
    // changes none of their hidden states.
    for (size_t i = 0; i < m; ++i)
      std::fill(tokens.begin() + ptrdiff_t(i * chunk_length + lengths[i]),
                tokens.begin() + ptrdiff_t((i + 1) * chunk_length), 0);
    embedder.embed(tokens.data(), lengths.data(), m, chunk_length, out + b * embedder.dim());
  }
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
