// A model's config and parameters as the members of a tensor-parallel group hold them, for a
// member given either the whole model or its own shard (model/tensor_parallel.hpp says how the
// tensors split): the inference models take either, as load_checkpoint_model reads it.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "model/config.hpp"
#include "model/param_tensor.hpp"

namespace meg {

// CONFIG as the members of a group of TP tensor-parallel ranks run it: validated, with PARAMETERS
// (the length of the array a member is given: the whole model's, or for TP above 1 a rank's shard,
// as load_checkpoint_model reads it) checked against it, and for TP above 1 its vocabulary padded
// for TP as training pads it. InputError on an invalid model, another length, or a model that does
// not split over TP ranks (heads, key/value heads, MLP width).
ModelConfig tensor_parallel_config(const ModelConfig& config, size_t parameters, int tp);

// Whether PARAMETERS values are CONFIG's whole model, rather than one rank's shard of it (which
// tensor_parallel_config has checked them to be otherwise): a member given the whole model cuts
// its own shard with tensor_parallel_shard.
bool holds_whole_model(const ModelConfig& config, size_t parameters);

// Rank RANK's shard, laid out as gpt_parameter_table(sharded, tp), of the whole model of CONFIG
// (gpt_parameter_table(config)'s layout), SHARDED being tensor_parallel_config(config, ..., tp).
// The vocabulary rows are cut or zero-extended to SHARDED's padding (rows past vocab_size are
// never read). From PARAMS, the whole model; or a tensor at a time from READ(t, out), which writes
// the whole tensor T of CONFIG's table to OUT, so that only the largest tensor is ever held whole.
std::vector<float> tensor_parallel_shard(const ModelConfig& config, std::span<const float> params,
                                         const ModelConfig& sharded, int tp, int rank);
std::vector<float> tensor_parallel_shard(const ModelConfig& config, const ModelConfig& sharded, int tp, int rank,
                                         const std::function<void(const ParamTensor&, float*)>& read);

}  // namespace meg
