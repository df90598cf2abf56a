// The blend meg-pretrain builds itself from --data-path, as Megatron-LM builds its sample indices:
// meg-blend's build (data/blend.hpp) with every split's sample count given, written into a cache
// directory under the fingerprint it will have (FINGERPRINT.blend) and reused while that is the
// same: the same inputs (their .idx and .bin), weights, split, seed, sequence length and sample
// counts. A file whose inputs changed since has another name, so it is never taken for the new.
#pragma once

#include <string>
#include <vector>

#include "data/blend.hpp"

namespace meg {

struct CachedBlend {
  std::string path;
  bool built = false;  // false: it was in the cache already
};

// The blend of INPUTS and OPTIONS in CACHE_DIR (created when absent), built when not there.
CachedBlend cached_blend(const std::vector<BlendInput>& inputs, const BlendOptions& options,
                         const std::string& cache_dir);

}  // namespace meg
