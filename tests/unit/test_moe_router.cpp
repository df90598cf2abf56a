// The MoE router, its auxiliary losses and the token dispatch against direct computations.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "catch.hpp"
#include "moe/aux_losses.hpp"
#include "moe/dispatch.hpp"
#include "moe/expert_bias.hpp"
#include "moe/router.hpp"

using namespace meg;

namespace {

std::vector<double> random_logits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, 1.5);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

MoeConfig moe_of(int E, int K, MoeScoreFunction f) {
  MoeConfig m;
  m.num_experts = E;
  m.router_topk = K;
  m.score_function = f;
  return m;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// The routing of one token the plain way: every subset's selection by sorting, no partial sorts.
void direct_route(const MoeConfig& m, const double* l, const double* bias, std::vector<int>& ex,
                  std::vector<double>& p) {
  const int E = int(m.num_experts), K = int(m.router_topk);
  std::vector<double> sel(static_cast<size_t>(E)), soft(static_cast<size_t>(E));
  double z = 0;
  for (int e = 0; e < E; ++e) z += std::exp(l[e]);
  for (int e = 0; e < E; ++e) soft[size_t(e)] = std::exp(l[e]) / z;
  for (int e = 0; e < E; ++e)
    sel[size_t(e)] = m.score_function == MoeScoreFunction::sigmoid ? sigmoid(l[e]) + (bias ? bias[e] : 0)
                     : m.router_pre_softmax                        ? soft[size_t(e)]
                                                                   : l[e];
  std::vector<int> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  if (m.router_num_groups > 0) {
    const int G = int(m.router_num_groups), per = E / G, kg = K / int(m.router_group_topk);
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < G; ++g) {
      std::vector<double> v(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::sort(v.rbegin(), v.rend());
      groups.push_back({std::accumulate(v.begin(), v.begin() + kg, 0.0), g});
    }
    std::sort(groups.begin(), groups.end(), [](auto a, auto b) { return a.first > b.first; });
    std::vector<char> keep(static_cast<size_t>(G), 0);
    for (int g = 0; g < m.router_group_topk; ++g) keep[size_t(groups[size_t(g)].second)] = 1;
    for (int e = 0; e < E; ++e)
      if (!keep[size_t(e / per)]) sel[size_t(e)] = -1e300;
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return sel[size_t(a)] > sel[size_t(b)]; });
  ex.assign(order.begin(), order.begin() + K);
  p.assign(size_t(K), 0);
  double sum = 0;
  for (int j = 0; j < K; ++j) {
    const int e = ex[size_t(j)];
    p[size_t(j)] = m.score_function == MoeScoreFunction::sigmoid ? sigmoid(l[e])
                   : m.router_pre_softmax                        ? soft[size_t(e)]
                                                                 : std::exp(l[e]);
    sum += p[size_t(j)];
  }
  const bool renormalise = m.score_function == MoeScoreFunction::softmax ? !m.router_pre_softmax : K > 1;
  for (auto& x : p) x = x / (renormalise ? sum : 1.0) * m.router_topk_scaling_factor.value_or(1.0);
}

void check_router(const MoeConfig& m, bool with_bias) {
  const int N = 37, E = int(m.num_experts), K = int(m.router_topk);
  const std::vector<double> logits = random_logits(static_cast<size_t>(N * E), 5);
  const std::vector<double> bias = random_logits(static_cast<size_t>(E), 6);
  std::vector<int32_t> ex(static_cast<size_t>(N * K));
  std::vector<double> p(static_cast<size_t>(N * K));
  route_forward(m, logits.data(), with_bias ? bias.data() : nullptr, N, ex.data(), p.data());
  for (int n = 0; n < N; ++n) {
    std::vector<int> dex;
    std::vector<double> dp;
    direct_route(m, logits.data() + n * E, with_bias ? bias.data() : nullptr, dex, dp);
    for (int j = 0; j < K; ++j) {
      CHECK(ex[size_t(n * K + j)] == dex[size_t(j)]);
      CHECK(p[size_t(n * K + j)] == Approx(dp[size_t(j)]).epsilon(1e-12));
    }
  }
  // The backward against central differences of sum_j w_j p_j (the choice held fixed: the logits
  // move by far less than the gaps between the chosen and the others).
  const std::vector<double> w = random_logits(static_cast<size_t>(N * K), 7);
  std::vector<double> dl(static_cast<size_t>(N * E), 0.0);
  route_backward(m, logits.data(), ex.data(), w.data(), N, dl.data());
  const double h = 1e-6;
  for (int i = 0; i < N * E; i += 7) {
    std::vector<double> lp = logits, lm = logits;
    lp[size_t(i)] += h;
    lm[size_t(i)] -= h;
    std::vector<int32_t> ep(static_cast<size_t>(N * K)), em(static_cast<size_t>(N * K));
    std::vector<double> pp(static_cast<size_t>(N * K)), pm(static_cast<size_t>(N * K));
    route_forward(m, lp.data(), with_bias ? bias.data() : nullptr, N, ep.data(), pp.data());
    route_forward(m, lm.data(), with_bias ? bias.data() : nullptr, N, em.data(), pm.data());
    if (ep != ex || em != ex) continue;  // a tie crossed
    double fd = 0;
    for (int j = 0; j < N * K; ++j) fd += w[size_t(j)] * (pp[size_t(j)] - pm[size_t(j)]) / (2 * h);
    CHECK(dl[size_t(i)] == Approx(fd).margin(1e-7));
  }
}

// The value of a loss function of the logits and its gradient against central differences.
template <typename Loss>
void check_loss_gradient(Loss loss, std::vector<double> logits) {
  std::vector<double> g(logits.size(), 0.0);
  loss(logits.data(), g.data());
  const double h = 1e-6;
  for (size_t i = 0; i < logits.size(); i += 5) {
    const double saved = logits[i];
    logits[i] = saved + h;
    const double up = loss(logits.data(), nullptr);
    logits[i] = saved - h;
    const double down = loss(logits.data(), nullptr);
    logits[i] = saved;
    CHECK(g[i] == Approx((up - down) / (2 * h)).margin(1e-8));
  }
}

}  // namespace

TEST_CASE("moe router: top-k routing against a direct computation", "[moe]") {
  SECTION("softmax after the top-k") { check_router(moe_of(8, 2, MoeScoreFunction::softmax), false); }
  SECTION("pre-softmax") {
    MoeConfig m = moe_of(8, 3, MoeScoreFunction::softmax);
    m.router_pre_softmax = true;
    check_router(m, false);
  }
  SECTION("pre-softmax top-1") {
    MoeConfig m = moe_of(6, 1, MoeScoreFunction::softmax);
    m.router_pre_softmax = true;
    check_router(m, false);
  }
  SECTION("sigmoid") { check_router(moe_of(8, 3, MoeScoreFunction::sigmoid), false); }
  SECTION("sigmoid top-1") { check_router(moe_of(8, 1, MoeScoreFunction::sigmoid), false); }
  SECTION("sigmoid with the expert bias") { check_router(moe_of(8, 2, MoeScoreFunction::sigmoid), true); }
  SECTION("scaling factor") {
    MoeConfig m = moe_of(8, 2, MoeScoreFunction::sigmoid);
    m.router_topk_scaling_factor = 2.5;
    check_router(m, false);
    m.score_function = MoeScoreFunction::softmax;
    check_router(m, false);
  }
  SECTION("group-limited") {
    for (const auto f : {MoeScoreFunction::softmax, MoeScoreFunction::sigmoid}) {
      MoeConfig m = moe_of(16, 4, f);
      m.router_num_groups = 4;
      m.router_group_topk = 2;
      check_router(m, f == MoeScoreFunction::sigmoid);
    }
  }
}

TEST_CASE("moe router: the expert bias shifts the choice, not the weights", "[moe]") {
  const MoeConfig m = moe_of(4, 1, MoeScoreFunction::sigmoid);
  const double logits[] = {2.0, 0.0, -1.0, 1.0};
  const double bias[] = {0.0, 0.0, 0.0, 0.5};  // expert 3: sigmoid 0.73 + 0.5 beats expert 0's 0.88
  int32_t ex = -1;
  double p = 0;
  route_forward(m, logits, bias, 1, &ex, &p);
  CHECK(ex == 3);
  CHECK(p == Approx(sigmoid(1.0)));

  float b[] = {0.f, 0.f, 0.f, 0.f};
  const double counts[] = {10, 2, 4, 4};  // mean 5
  update_expert_bias(b, counts, 4, 1e-3);
  CHECK(b[0] == Approx(-1e-3));
  CHECK(b[1] == Approx(1e-3));
  CHECK(b[2] == Approx(1e-3));
}

TEST_CASE("moe losses: aux_loss, seq_aux_loss and z_loss against their formulas", "[moe]") {
  const int B = 3, S = 5, N = B * S, E = 6, K = 2;
  const std::vector<double> logits = random_logits(static_cast<size_t>(N * E), 9);
  for (const auto f : {MoeScoreFunction::softmax, MoeScoreFunction::sigmoid}) {
    MoeConfig m = moe_of(E, K, f);
    m.aux_loss_coeff = 0.3;
    m.z_loss_coeff = 0.7;
    // Direct: the balancing scores and each token's top-k of them.
    std::vector<double> s(static_cast<size_t>(N * E));
    std::vector<std::vector<int>> top(static_cast<size_t>(N));
    for (int x = 0; x < N; ++x) {
      double z = f == MoeScoreFunction::sigmoid ? 1e-20 : 0;
      for (int e = 0; e < E; ++e) {
        const double l = logits[size_t(x * E + e)];
        z += s[size_t(x * E + e)] = f == MoeScoreFunction::softmax ? std::exp(l) : sigmoid(l);
      }
      for (int e = 0; e < E; ++e) s[size_t(x * E + e)] /= z;
      std::vector<int> order(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return s[size_t(x * E + a)] > s[size_t(x * E + b)]; });
      top[size_t(x)].assign(order.begin(), order.begin() + K);
    }
    const auto routed = [&](int x, int e) {
      return double(std::count(top[size_t(x)].begin(), top[size_t(x)].end(), e));
    };
    double aux = 0;
    for (int e = 0; e < E; ++e) {
      double P = 0, c = 0;
      for (int x = 0; x < N; ++x) P += s[size_t(x * E + e)], c += routed(x, e);
      aux += P * c;
    }
    aux *= m.aux_loss_coeff * E / (K * double(N) * N);
    CHECK(load_balancing_loss(m, logits.data(), B, S, nullptr) == Approx(aux).epsilon(1e-12));

    double seq = 0;
    for (int b = 0; b < B; ++b)
      for (int e = 0; e < E; ++e) {
        double P = 0, c = 0;
        for (int x = b * S; x < (b + 1) * S; ++x) P += s[size_t(x * E + e)] / S, c += routed(x, e);
        seq += c / (double(S) * K / E) * P;
      }
    seq *= m.aux_loss_coeff / B;
    m.load_balancing = MoeLoadBalancing::seq_aux_loss;
    CHECK(load_balancing_loss(m, logits.data(), B, S, nullptr) == Approx(seq).epsilon(1e-12));

    double z = 0;
    for (int x = 0; x < N; ++x) {
      double sum = 0;
      for (int e = 0; e < E; ++e) sum += std::exp(logits[size_t(x * E + e)]);
      z += std::log(sum) * std::log(sum);
    }
    CHECK(z_loss(m, logits.data(), N, nullptr) == Approx(m.z_loss_coeff * z / N).epsilon(1e-12));

    for (const auto type : {MoeLoadBalancing::aux_loss, MoeLoadBalancing::seq_aux_loss}) {
      m.load_balancing = type;
      check_loss_gradient([&](const double* l, double* g) { return load_balancing_loss(m, l, B, S, g); }, logits);
    }
    check_loss_gradient([&](const double* l, double* g) { return z_loss(m, l, N, g); }, logits);
    m.load_balancing = MoeLoadBalancing::none;
    CHECK(load_balancing_loss(m, logits.data(), B, S, nullptr) == 0.0);
  }
}

TEST_CASE("moe dispatch: capacity, drop policies and padding on hand cases", "[moe]") {
  // 4 tokens, 2 experts, top-1: tokens 0, 1, 3 to expert 0 (weights .6 .9 .8), token 2 to expert 1.
  MoeConfig m = moe_of(2, 1, MoeScoreFunction::softmax);
  const int32_t experts[] = {0, 0, 1, 0};
  const double probs[] = {0.6, 0.9, 0.7, 0.8};
  SECTION("dropless keeps every pair, grouped by expert") {
    const DispatchPlan p = plan_dispatch(m, experts, probs, 4);
    CHECK(p.expert_rows == std::vector<int64_t>{3, 1});
    CHECK(p.token == std::vector<int32_t>{0, 1, 3, 2});
    CHECK(p.slot == std::vector<int32_t>{0, 1, 3, 2});
  }
  m.expert_capacity_factor = 1.0;  // capacity ceil(4 * 1 / 2 * 1) = 2
  CHECK(expert_capacity(m, 4) == 2);
  SECTION("probs keeps the largest weights") {
    const DispatchPlan p = plan_dispatch(m, experts, probs, 4);
    CHECK(p.expert_rows == std::vector<int64_t>{2, 1});
    CHECK(p.token == std::vector<int32_t>{1, 3, 2});
  }
  SECTION("position keeps the earliest tokens") {
    m.token_drop_policy = MoeDropPolicy::position;
    const DispatchPlan p = plan_dispatch(m, experts, probs, 4);
    CHECK(p.token == std::vector<int32_t>{0, 1, 2});
  }
  SECTION("padding fills every expert to its capacity with weight 0") {
    m.pad_expert_input_to_capacity = true;
    const DispatchPlan p = plan_dispatch(m, experts, probs, 4);
    CHECK(p.expert_rows == std::vector<int64_t>{2, 2});
    CHECK(p.token == std::vector<int32_t>{1, 3, 0, 2});
    CHECK(p.slot == std::vector<int32_t>{1, 3, -1, 2});
    CHECK(p.prob == std::vector<double>{0.9, 0.8, 0.0, 0.7});
    CHECK(max_dispatch_rows(m, 4) >= p.rows());
  }
  SECTION("a capacity above the tokens drops nothing") {
    m.expert_capacity_factor = 4.0;
    CHECK(expert_capacity(m, 4) == 4);
    CHECK(plan_dispatch(m, experts, probs, 4).rows() == 4);
  }
  SECTION("permute and unpermute") {
    const DispatchPlan p = plan_dispatch(m, experts, probs, 4);
    const double x[] = {1, 10, 2, 20, 3, 30, 4, 40};
    double xp[6] = {}, back[8] = {};
    permute_rows(p, x, 2, xp);
    CHECK(std::vector<double>(xp, xp + 6) == std::vector<double>{2, 20, 4, 40, 3, 30});
    unpermute_rows(p, static_cast<const double*>(xp), 2, back);
    CHECK(std::vector<double>(back, back + 8) == std::vector<double>{0, 0, 2, 20, 3, 30, 4, 40});
  }
}
