// The parameter table built from the model's parts, and the index of its tensors by layer and role.
#include "model/param_table.hpp"

#include <stdexcept>
#include <string>

#include "model/layer_spec.hpp"

namespace meg {

std::vector<ParamTensor> gpt_parameter_table(const ModelConfig& config) {
  std::vector<ParamTensor> table;
  size_t offset = 0;
  const auto add = [&](std::vector<ParamTensor> part, int64_t layer) {
    for (auto& t : part) {
      t.layer = layer;
      t.offset = offset;
      offset += t.numel;
      table.push_back(std::move(t));
    }
  };
  add(embedding_tensors(config), kNoLayer);
  const std::vector<LayerSpec> layers = config.layers();
  for (size_t l = 0; l < layers.size(); ++l) add(layer_tensors(config, layers[l]), static_cast<int64_t>(l));
  add(head_tensors(config), kNoLayer);
  return table;
}

TensorIndex::TensorIndex(const ModelConfig& config, const std::vector<ParamTensor>& table)
    : tied_(config.tie_embeddings) {
  const std::vector<LayerSpec> specs = config.layers();
  layers_.resize(specs.size());
  for (const ParamTensor& t : table) {
    if (t.layer != kNoLayer && (t.layer < 0 || static_cast<size_t>(t.layer) >= specs.size()))
      throw std::logic_error("TensorIndex: " + t.name + " is in layer " + std::to_string(t.layer) +
                             ", which the model's layer pattern lacks");
    LayerTensors& layer = t.layer == kNoLayer ? outside_ : layers_[static_cast<size_t>(t.layer)];
    size_t& slot = layer.offsets[static_cast<size_t>(t.role)];
    if (t.expert > 0) {
      if (slot == kAbsentTensor || slot + size_t(t.expert) * t.numel != t.offset)
        throw std::logic_error("TensorIndex: " + t.name + " does not follow its layer's expert 0");
      continue;
    }
    if (slot != kAbsentTensor) throw std::logic_error("TensorIndex: " + t.name + " repeats a role of its layer");
    slot = t.offset;
  }
}

size_t TensorIndex::at(int64_t layer, TensorRole role) const {
  if (layer == kNoLayer) return outside_[role];
  return layers_.at(static_cast<size_t>(layer))[role];
}

size_t TensorIndex::output_weight() const {
  return outside_[tied_ ? TensorRole::word_embeddings : TensorRole::output_layer_weight];
}

}  // namespace meg
