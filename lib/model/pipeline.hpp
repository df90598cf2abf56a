// How the GPT model splits over pipeline stages: stage s of S runs blocks [s L/S, (s+1) L/S) (the
// layers of those blocks, model/layer_spec.hpp); the first stage also holds the embeddings, the last the
// final norm and the output layer (each tensor's PipelinePlace, model/param_tensor.hpp). With tied
// embeddings the last stage keeps its own copy of the word embeddings for the output layer, and the
// two copies' gradients are summed between the first and last stages (Megatron's embedding group),
// so they stay equal.
//
// With virtual stages (the interleaved schedule, train/pipeline_schedule.hpp) the model is cut into
// S V stages and pipeline rank s holds V of them, its model chunks: chunk v is virtual stage
// v S + s (Megatron's assignment), so a micro-batch passes through every rank V times. A rank's
// parameters are its chunks' tensors, chunk after chunk, in one flat array (chunks_table).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
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

// InputError unless CONFIG's blocks divide over STAGES ranks of VIRTUAL_STAGES chunks each.
void check_pipeline_parallel(const ModelConfig& config, int stages, int virtual_stages = 1);

// The model chunks of pipeline rank RANK of STAGES, CHUNKS of them (virtual stages v STAGES + RANK
// of STAGES CHUNKS); with one chunk, the rank's stage.
std::vector<PipelineStage> rank_chunks(int rank, int stages, int chunks);

// The layers [begin, end) of STAGE: indices in the whole model's layer sequence, those of its blocks.
std::pair<int64_t, int64_t> stage_layers(const ModelConfig& config, const PipelineStage& stage);

// Whether STAGE holds the tensor T (by its entry's placement and layer).
bool stage_holds(const ModelConfig& config, const PipelineStage& stage, const ParamTensor& t);

// TABLE (the whole model's, or a tensor-parallel rank's) cut to STAGE's tensors, same order, offsets
// contiguous from 0.
std::vector<ParamTensor> stage_table(const ModelConfig& config, const PipelineStage& stage,
                                     const std::vector<ParamTensor>& table);

// TABLE cut to the tensors of CHUNKS (a rank's, rank_chunks()), each chunk's as stage_table() has
// them, chunk after chunk, offsets contiguous from 0: the layout of the rank's flat arrays.
std::vector<ParamTensor> chunks_table(const ModelConfig& config, const std::vector<PipelineStage>& chunks,
                                      const std::vector<ParamTensor>& table);

// Copies the tensors of PART_TABLE (some of TABLE's, by name, in any order) between an array laid
// out by TABLE and one laid out by PART_TABLE: FROM_TABLE chooses the direction.
template <typename F>
void copy_stage(const std::vector<ParamTensor>& table, const std::vector<ParamTensor>& part_table, F* table_array,
                F* part_array, bool from_table) {
  std::unordered_map<std::string, size_t> offset;
  for (const auto& t : table) offset.emplace(t.name, t.offset);
  for (const auto& t : part_table) {
    F* a = table_array + offset.at(t.name);
    F* b = part_array + t.offset;
    if (from_table) std::copy_n(a, t.numel, b);
    else std::copy_n(b, t.numel, a);
  }
}

}  // namespace meg
