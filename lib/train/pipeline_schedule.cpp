#include "train/pipeline_schedule.hpp"

#include <algorithm>
#include <list>
#include <stdexcept>

#include <fmt/format.h>

namespace meg {

namespace {

// The pipeline's tags: 16 and above (the other messages on the group use lower ones), two per
// receiving chunk, so no activation is taken for a gradient or for another chunk's.
int forward_tag(int chunk) { return 16 + 2 * chunk; }
int backward_tag(int chunk) { return 17 + 2 * chunk; }

// A schedule's shape: WARMUP forwards, then one forward and one backward at a time, then the rest
// of the TOTAL backwards; STEP(k, forward) is forward or backward number k.
template <typename Step>
std::vector<PipelineStep> one_f_one_b_shape(int total, int warmup, Step step) {
  std::vector<PipelineStep> order;
  for (int k = 0; k < warmup; ++k) order.push_back(step(k, true));
  for (int k = 0; k < total - warmup; ++k) {
    order.push_back(step(k + warmup, true));
    order.push_back(step(k, false));
  }
  for (int k = total - warmup; k < total; ++k) order.push_back(step(k, false));
  return order;
}

}  // namespace

std::vector<PipelineStep> one_f_one_b_order(int stage, int stages, int micro_batches) {
  return one_f_one_b_shape(micro_batches, std::min(stages - stage - 1, micro_batches),
                           [](int k, bool forward) { return PipelineStep{forward, 0, k}; });
}

std::vector<PipelineStep> interleaved_order(int stage, int stages, int chunks, int micro_batches) {
  const int S = stages, V = chunks, M = micro_batches, total = M * V;
  if (M % S != 0)
    throw std::invalid_argument(
        fmt::format("interleaved schedule: {} micro-batches are not a multiple of the {} stages", M, S));
  // Megatron runs every forward first when there are as many micro-batches as stages.
  const int warmup = M == S ? total : std::min((S - stage - 1) * 2 + (V - 1) * S, total);
  return one_f_one_b_shape(total, warmup, [S, V](int k, bool forward) {
    const int chunk = k / S % V;
    return PipelineStep{forward, forward ? chunk : V - 1 - chunk, k / (S * V) * S + k % S};
  });
}

void run_pipeline_schedule(Comm& pp, int chunks, const std::vector<PipelineStep>& order, const StageOps& ops) {
  const int S = pp.size(), s = pp.rank(), next = (s + 1) % S, previous = (s + S - 1) % S;
  const size_t n = ops.message_floats;
  const int last = S * chunks - 1;  // the last virtual stage; chunk v here is virtual stage v S + s
  const auto chunk_of = [S](int virtual_stage) { return virtual_stage / S; };
  std::vector<float> message(n);  // the input or gradient received for the current step

  // The sends under way, each with its own copy of the data; finished ones make room.
  struct Outgoing {
    std::vector<float> data;
    CommRequest request;
  };
  std::list<Outgoing> outgoing;
  const auto send = [&](const float* data, int dest, int tag) {
    outgoing.remove_if([&](Outgoing& o) { return pp.done(o.request); });
    Outgoing& o = outgoing.emplace_back();
    o.data.assign(data, data + n);
    o.request = pp.isend(o.data.data(), n, dest, tag);
  };

  for (const PipelineStep& step : order) {
    const int j = step.chunk * S + s;
    if (step.forward) {
      if (j > 0) pp.recv(message.data(), n, previous, forward_tag(step.chunk));
      const float* out = ops.forward(step.chunk, step.micro, j > 0 ? message.data() : nullptr);
      if (j < last) send(out, next, forward_tag(chunk_of(j + 1)));
    } else {
      if (j < last) pp.recv(message.data(), n, next, backward_tag(step.chunk));
      const float* dx = ops.backward(step.chunk, step.micro, j < last ? message.data() : nullptr);
      if (j > 0) send(dx, previous, backward_tag(chunk_of(j - 1)));
    }
  }
  for (Outgoing& o : outgoing) pp.wait(o.request);
}

}  // namespace meg
