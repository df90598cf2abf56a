// RoPE's inverse frequencies, the one place they are computed: the CPU rotation (ops/cpu/rope.cpp)
// and the GPU's cos/sin table (kernels/rope.cu, rope_table) both take them from here.
//
// The pair (i, i + HS/2) of a head at position t turns by the angle t * inv_freq[i], with
//   inv_freq[i] = theta^(-2i/HS)                                    (no scaling)
// and, as transformers' modeling_rope_utils.py rescales them once at initialisation:
//   linear (Megatron's --rotary-seq-len-interpolation-factor, transformers' rope_type "linear"):
//     positions divided by FACTOR, i.e. inv_freq[i] / FACTOR;
//   llama3 (Megatron's --use-rope-scaling, transformers' rope_type "llama3", Llama 3.1 to 3.3):
//     with L = original_max_position_embeddings, the wavelength w = 2 pi / inv_freq[i] and
//     s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor),
//       inv_freq[i]                                  when w < L / high_freq_factor,
//       inv_freq[i] / factor                         when w > L / low_freq_factor,
//       (1 - s) inv_freq[i] / factor + s inv_freq[i] otherwise.
// transformers computes in fp32; meg in double (the angles then agree to fp32 rounding).
// "dynamic" (NTK) scaling, whose base depends on each forward's sequence length, is not modelled.
#pragma once

#include <cstdint>
#include <vector>

namespace meg {

enum class RopeScalingType { none, linear, llama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  double factor = 1.0;  // linear: the interpolation factor; llama3: factor
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3 only
  int64_t original_max_position_embeddings = 8192;       // llama3 only
};

// The HS / 2 inverse frequencies of a head of size HS (even) for base THETA.
std::vector<double> rope_inv_freq(int HS, double theta, const RopeScaling& scaling = {});

}  // namespace meg
