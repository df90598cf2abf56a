#include "model/pipeline.hpp"

#include <stdexcept>

#include "core/error.hpp"
#include "model/layer_spec.hpp"

namespace meg {

void check_pipeline_parallel(const ModelConfig& config, int stages, int virtual_stages) {
  if (stages < 1) input_error("--pp {} must be at least 1", stages);
  if (virtual_stages < 1) input_error("--virtual-stages {} must be at least 1", virtual_stages);
  if (config.num_layers % (int64_t(stages) * virtual_stages) == 0) return;
  if (virtual_stages == 1)
    input_error("--pp {}: the model's {} blocks do not divide over {} stages", stages, config.num_layers, stages);
  input_error("--pp {} --virtual-stages {}: the model's {} blocks do not divide over {} x {} virtual stages", stages,
              virtual_stages, config.num_layers, stages, virtual_stages);
}

std::vector<PipelineStage> rank_chunks(int rank, int stages, int chunks) {
  std::vector<PipelineStage> out;
  for (int v = 0; v < chunks; ++v) out.push_back({v * stages + rank, stages * chunks});
  return out;
}

std::pair<int64_t, int64_t> stage_layers(const ModelConfig& config, const PipelineStage& stage) {
  const int64_t per = config.num_layers / stage.stages;  // blocks
  const int64_t first = per * stage.stage, end = per * (stage.stage + 1);
  const std::vector<LayerSpec> layers = config.layers();
  int64_t begin = 0;
  while (begin < int64_t(layers.size()) && layers[size_t(begin)].block < first) ++begin;
  int64_t stop = begin;
  while (stop < int64_t(layers.size()) && layers[size_t(stop)].block < end) ++stop;
  return {begin, stop};
}

namespace {

bool holds(const PipelineStage& stage, std::pair<int64_t, int64_t> layers, const ParamTensor& t) {
  switch (t.pipeline) {
    case PipelinePlace::layer: return t.layer >= layers.first && t.layer < layers.second;
    case PipelinePlace::first_stage: return stage.first();
    case PipelinePlace::last_stage: return stage.last();
    case PipelinePlace::first_and_last_stage: return stage.first() || stage.last();
  }
  throw std::logic_error("stage_holds: " + t.name + " has no pipeline placement");
}

}  // namespace

bool stage_holds(const ModelConfig& config, const PipelineStage& stage, const ParamTensor& t) {
  return holds(stage, stage_layers(config, stage), t);
}

std::vector<ParamTensor> stage_table(const ModelConfig& config, const PipelineStage& stage,
                                     const std::vector<ParamTensor>& table) {
  const std::pair<int64_t, int64_t> layers = stage_layers(config, stage);
  std::vector<ParamTensor> out;
  size_t offset = 0;
  for (const auto& t : table) {
    if (!holds(stage, layers, t)) continue;
    out.push_back(t);
    out.back().offset = offset;
    offset += t.numel;
  }
  return out;
}

std::vector<ParamTensor> chunks_table(const ModelConfig& config, const std::vector<PipelineStage>& chunks,
                                      const std::vector<ParamTensor>& table) {
  std::vector<ParamTensor> out;
  size_t offset = 0;
  for (const auto& chunk : chunks)
    for (auto t : stage_table(config, chunk, table)) {
      t.offset = offset;
      offset += t.numel;
      out.push_back(std::move(t));
    }
  return out;
}

}  // namespace meg
