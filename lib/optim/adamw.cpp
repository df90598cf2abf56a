#include "optim/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/error.hpp"
#include "ops/cpu/ops.hpp"

namespace meg {

AdamW::AdamW(size_t n, std::vector<ParamGroup> groups, const AdamWOptions& options)
    : options_(options), groups_(std::move(groups)), m_(n, 0.0f), v_(n, 0.0f) {
  if (groups_.empty()) groups_.push_back({0, n, true});
  std::vector<ParamGroup> sorted = groups_;
  std::sort(sorted.begin(), sorted.end(),
            [](const ParamGroup& a, const ParamGroup& b) { return a.begin < b.begin; });
  size_t next = 0;
  for (const auto& g : sorted) {
    if (g.begin > g.end || g.end > n)
      throw std::invalid_argument("AdamW: group [" + std::to_string(g.begin) + "," +
                                  std::to_string(g.end) + ") is not a range of the " +
                                  std::to_string(n) + " parameters");
    if (g.begin != next)
      throw std::invalid_argument("AdamW: the groups " +
                                  std::string(g.begin < next ? "overlap" : "leave a gap") +
                                  " at parameter " + std::to_string(std::min(g.begin, next)));
    next = g.end;
  }
  if (next != n)
    throw std::invalid_argument("AdamW: the groups end at parameter " + std::to_string(next) +
                                " of " + std::to_string(n));
}

void AdamW::step(std::span<float> params, std::span<const float> grads, double lr) {
  if (params.size() != m_.size() || grads.size() != m_.size())
    throw std::invalid_argument("AdamW::step: " + std::to_string(params.size()) +
                                " parameters and " + std::to_string(grads.size()) +
                                " gradients for an optimizer of " + std::to_string(m_.size()));
  ++step_;
  const auto& o = options_;
  for (const auto& g : groups_) {
    const size_t n = g.end - g.begin;
    if (n == 0) continue;
    cpu::adamw_step<float>(params.data() + g.begin, grads.data() + g.begin, m_.data() + g.begin,
                           v_.data() + g.begin, n, float(lr), float(o.beta1), float(o.beta2),
                           float(o.eps), g.weight_decay ? float(o.weight_decay) : 0.0f, step_);
  }
}

void AdamW::restore(std::span<const float> m, std::span<const float> v, int64_t step_count) {
  if (m.size() != m_.size() || v.size() != v_.size())
    input_error("optimizer state: {} first and {} second moments for {} parameters", m.size(),
                v.size(), m_.size());
  if (step_count < 0) input_error("optimizer state: negative step count {}", step_count);
  std::copy(m.begin(), m.end(), m_.begin());
  std::copy(v.begin(), v.end(), v_.begin());
  step_ = step_count;
}

double grad_norm(std::span<const float> grads) {
  return std::sqrt(cpu::grad_sum_squares(grads.data(), grads.size()));
}

Shard optimizer_shard(size_t n, int replicas, int replica) {
  const size_t d = static_cast<size_t>(replicas);
  const size_t size = (n + d - 1) / d;
  return {static_cast<size_t>(replica) * size, size};
}

std::vector<float> shard_of(const std::vector<float>& array, const Shard& shard) {
  std::vector<float> part(shard.size, 0.0f);
  for (size_t i = 0; i < shard.size && shard.begin + i < array.size(); ++i) part[i] = array[shard.begin + i];
  return part;
}

std::vector<ParamGroup> shard_groups(const std::vector<ParamGroup>& groups, size_t n, const Shard& shard) {
  const size_t lo = shard.begin, hi = shard.begin + shard.size;
  std::vector<ParamGroup> out;
  for (const auto& g : groups) {
    const size_t b = std::max(g.begin, lo), e = std::min(g.end, hi);
    if (b < e) out.push_back({b - lo, e - lo, g.weight_decay});
  }
  const size_t real_end = std::clamp(n, lo, hi);
  if (real_end < hi) out.push_back({real_end - lo, shard.size, false});
  return out;
}

bool clip_grads_to(std::span<float> grads, double norm, double max_norm) {
  if (!std::isfinite(norm) || max_norm <= 0 || !(norm > max_norm)) return false;
  cpu::scale_inplace(grads.data(), grads.size(), float(max_norm / (norm + 1e-6)));
  return true;
}

double clip_grad_norm(std::span<float> grads, double max_norm) {
  const double norm = grad_norm(grads);
  clip_grads_to(grads, norm, max_norm);
  return norm;
}

}  // namespace meg
