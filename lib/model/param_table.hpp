// The parameter table: every tensor of a model, in storage order, each entry saying its layer,
// role, shape, initialisation, tensor-parallel split, pipeline placement and sequence-parallel
// flag (model/param_tensor.hpp). It is built from the config's parts (model/layer_spec.hpp: the
// embeddings, the layers of the hybrid layer pattern, the head), and everything reads it:
// initialisation, the parameter count, the tensor- and pipeline-parallel cuts, the sequence-
// parallel reductions, checkpoints and the Hugging Face maps.
//
// TensorIndex finds a tensor by (layer, role), which is how the models find their weights.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/config.hpp"
#include "model/param_tensor.hpp"

namespace meg {

// The tensor table of CONFIG (its layer pattern must parse) in storage order, offsets contiguous
// from 0. Allocates no parameters.
std::vector<ParamTensor> gpt_parameter_table(const ModelConfig& config);

// Where each of one layer's tensors starts in its flat array, by role; kAbsentTensor for a role
// the layer lacks (biases of Llama, ...) or a table without the layer.
struct LayerTensors {
  std::array<size_t, kTensorRoles> offsets;
  LayerTensors() { offsets.fill(kAbsentTensor); }
  size_t operator[](TensorRole role) const { return offsets[static_cast<size_t>(role)]; }
};

// The offsets of a table's tensors (the full table, a tensor-parallel rank's, a stage's) by layer
// and role. std::logic_error for a table that is not CONFIG's (a layer the pattern lacks, a role
// twice in one layer).
class TensorIndex {
 public:
  TensorIndex() = default;  // of no tensors
  TensorIndex(const ModelConfig& config, const std::vector<ParamTensor>& table);

  // The tensor of ROLE in LAYER (an index in the layer sequence, or kNoLayer for the embeddings
  // and the head); kAbsentTensor when the table has none.
  size_t at(int64_t layer, TensorRole role) const;
  // The tensors of LAYER (an index in the whole model's layer sequence).
  const LayerTensors& layer(int64_t layer) const { return layers_.at(static_cast<size_t>(layer)); }
  // The output layer's weight: output_layer.weight, or the word embedding when tied.
  size_t output_weight() const;

 private:
  bool tied_ = false;
  LayerTensors outside_;             // the embeddings and the head
  std::vector<LayerTensors> layers_;  // by index in the layer sequence
};

}  // namespace meg
