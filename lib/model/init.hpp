// Megatron's initialisation of the GPT parameters (gpt.hpp), counter-based, so that every rank
// generates its own part directly and the work splits over threads.
//
// What each tensor gets: normal(0, init_std) for every weight matrix and embedding (ParamInit::
// normal), normal(0, init_std / sqrt(2 L)) for the output projections of each block (linear_proj
// and linear_fc2 weights: normal_scaled), zeros for biases, ones for norm weights.
//
// The normals. Element i (row-major) of the tensor numbered k in the FULL model's table
// (gpt_parameter_table(config), counting from 0 in storage order) is s * z(seed, k, i), s the
// tensor's standard deviation, with z computed in double and rounded to F once at the end (so
// float and double agree up to that rounding):
//   p = floor(i / 2)                                       the Box-Muller pair of element i
//   (x0, x1, x2, x3) = Philox4x32-10(counter = (p mod 2^32, p div 2^32, k mod 2^32, k div 2^32),
//                                    key = (seed mod 2^32, seed div 2^32))   (core/philox.hpp)
//   a = (x1 * 2^32 + x0) div 2^11,  b = (x3 * 2^32 + x2) div 2^11           two 53-bit integers
//   u1 = (a + 1) / 2^53 in (0, 1],  u2 = b / 2^53 in [0, 1)
//   z(seed, k, 2p) = sqrt(-2 ln u1) cos(2 pi u2),  z(seed, k, 2p + 1) = sqrt(-2 ln u1) sin(2 pi u2)
// All of it is integer arithmetic and correctly rounded IEEE double operations, except ln, cos
// and sin, which come from the C library (glibc's are correctly rounded in practice; another
// library may differ in the last bit of a double, hence rarely in a float).
//
// Each value is a pure function of (seed, k, i): a tensor-parallel rank or a pipeline stage
// computes exactly the slice of the full model's initialisation it holds, without generating the
// rest, and the result does not depend on the number of threads. Tensors missing from a config
// (biases of Llama, ...) are simply not numbered, so adding a tensor kind renumbers the later ones.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.hpp"
#include "model/param_tensor.hpp"

namespace meg {

// Initialises PARAMS, laid out by LOCAL_TABLE: tensors of tensor-parallel rank TP_RANK of TP
// (those of gpt_parameter_table(config, tp); of the full table when TP is 1), all of them or some
// in any order (a pipeline stage's stage_table, a rank's model chunks). Each tensor gets its slice
// of the full model's initialisation (above). Multi-threaded through parallel_for
// (core/parallel.hpp). std::invalid_argument when LOCAL_TABLE is not such a table of CONFIG: a
// name the model lacks, or a shape not split over TP.
template <typename F>
void gpt_init_local(const ModelConfig& config, const std::vector<ParamTensor>& local_table, int tp, int tp_rank,
                    uint64_t seed, F* params);

// The whole model's (or a pipeline stage's) initialisation: gpt_init_local without tensor
// parallelism. TENSORS is CONFIG's table (or its stage_table). Shared by the CPU and CUDA models, so
// that a seed gives the same starting point on both.
template <typename F>
void gpt_init_parameters(const ModelConfig& config, const std::vector<ParamTensor>& tensors, uint64_t seed,
                         F* params);

}  // namespace meg
