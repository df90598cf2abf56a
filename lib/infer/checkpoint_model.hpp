// A trained model for inference (meg-generate, meg-eval): the whole model's fp32 parameters put
// back together from a native checkpoint in any layout (tensor-, pipeline- and data-parallel
// shards, virtual stages), one tensor at a time, with the tokenizer its training used; or, for a
// member of a tensor-parallel group, only that member's shard of them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.hpp"
#include "model/config.hpp"

namespace meg {

struct CheckpointModel {
  std::string path;           // the iteration directory read
  ModelConfig config;         // as trained (its vocabulary padded for the training's tp)
  std::vector<float> params;  // gpt_parameter_table(config)'s storage order, or with tp above 1
                              // rank RANK's shard (model/tensor_parallel_shard.hpp)
  std::string tokenizer;      // the training's tokenizer: the checkpoint's copy, or in older
                              // checkpoints the recorded --tokenizer ("" when none)
  std::string merges;
  int tp = 1, rank = 0;
};

// Reads checkpoint DIR (a directory of iterations, through `latest`, or one iteration directory),
// checking the parameter files' checksums; InputError naming the file on a bad one. With TP above
// 1, keeps only rank RANK's shard of each tensor as it is read, so a member of a group of TP holds
// its part of the model and one whole tensor at most, not the whole model.
CheckpointModel load_checkpoint_model(const std::string& dir, int tp = 1, int rank = 0);

// TOKENIZER (with MERGES for a GPT-2 vocab.json) when given, else the one MODEL was trained with;
// InputError when there is none, or when its vocabulary does not fit the model's.
std::unique_ptr<Tokenizer> load_model_tokenizer(const CheckpointModel& model, const std::string& tokenizer,
                                                const std::string& merges);

}  // namespace meg
