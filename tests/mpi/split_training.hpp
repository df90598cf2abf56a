// What the multi-process model tests share: a model split over ranks trains as the same model in
// one process. Both take STEPS optimizer steps of two micro-batches of random tokens; each step's
// loss must agree within 1e-5 and its gradient norm within 1e-4 (relative: the split sums in
// another order).
#pragma once

#include <cmath>
#include <cstdint>

#include "catch.hpp"
#include "test_util.hpp"
#include "model/config.hpp"
#include "train/backend.hpp"

namespace meg::test {

inline void check_trains_as_one(TrainBackend& split, TrainBackend& whole, const ModelConfig& c, uint64_t steps) {
  const int B = 2, T = 8, micro_batches = 2;
  for (uint64_t step = 0; step < steps; ++step) {
    for (TrainBackend* b : {&split, &whole}) b->begin_step();
    for (uint64_t micro = 0; micro < uint64_t(micro_batches); ++micro) {
      const auto tokens = random_tokens(B * T, int(c.vocab_size), uint32_t(10 * step + micro));
      const auto targets = random_tokens(B * T, int(c.vocab_size), uint32_t(10 * step + micro + 5));
      for (TrainBackend* b : {&split, &whole})
        b->micro_batch(tokens.data(), targets.data(), B, T, 3, step, micro, micro_batches);
    }
    const StepStats s = split.end_step(1e-2, 1.0), o = whole.end_step(1e-2, 1.0);
    INFO("step " << step << ": loss " << s.loss << " vs " << o.loss << ", norm " << s.grad_norm << " vs "
                 << o.grad_norm);
    CHECK(std::abs(s.loss - o.loss) <= 1e-5 * o.loss);
    CHECK(std::abs(s.grad_norm - o.grad_norm) <= 1e-4 * o.grad_norm);
  }
}

}  // namespace meg::test
