// The router's top-k routing (see router.hpp).
#include "moe/router.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace meg {

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The K indices of the largest of SCORES [E] among those ALLOWED (null: all), largest first, ties
// to the lower index.
void top_k(const double* scores, const std::vector<char>* allowed, int E, int K, int32_t* out) {
  std::vector<int32_t> idx;
  for (int e = 0; e < E; ++e)
    if (!allowed || (*allowed)[size_t(e)]) idx.push_back(e);
  std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  std::copy_n(idx.begin(), K, out);
}

// The token's top-k of its selection scores SEL [E], group-limited when the config says so.
void select_experts(const MoeConfig& moe, const double* sel, int32_t* out) {
  const int E = int(moe.num_experts), K = int(moe.router_topk);
  if (moe.router_num_groups <= 0) return top_k(sel, nullptr, E, K, out);
  const int G = int(moe.router_num_groups), per = E / G, g = int(moe.router_group_topk), kg = K / g;
  std::vector<double> group_score(static_cast<size_t>(G), 0.0);
  std::vector<int32_t> best(static_cast<size_t>(kg));
  for (int grp = 0; grp < G; ++grp) {
    top_k(sel + grp * per, nullptr, per, kg, best.data());
    for (const int32_t e : best) group_score[size_t(grp)] += sel[grp * per + e];
  }
  std::vector<int32_t> groups(static_cast<size_t>(g));
  top_k(group_score.data(), nullptr, G, g, groups.data());
  std::vector<char> allowed(static_cast<size_t>(E), 0);
  for (const int32_t grp : groups) std::fill_n(allowed.begin() + grp * per, per, 1);
  top_k(sel, &allowed, E, K, out);
}

// softmax of the K values of X at IDX (or all E of X when IDX is null) into OUT.
void softmax_of(const double* x, const int32_t* idx, int K, double* out) {
  double m = -INFINITY;
  for (int j = 0; j < K; ++j) m = std::max(m, x[idx ? idx[j] : j]);
  double sum = 0;
  for (int j = 0; j < K; ++j) sum += out[j] = std::exp(x[idx ? idx[j] : j] - m);
  for (int j = 0; j < K; ++j) out[j] /= sum;
}

double scale_of(const MoeConfig& moe) { return moe.router_topk_scaling_factor.value_or(1.0); }

}  // namespace

void route_forward(const MoeConfig& moe, const double* logits, const double* bias, int64_t N, int32_t* experts,
                   double* probs) {
  const int E = int(moe.num_experts), K = int(moe.router_topk);
  const double scale = scale_of(moe);
  std::vector<double> sel(static_cast<size_t>(E)), q(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    const double* l = logits + n * E;
    int32_t* ex = experts + n * K;
    double* p = probs + n * K;
    if (moe.score_function == MoeScoreFunction::softmax) {
      if (moe.router_pre_softmax) {
        softmax_of(l, nullptr, E, q.data());
        select_experts(moe, q.data(), ex);
        for (int j = 0; j < K; ++j) p[j] = q[size_t(ex[j])];
      } else {
        select_experts(moe, l, ex);
        softmax_of(l, ex, K, p);
      }
    } else {
      for (int e = 0; e < E; ++e) sel[size_t(e)] = sigmoid(l[e]) + (bias ? bias[e] : 0.0);
      select_experts(moe, sel.data(), ex);
      double sum = 0;
      for (int j = 0; j < K; ++j) sum += p[j] = sigmoid(l[ex[j]]);
      if (K > 1)
        for (int j = 0; j < K; ++j) p[j] /= sum + 1e-20;
    }
    for (int j = 0; j < K; ++j) p[j] *= scale;
  }
}

void route_backward(const MoeConfig& moe, const double* logits, const int32_t* experts, const double* dprobs,
                    int64_t N, double* dlogits) {
  const int E = int(moe.num_experts), K = int(moe.router_topk);
  const double scale = scale_of(moe);
  std::vector<double> q(static_cast<size_t>(E)), g(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    const double* l = logits + n * E;
    const int32_t* ex = experts + n * K;
    double* dl = dlogits + n * E;
    for (int j = 0; j < K; ++j) g[size_t(j)] = scale * dprobs[n * K + j];  // the gradient of the unscaled p
    if (moe.score_function == MoeScoreFunction::softmax) {
      // Softmax over a set (the k chosen, or all E): dL_m = q_m (g_m - sum_i q_i g_i), g zero off S.
      if (moe.router_pre_softmax) {
        softmax_of(l, nullptr, E, q.data());
        double dot = 0;
        for (int j = 0; j < K; ++j) dot += q[size_t(ex[j])] * g[size_t(j)];
        for (int e = 0; e < E; ++e) dl[e] -= q[size_t(e)] * dot;
        for (int j = 0; j < K; ++j) dl[ex[j]] += q[size_t(ex[j])] * g[size_t(j)];
      } else {
        softmax_of(l, ex, K, q.data());
        double dot = 0;
        for (int j = 0; j < K; ++j) dot += q[size_t(j)] * g[size_t(j)];
        for (int j = 0; j < K; ++j) dl[ex[j]] += q[size_t(j)] * (g[size_t(j)] - dot);
      }
    } else {
      // p_j = s_j / Z, Z = sum_S s + 1e-20: ds_m = g_m / Z - sum_i g_i s_i / Z^2; dL = ds s (1 - s).
      std::vector<double> s(static_cast<size_t>(K));
      double Z = 1e-20, dot = 0;
      for (int j = 0; j < K; ++j) Z += s[size_t(j)] = sigmoid(l[ex[j]]);
      for (int j = 0; j < K; ++j) dot += g[size_t(j)] * s[size_t(j)];
      for (int j = 0; j < K; ++j) {
        const double sj = s[size_t(j)];
        const double ds = K > 1 ? g[size_t(j)] / Z - dot / (Z * Z) : g[size_t(j)];
        dl[ex[j]] += ds * sj * (1 - sj);
      }
    }
  }
}

}  // namespace meg
