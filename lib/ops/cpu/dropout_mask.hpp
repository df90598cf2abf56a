// The counter-based dropout mask of ops/cpu/ops.hpp (see the comment there): the key, the stream
// hash and the per-element bits. A header of its own, plain C++17 with no other includes, so the
// CUDA kernels (kernels/dropout.cu) compute the very same bits as the CPU: under nvcc the
// functions are also __device__.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MEG_HOST_DEVICE __host__ __device__
#else
#define MEG_HOST_DEVICE
#endif

namespace meg::cpu {

struct DropoutKey {
  uint64_t seed = 0;   // the run's seed
  uint64_t step = 0;   // the training iteration
  uint64_t micro = 0;  // the micro-batch within the iteration
  uint64_t site = 0;   // which dropout in the model (embedding, one per block and kind)
};

namespace detail {
MEG_HOST_DEVICE constexpr uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace detail

// The per-array part of the hash: a mix of the key's four integers.
MEG_HOST_DEVICE constexpr uint64_t dropout_stream(const DropoutKey& key) {
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  uint64_t h = detail::splitmix64(key.seed + kGolden);
  h = detail::splitmix64(h ^ (key.step + 2 * kGolden));
  h = detail::splitmix64(h ^ (key.micro + 3 * kGolden));
  h = detail::splitmix64(h ^ (key.site + 4 * kGolden));
  return h;
}

// The 32 bits of element INDEX of the stream STREAM (= dropout_stream(key)): SplitMix64's output
// number INDEX from state STREAM, top half.
MEG_HOST_DEVICE constexpr uint32_t dropout_bits(uint64_t stream, uint64_t index) {
  return static_cast<uint32_t>(detail::splitmix64(stream + (index + 1) * 0x9e3779b97f4a7c15ULL) >> 32);
}

// floor(p * 2^32): element kept iff dropout_bits(...) >= this.
inline uint64_t dropout_threshold(double p) { return static_cast<uint64_t>(p * 4294967296.0); }

}  // namespace meg::cpu
