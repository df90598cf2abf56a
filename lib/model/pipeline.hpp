// How the GPT model splits over pipeline stages: stage s of S runs blocks [s L/S, (s+1) L/S); the
// first stage also holds the embeddings, the last the final norm and the output layer. With tied
// embeddings the last stage keeps its own copy of the word embeddings for the output layer, and the
// two copies' gradients are summed between the first and last stages (Megatron's embedding group),
// so they stay equal.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/config.hpp"
#include "model/param_tensor.hpp"

namespace meg {

struct PipelineStage {
  int stage = 0;
  int stages = 1;
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
};

// InputError unless CONFIG's blocks divide over STAGES.
void check_pipeline_parallel(const ModelConfig& config, int stages);

// The blocks [begin, end) of STAGE.
std::pair<int64_t, int64_t> stage_layers(const ModelConfig& config, const PipelineStage& stage);

// Whether STAGE holds the tensor NAME.
bool stage_holds(const ModelConfig& config, const PipelineStage& stage, const std::string& name);

// TABLE (the whole model's, or a tensor-parallel rank's) cut to STAGE's tensors, same order, offsets
// contiguous from 0.
std::vector<ParamTensor> stage_table(const ModelConfig& config, const PipelineStage& stage,
                                     const std::vector<ParamTensor>& table);

}  // namespace meg
