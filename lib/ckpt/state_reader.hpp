// Whole tensors of a model's training state (parameters, AdamW moments) read from the files of a
// native checkpoint in any layout, one tensor at a time: the tensor-parallel slices are put back
// together from the shards of the pipeline rank that holds the tensor (the first, for GPT's tied
// word embedding, which the first and the last stage both keep), and the distributed optimizer's
// moments from the data-parallel shards of the rank's flat array that the tensor's range crosses.
// Only the tensor's bytes of the mapped files are read.
#pragma once

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "ckpt/checkpoint_layout.hpp"
#include "ckpt/safetensors.hpp"
#include "model/config.hpp"
#include "model/param_tensor.hpp"

namespace meg {

// A native checkpoint's model config (its vocabulary padded for the layout's tp) and layout, read
// from its record and checked against each other and against the files it lists; InputError
// naming checkpoint.json when they disagree.
struct NativeSource {
  ModelConfig config;
  NativeLayout layout;
};
NativeSource read_native_source(const Checkpoint& ck);

// The checkpoint's safetensors file NAME (InputError when it has none).
using ShardFiles = std::function<const SafetensorsFile&(const std::string& name)>;

class NativeStateReader {
 public:
  // CONFIG is the checkpoint's model config (its vocabulary padded for LAYOUT's tp); check_layout()
  // must accept both.
  NativeStateReader(ShardFiles files, const ModelConfig& config, const NativeLayout& layout);

  // InputError naming the file unless each file LAYOUT implies holds exactly the tensors the
  // layout puts there, as F32 of the tables' shapes: a reader that passes never fails in read().
  void check() const;

  // The whole model's parameter table.
  const std::vector<ParamTensor>& table() const { return full_; }
  // Fills WHOLE (FULL.numel floats) with state KIND of FULL, an entry of table().
  void read(const ParamTensor& full, StateKind kind, float* whole) const;

 private:
  // Where a tensor is read from: a pipeline rank and its entry in that rank's table.
  struct Holder {
    int pp_rank = 0;
    const ParamTensor* local = nullptr;
  };
  // Copies elements [begin, begin + n) of KIND of the local tensor of HOLDER on tensor-parallel
  // rank TP_RANK into DST.
  void read_local(const Holder& holder, int tp_rank, StateKind kind, size_t begin, size_t n, float* dst) const;
  const float* tensor_data(const std::string& file, const std::string& name, const std::vector<int64_t>& shape) const;

  ShardFiles files_;
  ModelConfig config_;
  NativeLayout layout_;
  std::vector<ParamTensor> full_;
  std::vector<std::vector<ParamTensor>> rank_tables_;  // per pipeline rank: its chunks' tensors
  std::unordered_map<std::string, Holder> holders_;
};

}  // namespace meg
