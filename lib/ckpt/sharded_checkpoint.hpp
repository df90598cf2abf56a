// Checkpoints written shard by shard, in parallel, by the ranks of a job whose state is split
// (tensor or pipeline parallelism, the distributed optimizer); read back in any layout.
//
// The files of such a checkpoint (beside checkpoint.json, whose record says "sharded": true and
// holds the layout):
//   model-tpTT-ppPP.safetensors         the parameters of tensor-parallel rank TT of pipeline rank
//                                       PP (its stage, or with virtual stages its model chunks),
//                                       written by its data-parallel rank 0: the whole model's
//                                       names with the slice's shapes (model/tensor_parallel.hpp)
//   optimizer-tpTT-ppPP.safetensors     the AdamW moments of the same tensors ("exp_avg.NAME",
//                                       "exp_avg_sq.NAME"), without the distributed optimizer
//   optimizer-tpTT-ppPP-dpDD.safetensors  with it: data-parallel rank DD's shard of the moments of
//                                       the slice's flat array ("exp_avg", "exp_avg_sq"; 1-D, the
//                                       array padded to a multiple of the data-parallel size; with
//                                       virtual stages the chunks' tensors chunk after chunk)
// Rank 0 opens the checkpoint's temporary directory, every rank writes its files into it, and rank
// 0 lists them all in the record and commits (ckpt/checkpoint.hpp): a crash leaves the previous
// checkpoint. Reading puts the whole model back together from the shards, so a run of any layout
// (one process included) resumes from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "model/config.hpp"
#include "model/param_tensor.hpp"
#include "parallel/comm.hpp"
#include "parallel/layout.hpp"

namespace meg {

// This rank's part of the training state as it holds it, for checkpoints written shard by shard:
// the tensors of its pipeline stage (of its model chunks, chunk after chunk, with virtual stages)
// and tensor-parallel slice (the whole model's names, local shapes and offsets), their
// parameters, and the AdamW moments: of the same tensors, or with the distributed optimizer this
// replica's shard [shard_begin, shard_begin + m.size()) of the local flat array (local_numel
// long, padded to a multiple of the data-parallel size).
struct LocalState {
  std::vector<ParamTensor> tensors;
  std::vector<float> params, m, v;
  bool moments_sharded = false;
  size_t shard_begin = 0, local_numel = 0;
};

// Writes the checkpoint of ITERATION into DIR from every rank's LOCAL part (collective over the
// world), saved as rank 0's OPTIONS say. Returns the checkpoint's path on rank 0, "" elsewhere.
std::string save_sharded_checkpoint(const std::string& dir, int64_t iteration, const nlohmann::ordered_json& record,
                                    const CheckpointSaveOptions& options, World& world, const LocalState& local);

// The whole model's parameters and AdamW moments (the table layout of CONFIG) from the shards of
// CK, written in layout SAVED with VIRTUAL_STAGES model chunks per pipeline rank (with the
// distributed optimizer when SHARDED_MOMENTS), read tensor by tensor (ckpt/state_reader.hpp).
void load_sharded_state(const Checkpoint& ck, const ModelConfig& config, const ParallelLayout& saved,
                        int virtual_stages, bool sharded_moments, std::vector<float>& params, std::vector<float>& m,
                        std::vector<float>& v);

}  // namespace meg
