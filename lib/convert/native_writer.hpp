// Writes a model's training state (parameters, AdamW moments) as the files of a native checkpoint
// in any layout, streaming: the writer asks for one whole tensor at a time, cuts it into the
// layout's slices and appends each to its file, so memory holds a whole tensor and one slice,
// never the model.
//
// Every file is declared up front (the tables give its tensors) and filled in order. The writer
// walks the virtual stages in order, each stage's tensors in table order: the order of every
// pipeline rank's file (its chunks are virtual stages r, r + pp, ...). With the distributed
// optimizer a shard file holds all of "exp_avg" before "exp_avg_sq", so the second moments take a
// second walk; each tensor's range of the rank's flat array goes to the data-parallel shards it
// crosses, and the padding past the array's end is written as zeros.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "ckpt/checkpoint_layout.hpp"
#include "model/config.hpp"
#include "model/param_tensor.hpp"

namespace meg {

// Fills WHOLE with state KIND of FULL (an entry of the written model's table): WHOLE may be
// resized, and its first FULL.numel floats are taken.
using WholeTensorSource = std::function<void(const ParamTensor& full, StateKind kind, std::vector<float>& whole)>;

// Writes the files of LAYOUT (NativeLayout::file_names()) into W and closes them, asking SOURCE
// for each tensor of CONFIG's table (the tied word embedding twice with pipeline parallelism: once
// per stage that holds it). check_layout() must accept CONFIG and LAYOUT. Returns the bytes written.
uint64_t write_native_state(CheckpointWriter& w, const ModelConfig& config, const NativeLayout& layout,
                            const WholeTensorSource& source);

// --verify of a conversion: reads back the files write_native_state wrote into DIR (the writer's
// temp_path(), before commit) and compares every tensor, each kind, bit for bit with EXPECTED's (the
// source it wrote from). std::runtime_error naming the first difference: a bug, so the caller
// commits nothing.
void verify_native_state(const std::string& dir, const ModelConfig& config, const NativeLayout& layout,
                         const WholeTensorSource& expected);

}  // namespace meg
