// How the GPT model splits over pipeline stages: stage s of S runs blocks [s L/S, (s+1) L/S); the
// first stage also holds the embeddings, the last the final norm and the output layer. With tied
// embeddings the last stage keeps its own copy of the word embeddings for the output layer, and the
// two copies' gradients are summed between the first and last stages (Megatron's embedding group),
// so they stay equal.
#pragma once

#include <algorithm>
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

// Copies the tensors of STAGE_TABLE (a subsequence of TABLE, by name) between an array laid out by
// TABLE and one laid out by STAGE_TABLE: FROM_TABLE chooses the direction.
template <typename F>
void copy_stage(const std::vector<ParamTensor>& table, const std::vector<ParamTensor>& stage_table, F* table_array,
                F* stage_array, bool from_table) {
  size_t k = 0;
  for (const auto& t : table) {
    if (k == stage_table.size() || stage_table[k].name != t.name) continue;
    F* a = table_array + t.offset;
    F* b = stage_array + stage_table[k++].offset;
    if (from_table) std::copy_n(a, t.numel, b);
    else std::copy_n(b, t.numel, a);
  }
}

}  // namespace meg
