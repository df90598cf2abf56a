// meg-ckpt-convert's native move: a checkpoint of any parallel layout rewritten in another, model
// and optimizer state both, streaming tensor by tensor (ckpt/state_reader.hpp, native_writer.hpp).
//
// The output is a checkpoint of the same iteration whose record is the input's with "parallel",
// "sharded", "distributed_optimizer" and the model's padded vocabulary set for the new layout:
// meg-pretrain resumes from it in that layout as from a checkpoint it wrote itself. The vocabulary
// rows follow the tensor-parallel size (a multiple of 128 * tp): the word embedding, the output
// layer and their moments lose or gain padding rows, gained rows being zero; padding rows are
// never looked up and outside the softmax, so the model computes the same.
//
// Everything about the input is checked before anything is written (the checksums of its files,
// its record, its shards' tensors and shapes, the new layout against the model); the output is
// written through CheckpointWriter (a temporary directory renamed into place) and, with verify,
// read back and compared with the input before that rename.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/checkpoint_layout.hpp"

namespace meg {

struct ReshardOptions {
  std::string load;     // a checkpoint directory, or a directory of them (its latest)
  std::string save;     // the directory to write the checkpoint into
  NativeLayout layout;  // the layout to write
  bool verify = false;  // compare every tensor of the output with the input before committing
};

struct ReshardResult {
  std::string source, path;  // the checkpoint read and the one written
  NativeLayout from;
  uint64_t bytes = 0;        // tensor bytes written
  double seconds = 0;        // writing (and verifying), after the input's checks
};

// InputError (one line naming the file or option) for bad input, with nothing written; an
// exception of another kind when verification finds a difference (a bug), with nothing committed.
ReshardResult reshard_checkpoint(const ReshardOptions& options);

}  // namespace meg
