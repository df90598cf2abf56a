#include "optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "core/error.hpp"

namespace meg {

LrDecayStyle parse_lr_decay_style(std::string_view name) {
  if (name == "constant") return LrDecayStyle::kConstant;
  if (name == "linear") return LrDecayStyle::kLinear;
  if (name == "cosine") return LrDecayStyle::kCosine;
  if (name == "inverse-square-root") return LrDecayStyle::kInverseSquareRoot;
  input_error("--lr-decay: unknown style '{}' (constant, linear, cosine or inverse-square-root)",
              name);
}

std::string_view lr_decay_style_name(LrDecayStyle style) {
  switch (style) {
    case LrDecayStyle::kConstant: return "constant";
    case LrDecayStyle::kLinear: return "linear";
    case LrDecayStyle::kCosine: return "cosine";
    case LrDecayStyle::kInverseSquareRoot: return "inverse-square-root";
  }
  input_error("--lr-decay: unknown style {}", static_cast<int>(style));
}

LrSchedule::LrSchedule(const LrScheduleOptions& options) : options_(options) {
  auto& o = options_;
  lr_decay_style_name(o.style);  // rejects a value outside the enum
  if (!(o.lr >= 0) || !std::isfinite(o.lr)) input_error("--lr: {} is not a rate >= 0", o.lr);
  if (!(o.min_lr >= 0) || !std::isfinite(o.min_lr))
    input_error("--min-lr: {} is not a rate >= 0", o.min_lr);
  if (o.min_lr > o.lr) input_error("--min-lr: {} is above --lr {}", o.min_lr, o.lr);
  if (o.warmup_iters < 0) input_error("--warmup-iters: {} is negative", o.warmup_iters);
  if (o.decay_iters < 0) input_error("--lr-decay-iters: {} is negative", o.decay_iters);
  if (o.decay_iters == 0) o.decay_iters = o.train_iters;
  // A constant rate never decays, so its decay length does not matter.
  if (o.style != LrDecayStyle::kConstant && o.warmup_iters >= o.decay_iters)
    input_error("--warmup-iters: {} warmup iterations leave no decay before iteration {} "
                "(--lr-decay-iters, or the training iterations)",
                o.warmup_iters, o.decay_iters);
}

double LrSchedule::lr_at(int64_t iteration) const {
  const auto& o = options_;
  if (iteration < 0) throw std::invalid_argument("LrSchedule::lr_at: negative iteration");
  if (o.warmup_iters > 0 && iteration <= o.warmup_iters)
    return o.lr * double(iteration) / double(o.warmup_iters);
  if (o.style == LrDecayStyle::kConstant) return o.lr;
  if (iteration > o.decay_iters) return o.min_lr;
  if (o.style == LrDecayStyle::kInverseSquareRoot) {
    const double w = double(std::max<int64_t>(o.warmup_iters, 1));
    const double i = double(std::max<int64_t>(iteration, 1));
    return std::max(o.min_lr, o.lr * std::sqrt(w) / std::sqrt(i));
  }
  const double ratio =
      double(iteration - o.warmup_iters) / double(o.decay_iters - o.warmup_iters);
  const double coeff = o.style == LrDecayStyle::kLinear
                           ? 1.0 - ratio
                           : 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
  return o.min_lr + coeff * (o.lr - o.min_lr);
}

double lr_at(const LrScheduleOptions& options, int64_t iteration) {
  return LrSchedule(options).lr_at(iteration);
}

}  // namespace meg
