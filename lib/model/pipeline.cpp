#include "model/pipeline.hpp"

#include <cstdlib>

#include "core/error.hpp"

namespace meg {

void check_pipeline_parallel(const ModelConfig& config, int stages) {
  if (stages < 1) input_error("--pp {} must be at least 1", stages);
  if (config.num_layers % stages != 0)
    input_error("--pp {}: the model's {} blocks do not divide over {} stages", stages, config.num_layers, stages);
}

std::pair<int64_t, int64_t> stage_layers(const ModelConfig& config, const PipelineStage& stage) {
  const int64_t per = config.num_layers / stage.stages;
  return {per * stage.stage, per * (stage.stage + 1)};
}

bool stage_holds(const ModelConfig& config, const PipelineStage& stage, const std::string& name) {
  static const std::string layers = "decoder.layers.";
  if (name.rfind(layers, 0) == 0) {
    const int64_t l = std::strtoll(name.c_str() + layers.size(), nullptr, 10);
    const auto [begin, end] = stage_layers(config, stage);
    return l >= begin && l < end;
  }
  if (name == "embedding.word_embeddings.weight") return stage.first() || (stage.last() && config.tie_embeddings);
  if (name.rfind("embedding.", 0) == 0) return stage.first();
  return stage.last();  // the final norm and the output layer
}

std::vector<ParamTensor> stage_table(const ModelConfig& config, const PipelineStage& stage,
                                     const std::vector<ParamTensor>& table) {
  std::vector<ParamTensor> out;
  size_t offset = 0;
  for (const auto& t : table) {
    if (!stage_holds(config, stage, t.name)) continue;
    out.push_back(t);
    out.back().offset = offset;
    offset += t.numel;
  }
  return out;
}

}  // namespace meg
