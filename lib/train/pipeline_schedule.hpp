// The 1F1B pipeline schedule (PipeDream-flush, Megatron's default): each stage runs a few forwards
// to fill the pipeline, then alternates one forward and one backward, then drains the backwards.
// Stage s of S warms up with min(S - s - 1, M) forwards of its M micro-batches, so at most S - s
// micro-batches are in flight on it.
//
// Activations go forward and their gradients backward as float messages between neighbouring
// stages of the pipeline group. Where a stage both sends and receives in one step it does so in one
// exchange (Comm::send_recv), as Megatron batches its sends and receives, so no two neighbours can
// block each other.
#pragma once

#include <cstddef>
#include <functional>

#include "parallel/comm.hpp"

namespace meg {

struct StageOps {
  size_t message_floats = 0;  // the size of an activation (and of its gradient)
  // Forward of micro-batch MICRO from INPUT (the previous stage's output; null on the first stage);
  // returns this stage's output (ignored on the last stage).
  std::function<const float*(int micro, const float* input)> forward;
  // Backward of MICRO: INPUT as its forward had it, OUTPUT_GRAD the next stage's gradient (null on
  // the last stage); returns the gradient of INPUT (ignored on the first stage).
  std::function<const float*(int micro, const float* input, const float* output_grad)> backward;
};

// Runs the forwards and backwards of MICRO_BATCHES micro-batches on this rank's stage (its rank in
// PP, the pipeline group).
void run_one_f_one_b(Comm& pp, int micro_batches, const StageOps& ops);

}  // namespace meg
