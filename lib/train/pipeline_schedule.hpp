// The pipeline schedules, as Megatron-Core runs them: which forwards and backwards a pipeline rank
// runs in which order (one_f_one_b_order, interleaved_order), and the loop that runs such an order
// and passes the activations and their gradients between the ranks (run_pipeline_schedule).
//
// 1F1B (PipeDream-flush, Megatron's default): rank s of S warms up with min(S - s - 1, M) forwards
// of its M micro-batches, then alternates one forward and one backward, then drains the backwards,
// so at most S - s micro-batches are in flight on it.
//
// Interleaved 1F1B (--virtual-stages V): each rank holds V model chunks, chunk v being virtual
// stage v S + s (model/pipeline.hpp). Forward number k runs chunk (k / S) % V on micro-batch
// (k / (S V)) S + k % S, so the micro-batches go through the chunks in groups of S; backward
// number k the same with the chunks in reverse. Rank s warms up with (S - s - 1) 2 + (V - 1) S
// forwards (at most M V; all of them when M == S), then 1F1B, then the cooldown's backwards. The
// pipeline bubble shrinks V times, for V times the messages. M must be a multiple of S.
//
// Messages: a chunk's output goes to the next rank, (s + 1) % S (rank S - 1's chunk v feeds rank
// 0's chunk v + 1), its input gradient to the previous one, tagged by the receiving chunk and the
// direction. Sends never block: each goes out non-blocking (Comm::isend) from its own buffer, and
// a rank receives an input or a gradient only when the step that needs it comes. So a rank waits
// only where Megatron's batched exchanges wait too (they also wait for the peer to take what they
// send, and receive earlier): the orders, which complete there, cannot deadlock here.
// (tests/unit/test_pipeline_schedule.cpp runs them all to the end for many shapes.)
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "parallel/comm.hpp"

namespace meg {

// One step of a rank's order: the forward or backward of micro-batch MICRO on model chunk CHUNK.
struct PipelineStep {
  bool forward = true;
  int chunk = 0;
  int micro = 0;
  bool operator==(const PipelineStep&) const = default;
};

// The order of rank STAGE of STAGES over MICRO_BATCHES micro-batches: 1F1B with one model chunk;
// interleaved with CHUNKS (std::invalid_argument unless MICRO_BATCHES is a multiple of STAGES).
std::vector<PipelineStep> one_f_one_b_order(int stage, int stages, int micro_batches);
std::vector<PipelineStep> interleaved_order(int stage, int stages, int chunks, int micro_batches);

// What a rank's model chunks do for the schedule.
struct StageOps {
  size_t message_floats = 0;  // the size of an activation (and of its gradient)
  // The forward of MICRO on CHUNK from INPUT (the previous virtual stage's output; null on the first
  // virtual stage); returns the chunk's output (ignored on the last virtual stage). The chunk keeps
  // what the backward of MICRO needs.
  std::function<const float*(int chunk, int micro, const float* input)> forward;
  // The backward of MICRO on CHUNK from OUTPUT_GRAD (the next virtual stage's gradient; null on the
  // last virtual stage); returns the gradient of the forward's input (ignored on the first).
  std::function<const float*(int chunk, int micro, const float* output_grad)> backward;
};

// Runs ORDER (this rank's, of a schedule above for CHUNKS chunks) on this rank of PP, the pipeline
// group. Every message sent has been received when it returns.
void run_pipeline_schedule(Comm& pp, int chunks, const std::vector<PipelineStep>& order, const StageOps& ops);

}  // namespace meg
