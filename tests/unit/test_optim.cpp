// The optimizer: the learning-rate schedule against hand-computed values, AdamW against
// torch.optim.AdamW's formula, gradient clipping, and resuming from saved state.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "catch.hpp"
#include "core/error.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

namespace {

// lr 1, min_lr 0.1, 10 warmup iterations, 110 iterations in all: the decay proper runs over
// iterations 10..110, so iteration 10 + 100 r is a fraction r of the way through it.
LrScheduleOptions sched(LrDecayStyle style) {
  LrScheduleOptions o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_iters = 10;
  o.train_iters = 110;
  o.style = style;
  return o;
}

void check_warmup(const LrSchedule& s) {
  CHECK(s.lr_at(0) == 0.0);
  CHECK_THAT(s.lr_at(1), WithinAbs(0.1, 1e-15));
  CHECK_THAT(s.lr_at(5), WithinAbs(0.5, 1e-15));
  CHECK(s.lr_at(10) == 1.0);
}

}  // namespace

TEST_CASE("Learning-rate schedule: linear", "[optim]") {
  LrSchedule s(sched(LrDecayStyle::kLinear));
  check_warmup(s);
  CHECK_THAT(s.lr_at(35), WithinAbs(0.1 + 0.9 * 0.75, 1e-15));  // r = 1/4
  CHECK_THAT(s.lr_at(60), WithinAbs(0.55, 1e-15));              // r = 1/2
  CHECK_THAT(s.lr_at(109), WithinAbs(0.109, 1e-15));            // r = 99/100
  CHECK_THAT(s.lr_at(110), WithinAbs(0.1, 1e-15));              // end of the decay
  CHECK(s.lr_at(111) == 0.1);                                   // after it: min_lr
  CHECK(s.lr_at(100000) == 0.1);
  CHECK(s.options().decay_iters == 110);  // defaulted to the training iterations
}

TEST_CASE("Learning-rate schedule: cosine", "[optim]") {
  LrSchedule s(sched(LrDecayStyle::kCosine));
  check_warmup(s);
  // 0.1 + 0.9 * (cos(pi r) + 1) / 2
  CHECK_THAT(s.lr_at(35), WithinAbs(0.1 + 0.9 * (std::sqrt(0.5) + 1) / 2, 1e-15));  // r = 1/4
  CHECK_THAT(s.lr_at(60), WithinAbs(0.55, 1e-15));                                  // r = 1/2
  CHECK_THAT(s.lr_at(85), WithinAbs(0.1 + 0.9 * (1 - std::sqrt(0.5)) / 2, 1e-15));  // r = 3/4
  CHECK_THAT(s.lr_at(110), WithinAbs(0.1, 1e-15));
  CHECK(s.lr_at(111) == 0.1);
}

TEST_CASE("Learning-rate schedule: constant", "[optim]") {
  LrSchedule s(sched(LrDecayStyle::kConstant));
  check_warmup(s);
  CHECK(s.lr_at(11) == 1.0);
  CHECK(s.lr_at(60) == 1.0);
  CHECK(s.lr_at(110) == 1.0);
  CHECK(s.lr_at(111) == 1.0);  // a constant rate never drops to min_lr
  // Without a warmup it is constant from the start, whatever the decay length.
  auto o = sched(LrDecayStyle::kConstant);
  o.warmup_iters = 0;
  o.train_iters = 0;
  CHECK(lr_at(o, 0) == 1.0);
  CHECK(lr_at(o, 7) == 1.0);
}

TEST_CASE("Learning-rate schedule: inverse square root", "[optim]") {
  LrSchedule s(sched(LrDecayStyle::kInverseSquareRoot));
  check_warmup(s);
  CHECK_THAT(s.lr_at(40), WithinAbs(0.5, 1e-15));                // sqrt(10 / 40)
  CHECK_THAT(s.lr_at(100), WithinAbs(std::sqrt(0.1), 1e-15));    // sqrt(10 / 100)
  CHECK(s.lr_at(111) == 0.1);
  auto o = sched(LrDecayStyle::kInverseSquareRoot);
  o.min_lr = 0.4;
  CHECK(lr_at(o, 90) == 0.4);  // sqrt(10 / 90) = 0.333 is below the floor
}

TEST_CASE("Learning-rate schedule: explicit decay length and no warmup", "[optim]") {
  auto o = sched(LrDecayStyle::kLinear);
  o.decay_iters = 60;  // decay over iterations 10..60 of the 110
  CHECK_THAT(lr_at(o, 35), WithinAbs(0.55, 1e-15));
  CHECK_THAT(lr_at(o, 60), WithinAbs(0.1, 1e-15));
  CHECK(lr_at(o, 61) == 0.1);
  CHECK(lr_at(o, 110) == 0.1);
  o.warmup_iters = 0;  // decay over 0..60, starting at the full rate
  CHECK(lr_at(o, 0) == 1.0);
  CHECK_THAT(lr_at(o, 30), WithinAbs(0.55, 1e-15));
}

TEST_CASE("Learning-rate schedule: bad options", "[optim]") {
  auto o = sched(LrDecayStyle::kLinear);
  o.min_lr = 2.0;
  CHECK_THAT(input_error_of([&] { LrSchedule{o}; }), ContainsSubstring("--min-lr"));
  o = sched(LrDecayStyle::kLinear);
  o.lr = -1;
  CHECK_THAT(input_error_of([&] { LrSchedule{o}; }), ContainsSubstring("--lr"));
  o = sched(LrDecayStyle::kCosine);
  o.warmup_iters = 110;
  CHECK_THAT(input_error_of([&] { LrSchedule{o}; }), ContainsSubstring("--warmup-iters"));
  o.warmup_iters = 200;
  CHECK_THAT(input_error_of([&] { LrSchedule{o}; }), ContainsSubstring("--warmup-iters"));
  o = sched(LrDecayStyle::kLinear);
  o.warmup_iters = -1;
  CHECK_THAT(input_error_of([&] { LrSchedule{o}; }), ContainsSubstring("--warmup-iters"));
  o = sched(LrDecayStyle::kLinear);
  o.decay_iters = -5;
  CHECK_THAT(input_error_of([&] { LrSchedule{o}; }), ContainsSubstring("--lr-decay-iters"));
  CHECK_THAT(input_error_of([] { parse_lr_decay_style("exponential"); }),
             ContainsSubstring("--lr-decay"));
  for (auto style : {LrDecayStyle::kConstant, LrDecayStyle::kLinear, LrDecayStyle::kCosine,
                     LrDecayStyle::kInverseSquareRoot})
    CHECK(parse_lr_decay_style(lr_decay_style_name(style)) == style);
}

TEST_CASE("AdamW: one step matches torch.optim.AdamW", "[optim]") {
  // First step, t = 1: m = 0.1 g, v = 0.001 g^2, so the bias-corrected m/(1-beta1) = g and
  // v/(1-beta2) = g^2, and torch's update is
  //   p = p (1 - lr wd) - lr g / (|g| + eps).
  // lr 0.1, wd 0.1, eps 1e-8:
  //   p  1.0, g  0.5:  0.99 - 0.1 * 0.5 / (0.5 + 1e-8)  =  0.890000002
  //   p -2.0, g -0.1: -1.98 + 0.1 * 0.1 / (0.1 + 1e-8)  = -1.88000001
  //   p  0.5, g  2.0:  0.495 - 0.1 * 2 / (2 + 1e-8)     =  0.3950000005
  // Without decay the first factor is 1: 0.900000002, -1.90000001, 0.4000000005.
  const std::vector<float> p0 = {1.0f, -2.0f, 0.5f};
  const std::vector<float> g = {0.5f, -0.1f, 2.0f};
  AdamWOptions opt;
  opt.beta1 = 0.9;
  opt.beta2 = 0.999;
  opt.eps = 1e-8;
  opt.weight_decay = 0.1;

  SECTION("with weight decay") {
    AdamW adam(3, opt);
    auto p = p0;
    adam.step(p, g, 0.1);
    CHECK(adam.step_count() == 1);
    CHECK_THAT(p[0], WithinRel(0.890000002, 1e-6));
    CHECK_THAT(p[1], WithinRel(-1.88000001, 1e-6));
    CHECK_THAT(p[2], WithinRel(0.3950000005, 1e-6));
    CHECK_THAT(adam.m()[0], WithinRel(0.05, 1e-6));
    // The moments are within float rounding of the beta values themselves: cpu::adamw_step takes
    // beta2 as a float, and 1 - 0.999f is 0.001 to only 1.3e-5 (the bias correction uses the same
    // beta2, so the update itself is not affected at the first step).
    CHECK_THAT(adam.v()[2], WithinRel(0.004, 2e-5));

    // Second step with other gradients: m = 0.9 m + 0.1 g', v = 0.999 v + 0.001 g'^2,
    //   p = p (1 - lr wd) - lr (m / (1 - 0.9^2)) / (sqrt(v / (1 - 0.999^2)) + eps).
    // Computed in double from that formula (torch.optim.AdamW's, decay first):
    //   0.8544662986878463, -1.9106189910200655, 0.2978320372035104.
    const std::vector<float> g2 = {-0.25f, 0.3f, 1.0f};
    adam.step(p, g2, 0.1);
    CHECK(adam.step_count() == 2);
    CHECK_THAT(p[0], WithinRel(0.8544662986878463, 1e-6));
    CHECK_THAT(p[1], WithinRel(-1.9106189910200655, 1e-6));
    CHECK_THAT(p[2], WithinRel(0.2978320372035104, 1e-6));
  }

  SECTION("without weight decay") {
    opt.weight_decay = 0;
    AdamW adam(3, opt);
    auto p = p0;
    adam.step(p, g, 0.1);
    CHECK_THAT(p[0], WithinRel(0.900000002, 1e-6));
    CHECK_THAT(p[1], WithinRel(-1.90000001, 1e-6));
    CHECK_THAT(p[2], WithinRel(0.4000000005, 1e-6));
  }

  SECTION("a group without decay is untouched by it") {
    // Parameters 0 and 2 decay, parameter 1 (a "bias") does not; groups given out of order.
    AdamW adam(3, {{1, 2, false}, {2, 3, true}, {0, 1, true}}, opt);
    auto p = p0;
    adam.step(p, g, 0.1);
    CHECK_THAT(p[0], WithinRel(0.890000002, 1e-6));
    CHECK_THAT(p[1], WithinRel(-1.90000001, 1e-6));  // the no-decay value
    CHECK_THAT(p[2], WithinRel(0.3950000005, 1e-6));
    // With zero gradients and zero moments the Adam part is 0: only decay moves a parameter.
    AdamW adam2(3, {{0, 2, false}, {2, 3, true}}, opt);
    auto q = p0;
    const std::vector<float> zero(3, 0.0f);
    adam2.step(q, zero, 0.1);
    CHECK(q[0] == p0[0]);
    CHECK(q[1] == p0[1]);
    CHECK_THAT(q[2], WithinRel(0.5 * 0.99, 1e-6));
  }
}

TEST_CASE("AdamW: groups must tile the parameters", "[optim]") {
  CHECK_NOTHROW(AdamW(4, {{0, 0, true}, {0, 4, true}}));
  CHECK_THROWS_AS(AdamW(4, {{0, 2, true}, {3, 4, true}}), std::invalid_argument);  // gap
  CHECK_THROWS_AS(AdamW(4, {{0, 3, true}, {2, 4, true}}), std::invalid_argument);  // overlap
  CHECK_THROWS_AS(AdamW(4, {{0, 3, true}}), std::invalid_argument);                // short
  CHECK_THROWS_AS(AdamW(4, {{0, 5, true}}), std::invalid_argument);                // past n
  AdamW adam(4);
  std::vector<float> p(3), g(4);
  CHECK_THROWS_AS(adam.step(p, g, 0.1), std::invalid_argument);
}

TEST_CASE("Gradient clipping", "[optim]") {
  SECTION("above the maximum: scaled to it") {
    std::vector<float> g = {3.0f, 4.0f};  // norm 5
    const double norm = clip_grad_norm(g, 1.0);
    CHECK(norm == 5.0);
    CHECK_THAT(g[0], WithinRel(3.0 / (5.0 + 1e-6), 1e-6));
    CHECK_THAT(g[1], WithinRel(4.0 / (5.0 + 1e-6), 1e-6));
    CHECK_THAT(grad_norm(g), WithinRel(1.0, 1e-6));
  }
  SECTION("at or below the maximum: untouched") {
    std::vector<float> g = {3.0f, 4.0f};
    CHECK(clip_grad_norm(g, 5.0) == 5.0);
    CHECK(clip_grad_norm(g, 10.0) == 5.0);
    CHECK(g == std::vector<float>{3.0f, 4.0f});
  }
  SECTION("max_norm 0 disables clipping") {
    std::vector<float> g = {3.0f, 4.0f};
    CHECK(clip_grad_norm(g, 0.0) == 5.0);
    CHECK(g == std::vector<float>{3.0f, 4.0f});
  }
  SECTION("the norm is summed in double") {
    // 1e6 values of (float) 1e-3 plus one of 1: about 2 in all. A float sum of a million terms
    // would be off by far more than this tolerance.
    std::vector<float> g(1000000, 1e-3f);
    g.push_back(1.0f);
    double expect = 1.0;
    for (size_t i = 0; i + 1 < g.size(); ++i) expect += double(g[i]) * double(g[i]);
    CHECK_THAT(grad_norm(g), WithinRel(std::sqrt(expect), 1e-10));
  }
  SECTION("a non-finite norm is reported, not applied") {
    std::vector<float> g = {3.0f, std::numeric_limits<float>::infinity(), 4.0f};
    const double norm = clip_grad_norm(g, 1.0);
    CHECK(std::isinf(norm));
    CHECK(g[0] == 3.0f);
    CHECK(g[2] == 4.0f);
    g[1] = std::numeric_limits<float>::quiet_NaN();
    CHECK(std::isnan(clip_grad_norm(g, 1.0)));
    CHECK(g[0] == 3.0f);
    CHECK_FALSE(clip_grads_to(g, std::numeric_limits<double>::quiet_NaN(), 1.0));
  }
}

TEST_CASE("AdamW: saved and restored state continues bit-identically", "[optim]") {
  const size_t n = 257;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> p0(n);
  for (auto& x : p0) x = dist(rng);
  std::vector<std::vector<float>> grads(5, std::vector<float>(n));
  for (auto& gs : grads)
    for (auto& x : gs) x = dist(rng);
  const std::vector<ParamGroup> groups = {{0, 200, true}, {200, 257, false}};
  AdamWOptions opt;
  opt.weight_decay = 0.1;
  auto lr = [](int i) { return 1e-3 * (i + 1); };

  AdamW a(n, groups, opt);
  auto pa = p0;
  for (int i = 0; i < 5; ++i) a.step(pa, grads[i], lr(i));

  AdamW b(n, groups, opt);
  auto pb = p0;
  for (int i = 0; i < 2; ++i) b.step(pb, grads[i], lr(i));
  // Save through plain copies, as a checkpoint would.
  const std::vector<float> m(b.m().begin(), b.m().end()), v(b.v().begin(), b.v().end());
  const int64_t steps = b.step_count();
  CHECK(steps == 2);

  AdamW c(n, groups, opt);
  c.restore(m, v, steps);
  for (int i = 2; i < 5; ++i) c.step(pb, grads[i], lr(i));

  CHECK(c.step_count() == 5);
  CHECK(std::memcmp(pa.data(), pb.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(a.m().data(), c.m().data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(a.v().data(), c.v().data(), n * sizeof(float)) == 0);
}

TEST_CASE("AdamW: restore checks sizes", "[optim]") {
  AdamW adam(4);
  const std::vector<float> four(4), three(3);
  CHECK_THAT(input_error_of([&] { adam.restore(three, four, 1); }),
             ContainsSubstring("moments for 4 parameters"));
  CHECK_THAT(input_error_of([&] { adam.restore(four, three, 1); }),
             ContainsSubstring("moments for 4 parameters"));
  CHECK_THAT(input_error_of([&] { adam.restore(four, four, -1); }),
             ContainsSubstring("negative step count"));
  CHECK(adam.step_count() == 0);
  adam.restore(four, four, 7);
  CHECK(adam.step_count() == 7);
}
