#include "optim/grad_norm.hpp"

#include <algorithm>

namespace meg {

GradNormRanges grad_norm_ranges(const std::vector<ParamTensor>& tensors, bool tp_split, size_t begin, size_t end,
                                const std::function<bool(const ParamTensor&)>& skip) {
  GradNormRanges r;
  for (const auto& t : tensors) {
    const size_t b = std::max(t.offset, begin), e = std::min(t.offset + t.numel, end);
    if (b >= e || (skip && skip(t))) continue;
    const bool is_split = tp_split && t.tp.split != TpSplit::replicated;
    auto& list = is_split ? r.split : r.replicated;
    if (!list.empty() && list.back().end == b) list.back().end = e;
    else list.push_back({b, e});
  }
  return r;
}

double global_sum_squares(double split, double replicated, Comm* shards, Comm* tp, Comm* pp) {
  const auto several = [](const Comm* c) { return c && c->size() > 1; };
  double sums[2] = {split, replicated};
  if (several(shards)) shards->all_reduce_sum(sums, 2);
  if (several(tp)) tp->all_reduce_sum(sums, 1);
  double sum = sums[0] + sums[1];
  if (several(pp)) pp->all_reduce_sum(&sum, 1);
  return sum;
}

}  // namespace meg
