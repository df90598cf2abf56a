// The token dispatch (see dispatch.hpp).
#include "moe/dispatch.hpp"

#include <algorithm>
#include <cmath>

namespace meg {

int64_t expert_capacity(const MoeConfig& moe, int64_t N) {
  if (!moe.expert_capacity_factor) return N;
  const double per_expert = double(N * moe.router_topk) / double(moe.num_experts);
  return std::min<int64_t>(N, int64_t(std::ceil(per_expert * *moe.expert_capacity_factor)));
}

int64_t max_dispatch_rows(const MoeConfig& moe, int64_t N) {
  const int64_t routed = N * moe.router_topk;
  return moe.pad_expert_input_to_capacity ? std::max(routed, moe.num_experts * expert_capacity(moe, N)) : routed;
}

DispatchPlan plan_dispatch(const MoeConfig& moe, const int32_t* experts, const double* probs, int64_t N) {
  const int64_t E = moe.num_experts, K = moe.router_topk, cap = expert_capacity(moe, N);
  // Each expert's routed slots, by token.
  std::vector<std::vector<int32_t>> routed(static_cast<size_t>(E));
  for (int64_t s = 0; s < N * K; ++s) routed[size_t(experts[s])].push_back(int32_t(s));
  DispatchPlan plan;
  plan.expert_rows.assign(size_t(E), 0);
  std::vector<int32_t> kept;
  std::vector<int32_t> slot_of(static_cast<size_t>(N));  // this expert's slot of each token, or -1
  for (int64_t e = 0; e < E; ++e) {
    kept = routed[size_t(e)];
    if (int64_t(kept.size()) > cap) {
      if (moe.token_drop_policy == MoeDropPolicy::probs)
        std::stable_sort(kept.begin(), kept.end(), [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
      kept.resize(size_t(cap));
    }
    std::fill(slot_of.begin(), slot_of.end(), -1);
    for (const int32_t s : kept) slot_of[size_t(s / K)] = s;
    int64_t pad = moe.pad_expert_input_to_capacity ? cap - int64_t(kept.size()) : 0;
    for (int64_t n = 0; n < N; ++n) {
      const int32_t s = slot_of[size_t(n)];
      if (s < 0 && pad <= 0) continue;
      if (s < 0) --pad;
      plan.token.push_back(int32_t(n));
      plan.slot.push_back(s);
      plan.prob.push_back(s < 0 ? 0.0 : probs[s]);
      ++plan.expert_rows[size_t(e)];
    }
  }
  return plan;
}

template <typename F>
void permute_rows(const DispatchPlan& plan, const F* x, int64_t C, F* out) {
  for (int64_t r = 0; r < plan.rows(); ++r) std::copy_n(x + plan.token[size_t(r)] * C, C, out + r * C);
}

template <typename F>
void unpermute_rows(const DispatchPlan& plan, const F* y, int64_t C, F* out) {
  for (int64_t r = 0; r < plan.rows(); ++r) {
    F* o = out + plan.token[size_t(r)] * C;
    const F* row = y + r * C;
    for (int64_t c = 0; c < C; ++c) o[c] += row[c];
  }
}

#define MEG_DISPATCH(F)                                                            \
  template void permute_rows<F>(const DispatchPlan&, const F*, int64_t, F*); \
  template void unpermute_rows<F>(const DispatchPlan&, const F*, int64_t, F*);
MEG_DISPATCH(float)
MEG_DISPATCH(double)
#undef MEG_DISPATCH

}  // namespace meg
