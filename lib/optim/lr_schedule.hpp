// Learning-rate schedule of Megatron's OptimizerParamScheduler, for iteration-counted training.
//
//   iteration i <= warmup_iters (warmup_iters > 0):  lr * i / warmup_iters   (linear from 0)
//   style constant:                                   lr after the warmup, for ever
//   i > decay_iters:                                  min_lr
//   linear:   min_lr + (lr - min_lr) * (1 - r)
//   cosine:   min_lr + (lr - min_lr) * 0.5 * (cos(pi * r) + 1)
//   inverse-square-root:  max(min_lr, lr * sqrt(max(warmup_iters,1)) / sqrt(max(i,1)))
// where r = (i - warmup_iters) / (decay_iters - warmup_iters) is the fraction of the decay done.
//
// The iteration counts optimizer steps already taken, as Megatron's num_steps does: the first step
// of a training run uses lr_at(0), which is 0 when there is a warmup, and the step after k steps
// uses lr_at(k). The decay iterations count from iteration 0 (they include the warmup), so the
// decay proper spans decay_iters - warmup_iters iterations; decay_iters 0 means "the whole run"
// (train_iters), Megatron's default for --lr-decay-iters.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace meg {

enum class LrDecayStyle { kConstant, kLinear, kCosine, kInverseSquareRoot };

// "constant", "linear", "cosine", "inverse-square-root"; anything else is an InputError naming
// --lr-decay.
LrDecayStyle parse_lr_decay_style(std::string_view name);
std::string_view lr_decay_style_name(LrDecayStyle style);

struct LrScheduleOptions {
  double lr = 0;               // --lr: the peak rate, reached at the end of the warmup
  double min_lr = 0;           // --min-lr: the floor of the decay, kept after it ends
  int64_t warmup_iters = 0;    // --warmup-iters
  int64_t decay_iters = 0;     // --lr-decay-iters; 0 takes train_iters
  int64_t train_iters = 0;     // the length of the run, the default of decay_iters
  LrDecayStyle style = LrDecayStyle::kLinear;  // --lr-decay
};

class LrSchedule {
 public:
  // Checks the options (InputError naming the option on a bad one) and resolves decay_iters.
  explicit LrSchedule(const LrScheduleOptions& options);

  // The learning rate after `iteration` optimizer steps (iteration >= 0).
  double lr_at(int64_t iteration) const;

  const LrScheduleOptions& options() const { return options_; }

 private:
  LrScheduleOptions options_;
};

// One-shot form: lr_at(options, i) == LrSchedule(options).lr_at(i).
double lr_at(const LrScheduleOptions& options, int64_t iteration);

}  // namespace meg
