#include "retro/vectors.hpp"

#include "core/float16.hpp"
#include "core/parallel.hpp"

namespace meg {

std::vector<float> widen_fp16(const uint16_t* data, size_t n) {
  std::vector<float> out(n);
  parallel_for(n, size_t(1) << 20, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) out[i] = fp16_to_float(data[i]);
  });
  return out;
}

}  // namespace meg
