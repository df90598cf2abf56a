#include "train/pipeline_schedule.hpp"

#include <algorithm>
#include <vector>

namespace meg {

namespace {
constexpr int kForwardTag = 1;   // activations, to the next stage
constexpr int kBackwardTag = 2;  // their gradients, to the previous stage
}  // namespace

void run_one_f_one_b(Comm& pp, int micro_batches, const StageOps& ops) {
  const int stage = pp.rank(), stages = pp.size(), M = micro_batches;
  const bool first = stage == 0, last = stage == stages - 1;
  const size_t n = ops.message_floats;
  // The inputs of the micro-batches in flight (kept for their backward), and a gradient buffer.
  std::vector<std::vector<float>> inputs(static_cast<size_t>(M));
  std::vector<float> grad(last ? 0 : n);
  auto input = [&](int i) { return first ? nullptr : inputs[size_t(i)].data(); };
  auto receive_input = [&](int i) {
    if (first) return;
    inputs[size_t(i)].resize(n);
    pp.recv(inputs[size_t(i)].data(), n, stage - 1, kForwardTag);
  };

  const int warmup = std::min(stages - stage - 1, M);
  for (int i = 0; i < warmup; ++i) {
    receive_input(i);
    const float* out = ops.forward(i, input(i));
    if (!last) pp.send(out, n, stage + 1, kForwardTag);
  }
  if (warmup < M) receive_input(warmup);
  for (int i = 0; i < M - warmup; ++i) {  // steady state: forward of i + warmup, backward of i
    const int f = i + warmup;
    const float* out = ops.forward(f, input(f));
    if (!last) pp.send_recv(out, n, stage + 1, kForwardTag, grad.data(), n, stage + 1, kBackwardTag);
    const float* dx = ops.backward(i, input(i), last ? nullptr : grad.data());
    inputs[size_t(i)].clear();  // no longer needed: its backward is done
    if (first) continue;
    if (f + 1 < M) {  // pass the gradient back and take the next input in one exchange
      inputs[size_t(f + 1)].resize(n);
      pp.send_recv(dx, n, stage - 1, kBackwardTag, inputs[size_t(f + 1)].data(), n, stage - 1, kForwardTag);
    } else {
      pp.send(dx, n, stage - 1, kBackwardTag);
    }
  }
  for (int i = M - warmup; i < M; ++i) {  // cooldown: the warm-up's backwards
    if (!last) pp.recv(grad.data(), n, stage + 1, kBackwardTag);
    const float* dx = ops.backward(i, input(i), last ? nullptr : grad.data());
    inputs[size_t(i)].clear();
    if (!first) pp.send(dx, n, stage - 1, kBackwardTag);
  }
}

}  // namespace meg
