// The CPU scorer, the reference: the fp32 GptModel in evaluation mode (no dropout), and each
// scored position's log-softmax over the real vocabulary (the padding columns left out)
// computed in double.
#pragma once

#include "eval/scorer.hpp"
#include "model/gpt.hpp"

namespace meg {

class CpuScorer final : public Scorer {
 public:
  CpuScorer(const CheckpointModel& checkpoint, int max_batch);

  const ModelConfig& config() const override { return model_.config(); }
  int max_length() const override { return static_cast<int>(model_.config().seq_length); }
  int max_batch() const override { return max_batch_; }
  void score(const int32_t* tokens, const int32_t* targets, int B, int T, TokenScore* out) override;

 private:
  GptModel<float> model_;
  int max_batch_;
};

}  // namespace meg
