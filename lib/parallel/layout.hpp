// The parallel layout of a training job and the rank arithmetic of Megatron-LM's parallel state.
//
// A job of W processes is a grid tp x cp x ep x dp x pp = W. A rank's coordinates follow Megatron's
// order, tensor-parallel fastest, then context, expert, data, and pipeline slowest:
//   rank = tp_rank + tp * (cp_rank + cp * (ep_rank + ep * (dp_rank + dp * pp_rank)))
// so the ranks of one tensor-parallel group are consecutive (on one node, on its fast links) and
// a pipeline stage is a contiguous block of tp*cp*ep*dp ranks.
//
// A group along one dimension holds the ranks that differ only in that coordinate; the group's
// members are listed in increasing coordinate, which is also increasing rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace meg {

enum class ParallelDim { tp, cp, ep, dp, pp };
const char* to_string(ParallelDim d);

struct RankCoords {
  int tp = 0, cp = 0, ep = 0, dp = 0, pp = 0;
  int operator[](ParallelDim d) const;
};

struct ParallelLayout {
  int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1;

  // The layout of a job of WORLD processes: tp, pp, cp, ep as given (each >= 1) and dp given or,
  // when not, WORLD / (tp * pp * cp * ep). InputError naming the sizes when the product does not
  // equal WORLD (or does not divide it, for the derived dp), or a size is below 1; for a WORLD of
  // one process, the InputError says to start the job under mpirun with the ranks it needs.
  static ParallelLayout resolve(int world, int tp, int pp, int cp = 1, int ep = 1, std::optional<int> dp = {});

  int world_size() const { return tp * cp * ep * dp * pp; }
  int size(ParallelDim d) const;
  RankCoords coords(int rank) const;
  int rank_of(const RankCoords& c) const;
  // The ranks of RANK's group along D, in increasing coordinate (RANK's own index is its coordinate).
  std::vector<int> group(int rank, ParallelDim d) const;

  nlohmann::ordered_json to_json() const;  // {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "ep": 1}
  bool operator==(const ParallelLayout&) const = default;
};

}  // namespace meg
