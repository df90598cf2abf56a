// meg-ckpt-convert's Hugging Face moves: a native checkpoint of any layout exported as a Hugging
// Face directory (hf_export.hpp), and a Hugging Face directory imported as a native checkpoint of
// any layout (hf_import.hpp), both streaming one whole tensor at a time through the native reader
// and writer that resharding uses.
//
// Export takes the parameters only (Hugging Face files hold no optimizer state) and drops meg's
// vocabulary padding rows; it copies the tokenizer given, or else the one the checkpoint keeps
// (ckpt/checkpoint_tokenizer.hpp). Import writes iteration 0 with the imported parameters, zero
// AdamW moments and optimizer step 0 (the state of a run about to take its first step from those
// weights), the model config with its vocabulary padded for the layout's tp, the layout, and the
// directory's tokenizer (when meg reads its kind) kept with the checkpoint; the record holds none
// of a training run's data position ("blend_fingerprint", "seed") nor its other options.
//
// Everything about the input is checked before anything is written; --verify reads the output back
// under its temporary name and compares every tensor with the source before it is renamed into
// place: bit for bit, or for a bf16/fp16 export with the source rounded as the export rounds it.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/checkpoint_layout.hpp"
#include "convert/hf_export.hpp"
#include "model/config.hpp"

namespace meg {

struct ToHfOptions {
  std::string load;     // a native checkpoint directory, or a directory of them (its latest)
  std::string save;     // the Hugging Face directory to create
  HfExportOptions hf;   // dtype, shard size, tokenizer
  bool verify = false;
};

struct FromHfOptions {
  std::string dir;      // a Hugging Face model directory
  std::string save;     // the directory to write the native checkpoint (iteration 0) into
  NativeLayout layout;  // the layout to write
  bool verify = false;
};

struct HfConvertResult {
  std::string source, path;  // what was read and what was written
  ModelConfig config;        // the model (with --from hf, padded for the written layout)
  uint64_t bytes = 0;        // tensor bytes written
  double seconds = 0;        // writing (and verifying), after the input's checks
};

// InputError (one line naming the file or option) for bad input, with nothing written; an
// exception of another kind when verification finds a difference (a bug), with nothing committed.
HfConvertResult export_checkpoint_to_hf(const ToHfOptions& options);
HfConvertResult import_hf_checkpoint(const FromHfOptions& options);

}  // namespace meg
