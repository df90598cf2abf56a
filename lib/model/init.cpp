// The counter-based initialisation of init.hpp: the local array cut into pieces, each a stretch of
// consecutive elements of one full tensor, filled in parallel.
#include "model/init.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "core/parallel.hpp"
#include "core/philox.hpp"
#include "model/param_table.hpp"
#include "model/tensor_parallel.hpp"

namespace meg {

namespace {

// Elements per task: about a millisecond of normals, small enough to balance the threads on one
// tensor, large enough that handing out tasks costs nothing.
constexpr size_t kGrain = size_t(1) << 16;

// A stretch of the local array whose elements are consecutive in one tensor of the full table.
struct Piece {
  size_t local;      // the first element's index in the local flat array
  size_t length;
  uint64_t tensor;   // the tensor's index in the full table (k of init.hpp)
  uint64_t first;    // the first element's index in the full tensor (i of init.hpp)
  ParamInit init;
};

// z(seed, tensor, 2 pair) and z(seed, tensor, 2 pair + 1) of init.hpp.
std::array<double, 2> normal_pair(uint64_t seed, uint64_t tensor, uint64_t pair) {
  const PhiloxCounter x = philox4x32_10(
      {uint32_t(pair), uint32_t(pair >> 32), uint32_t(tensor), uint32_t(tensor >> 32)},
      {uint32_t(seed), uint32_t(seed >> 32)});
  const uint64_t a = ((uint64_t(x[1]) << 32) | x[0]) >> 11;
  const uint64_t b = ((uint64_t(x[3]) << 32) | x[2]) >> 11;
  const double u1 = double(a + 1) * 0x1.0p-53;  // (0, 1]: the log is finite
  const double u2 = double(b) * 0x1.0p-53;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2 * std::numbers::pi * u2;
  return {r * std::cos(angle), r * std::sin(angle)};
}

// OUT[j] = SCALE * z(seed, tensor, first + j) for j < N, both values of each pair used.
template <typename F>
void fill_normals(F* out, size_t n, double scale, uint64_t seed, uint64_t tensor, uint64_t first) {
  for (uint64_t i = first, end = first + n; i < end;) {
    const std::array<double, 2> z = normal_pair(seed, tensor, i / 2);
    for (uint64_t half = i % 2; half < 2 && i < end; ++half, ++i) *out++ = static_cast<F>(scale * z[half]);
  }
}

// The pieces of the array laid out by LOCAL_TABLE (see gpt_init_local), none over kGrain long.
std::vector<Piece> pieces_of(const ModelConfig& config, const std::vector<ParamTensor>& local_table, int tp,
                             int tp_rank) {
  if (tp < 1 || tp_rank < 0 || tp_rank >= tp)
    throw std::invalid_argument("gpt_init_local: no rank " + std::to_string(tp_rank) + " in a tensor-parallel group of " +
                                std::to_string(tp));
  const std::vector<ParamTensor> full_table = gpt_parameter_table(config);
  std::unordered_map<std::string, size_t> index_of;
  for (size_t k = 0; k < full_table.size(); ++k) index_of.emplace(full_table[k].name, k);
  std::vector<Piece> pieces;
  for (const ParamTensor& t : local_table) {
    const auto found = index_of.find(t.name);
    if (found == index_of.end()) throw std::invalid_argument("gpt_init_local: the model has no tensor '" + t.name + "'");
    const size_t k = found->second;
    size_t covered = 0;
    for_each_shard_run(full_table[k], tp, tp_rank, [&](size_t full_index, size_t local_index, size_t length) {
      for (size_t done = 0; done < length; done += kGrain)
        pieces.push_back({t.offset + local_index + done, std::min(kGrain, length - done), k, full_index + done, t.init});
      covered += length;
    });
    if (covered != t.numel)
      throw std::invalid_argument("gpt_init_local: '" + t.name + "' does not have the shape of a " + std::to_string(tp) +
                                  "-way shard");
  }
  return pieces;
}

}  // namespace

template <typename F>
void gpt_init_local(const ModelConfig& config, const std::vector<ParamTensor>& local_table, int tp, int tp_rank,
                    uint64_t seed, F* params) {
  const std::vector<Piece> pieces = pieces_of(config, local_table, tp, tp_rank);
  const double std_normal = config.init_std;
  const double std_scaled = config.init_std / std::sqrt(2.0 * static_cast<double>(config.num_layers));
  parallel_for(pieces.size(), 1, [&](size_t begin, size_t end) {
    for (size_t p = begin; p < end; ++p) {
      const Piece& piece = pieces[p];
      F* out = params + piece.local;
      switch (piece.init) {
        case ParamInit::zeros: std::fill_n(out, piece.length, F(0)); break;
        case ParamInit::ones: std::fill_n(out, piece.length, F(1)); break;
        case ParamInit::normal:
        case ParamInit::normal_scaled:
          fill_normals(out, piece.length, piece.init == ParamInit::normal ? std_normal : std_scaled, seed,
                       piece.tensor, piece.first);
          break;
      }
    }
  });
}

template <typename F>
void gpt_init_parameters(const ModelConfig& config, const std::vector<ParamTensor>& tensors, uint64_t seed,
                         F* params) {
  gpt_init_local(config, tensors, 1, 0, seed, params);
}

template void gpt_init_local<float>(const ModelConfig&, const std::vector<ParamTensor>&, int, int, uint64_t, float*);
template void gpt_init_local<double>(const ModelConfig&, const std::vector<ParamTensor>&, int, int, uint64_t, double*);
template void gpt_init_parameters<float>(const ModelConfig&, const std::vector<ParamTensor>&, uint64_t, float*);
template void gpt_init_parameters<double>(const ModelConfig&, const std::vector<ParamTensor>&, uint64_t, double*);

}  // namespace meg
