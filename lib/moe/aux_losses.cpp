// The router's auxiliary losses (see aux_losses.hpp).
#include "moe/aux_losses.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace meg {

namespace {

// The balancing scores s(x) [E] of one token's logits L, and their backward: DL += the gradient of
// L from DS, the gradient of s.
void balancing_scores(MoeScoreFunction f, const double* l, int E, double* s) {
  if (f == MoeScoreFunction::softmax) {
    const double m = *std::max_element(l, l + E);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += s[e] = std::exp(l[e] - m);
    for (int e = 0; e < E; ++e) s[e] /= sum;
    return;
  }
  double Z = 1e-20;
  for (int e = 0; e < E; ++e) Z += s[e] = 1.0 / (1.0 + std::exp(-l[e]));
  for (int e = 0; e < E; ++e) s[e] /= Z;
}

void balancing_scores_backward(MoeScoreFunction f, const double* l, const double* s, const double* ds, int E,
                               double* dl) {
  double dot = 0;
  for (int e = 0; e < E; ++e) dot += s[e] * ds[e];
  if (f == MoeScoreFunction::softmax) {
    for (int e = 0; e < E; ++e) dl[e] += s[e] * (ds[e] - dot);
    return;
  }
  // s = sig / Z: dsig_m = (ds_m - sum_i ds_i s_i) / Z, then through the sigmoid.
  double Z = 1e-20;
  for (int e = 0; e < E; ++e) Z += 1.0 / (1.0 + std::exp(-l[e]));
  for (int e = 0; e < E; ++e) {
    const double sig = 1.0 / (1.0 + std::exp(-l[e]));
    dl[e] += (ds[e] - dot) / Z * sig * (1 - sig);
  }
}

// Adds to COUNTS [E] the experts of the top-k of S [E] (ties to the lower expert).
void count_top_k(const double* s, int E, int K, double* counts) {
  std::vector<int> idx(static_cast<size_t>(E));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + K, idx.end(),
                    [&](int a, int b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
  for (int j = 0; j < K; ++j) counts[idx[size_t(j)]] += 1;
}

}  // namespace

double load_balancing_loss(const MoeConfig& moe, const double* logits, int64_t B, int64_t S, double* dlogits) {
  if (!moe.aux_loss_on()) return 0.0;
  const int E = int(moe.num_experts), K = int(moe.router_topk);
  const int64_t N = B * S;
  const bool per_sequence = moe.load_balancing == MoeLoadBalancing::seq_aux_loss;
  // Both losses are sum over (group, expert) of weight(group, expert) * sum_{x in group} s_e(x):
  // the groups are the sequences (seq_aux_loss) or the whole batch (aux_loss).
  const int64_t groups = per_sequence ? B : 1, per_group = per_sequence ? S : N;
  const double factor = per_sequence ? moe.aux_loss_coeff * E / (double(groups) * per_group * per_group * K)
                                     : moe.aux_loss_coeff * E / (double(K) * N * N);
  std::vector<double> s(static_cast<size_t>(N * E)), counts(static_cast<size_t>(E)), ds(static_cast<size_t>(E));
  double loss = 0;
  for (int64_t grp = 0; grp < groups; ++grp) {
    std::fill(counts.begin(), counts.end(), 0.0);
    const int64_t x0 = grp * per_group;
    for (int64_t x = x0; x < x0 + per_group; ++x) {
      balancing_scores(moe.score_function, logits + x * E, E, s.data() + x * E);
      count_top_k(s.data() + x * E, E, K, counts.data());
    }
    for (int64_t x = x0; x < x0 + per_group; ++x)
      for (int e = 0; e < E; ++e) loss += factor * counts[size_t(e)] * s[size_t(x * E + e)];
    if (!dlogits) continue;
    for (int e = 0; e < E; ++e) ds[size_t(e)] = factor * counts[size_t(e)];
    for (int64_t x = x0; x < x0 + per_group; ++x)
      balancing_scores_backward(moe.score_function, logits + x * E, s.data() + x * E, ds.data(), E,
                                dlogits + x * E);
  }
  return loss;
}

double z_loss(const MoeConfig& moe, const double* logits, int64_t N, double* dlogits) {
  if (!moe.z_loss_on()) return 0.0;
  const int E = int(moe.num_experts);
  double loss = 0;
  for (int64_t x = 0; x < N; ++x) {
    const double* l = logits + x * E;
    const double m = *std::max_element(l, l + E);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(l[e] - m);
    const double lse = m + std::log(sum);
    loss += lse * lse;
    if (dlogits)  // d lse^2 / dL_e = 2 lse softmax(L)_e
      for (int e = 0; e < E; ++e) dlogits[x * E + e] += moe.z_loss_coeff * 2 * lse * std::exp(l[e] - lse) / double(N);
  }
  return moe.z_loss_coeff * loss / double(N);
}

}  // namespace meg
