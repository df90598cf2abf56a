// Megatron's rank order, written once: everything else about groups (the communicators that
// World::set_layout splits, the shards layers own) derives from coords() and group().
#include "parallel/layout.hpp"

#include <array>
#include <stdexcept>

#include "core/error.hpp"

namespace meg {
namespace {

// The dimensions from fastest to slowest: the order of the rank formula in layout.hpp.
constexpr std::array<ParallelDim, 5> kOrder = {ParallelDim::tp, ParallelDim::cp, ParallelDim::ep, ParallelDim::dp,
                                               ParallelDim::pp};

// C's coordinate along D, for RankCoords and const RankCoords alike.
template <typename C>
auto& coord(C& c, ParallelDim d) {
  switch (d) {
    case ParallelDim::tp: return c.tp;
    case ParallelDim::cp: return c.cp;
    case ParallelDim::ep: return c.ep;
    case ParallelDim::dp: return c.dp;
    case ParallelDim::pp: return c.pp;
  }
  throw std::logic_error("bad ParallelDim");
}

}  // namespace

const char* to_string(ParallelDim d) {
  switch (d) {
    case ParallelDim::tp: return "tp";
    case ParallelDim::cp: return "cp";
    case ParallelDim::ep: return "ep";
    case ParallelDim::dp: return "dp";
    case ParallelDim::pp: return "pp";
  }
  return "?";
}

int RankCoords::operator[](ParallelDim d) const { return coord(*this, d); }

ParallelLayout ParallelLayout::resolve(int world, int tp, int pp, int cp, int ep, std::optional<int> dp) {
  if (world < 1) input_error("a job needs at least one process, not {}", world);
  const auto at_least_one = [](const char* name, int size) {
    if (size < 1) input_error("--{} {}: a parallel size must be at least 1", name, size);
  };
  at_least_one("tp", tp);
  at_least_one("pp", pp);
  at_least_one("cp", cp);
  at_least_one("ep", ep);
  if (dp) at_least_one("dp", *dp);
  const int64_t model = int64_t{tp} * pp * cp * ep;  // the processes of one model replica
  ParallelLayout l;
  l.tp = tp;
  l.pp = pp;
  l.cp = cp;
  l.ep = ep;
  // A layout of several ranks run as one process was most likely started without its launcher.
  if (const int64_t needed = model * dp.value_or(1); world == 1 && needed > 1)
    input_error("tp {} x pp {} x cp {} x ep {}{} = {} processes, but the job has 1: start it with mpirun -np {}", tp,
                pp, cp, ep, dp ? fmt::format(" x dp {}", *dp) : "", needed, needed);
  if (dp) {
    if (model * *dp != world)
      input_error("tp {} x pp {} x cp {} x ep {} x dp {} = {} processes, but the job has {}", tp, pp, cp, ep, *dp,
                  model * *dp, world);
    l.dp = *dp;
  } else {
    if (world % model != 0)
      input_error("tp {} x pp {} x cp {} x ep {} = {} does not divide the job's {} processes", tp, pp, cp, ep, model,
                  world);
    l.dp = static_cast<int>(world / model);
  }
  return l;
}

int ParallelLayout::size(ParallelDim d) const {
  switch (d) {
    case ParallelDim::tp: return tp;
    case ParallelDim::cp: return cp;
    case ParallelDim::ep: return ep;
    case ParallelDim::dp: return dp;
    case ParallelDim::pp: return pp;
  }
  throw std::logic_error("bad ParallelDim");
}

RankCoords ParallelLayout::coords(int rank) const {
  if (rank < 0 || rank >= world_size())
    throw std::out_of_range("rank " + std::to_string(rank) + " outside a layout of " +
                            std::to_string(world_size()) + " processes");
  RankCoords c;
  for (ParallelDim d : kOrder) {
    coord(c, d) = rank % size(d);
    rank /= size(d);
  }
  return c;
}

int ParallelLayout::rank_of(const RankCoords& c) const {
  int rank = 0;
  for (auto it = kOrder.rbegin(); it != kOrder.rend(); ++it) {
    if (c[*it] < 0 || c[*it] >= size(*it))
      throw std::out_of_range(std::string(to_string(*it)) + " coordinate " + std::to_string(c[*it]) +
                              " outside a size of " + std::to_string(size(*it)));
    rank = rank * size(*it) + c[*it];
  }
  return rank;
}

std::vector<int> ParallelLayout::group(int rank, ParallelDim d) const {
  RankCoords c = coords(rank);
  std::vector<int> ranks;
  ranks.reserve(static_cast<size_t>(size(d)));
  for (int i = 0; i < size(d); ++i) {
    coord(c, d) = i;
    ranks.push_back(rank_of(c));
  }
  return ranks;
}

nlohmann::ordered_json ParallelLayout::to_json() const {
  nlohmann::ordered_json j;
  j["tp"] = tp;
  j["pp"] = pp;
  j["dp"] = dp;
  j["cp"] = cp;
  j["ep"] = ep;
  return j;
}

}  // namespace meg
