// RoPE's inverse frequencies (see rope_frequencies.hpp).
#include "ops/rope_frequencies.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace meg {

std::vector<double> rope_inv_freq(int HS, double theta, const RopeScaling& s) {
  if (HS <= 0 || HS % 2 != 0) throw std::invalid_argument("rope: head size must be positive and even");
  std::vector<double> inv_freq(size_t(HS / 2));
  const double L = double(s.original_max_position_embeddings);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double f = std::pow(theta, -2.0 * double(i) / HS);
    switch (s.type) {
      case RopeScalingType::none: inv_freq[i] = f; break;
      case RopeScalingType::linear: inv_freq[i] = f / s.factor; break;
      case RopeScalingType::llama3: {
        const double wavelen = 2 * std::numbers::pi / f;
        if (wavelen < L / s.high_freq_factor) {
          inv_freq[i] = f;
        } else if (wavelen > L / s.low_freq_factor) {
          inv_freq[i] = f / s.factor;
        } else {
          const double smooth = (L / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
          inv_freq[i] = (1 - smooth) * f / s.factor + smooth * f;
        }
        break;
      }
    }
  }
  return inv_freq;
}

}  // namespace meg
