#include "eval/cpu_scorer.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/parallel.hpp"

namespace meg {

CpuScorer::CpuScorer(const CheckpointModel& checkpoint, int max_batch)
    : model_(checkpoint.config), max_batch_(max_batch) {
  if (max_batch < 1) input_error("--batch must be at least 1, got {}", max_batch);
  if (checkpoint.params.size() != model_.num_parameters())
    input_error("{}: {} parameters, the model needs {}", checkpoint.path, checkpoint.params.size(),
                model_.num_parameters());
  std::copy(checkpoint.params.begin(), checkpoint.params.end(), model_.params());
  model_.set_training(false);
}

void CpuScorer::score(const int32_t* tokens, const int32_t* targets, int B, int T, TokenScore* out) {
  if (B < 1 || B > max_batch_ || T < 1 || T > max_length())
    input_error("score: a batch of {} x {} tokens; at most {} x {}", B, T, max_batch_, max_length());
  const int64_t V = config().vocab_size, Vp = config().padded_vocab_size;
  const size_t N = size_t(B) * size_t(T);
  for (size_t i = 0; i < N; ++i)
    if (targets[i] < -1 || targets[i] >= V) input_error("score: target {} outside the vocabulary of {}", targets[i], V);
  model_.forward(tokens, nullptr, B, T);
  const float* logits = model_.logits();
  parallel_for(N, 64, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      if (targets[i] < 0) continue;
      const float* row = logits + i * size_t(Vp);
      int64_t best = 0;  // the first of equal maxima, as torch's argmax
      for (int64_t v = 1; v < V; ++v)
        if (row[v] > row[best]) best = v;
      const double max = row[best];
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - max);
      out[i].logprob = double(row[targets[i]]) - max - std::log(sum);
      out[i].greedy = best == targets[i];
    }
  });
}

}  // namespace meg
