// What the command line, the settings file and the checkpoint's record make of meg-pretrain's
// options (TrainOptions, train/trainer.hpp): where the run starts, which options it takes from the
// checkpoint, the defaults that follow from others, and the one-line refusals of what is missing
// or wrong, before anything is built.
//
// Where a run starts:
//   resume    --load names a checkpoint (or a directory of them: its latest). The checkpoint's
//             recorded options are the defaults: an option the user did not give (on the command
//             line or in --config: TrainOptions::given) takes the recorded value, so
//             `meg-pretrain --load DIR --save DIR` alone continues the run. The data options
//             (--data, --data-path, --split, --data-cache-path), the tokenizer (--tokenizer,
//             --merges) and the parallel layout (--tp, --pp, --dp, --cp, --ep, --virtual-stages,
//             --sequence-parallel, --use-distributed-optimizer) and the device (--device,
//             --precision, --recompute) go as groups: giving one of a group gives the whole group. A recorded layout that does not fit the job's ranks is
//             left (with a line saying so): checkpoints load in any layout. --seed is not taken
//             with --no-load-rng. Never taken: what names this job's outputs and controls
//             (--save, --load, --metrics, --exit-*, --time-communication, the fine-tuning and
//             --overwrite flags), and the model options: the model is the checkpoint's.
//             An option given that changes the run's numbers is warned about.
//   finetune  --finetune with --load, or --pretrained-checkpoint when --load holds no
//             checkpoint (Megatron-LM's rules): the checkpoint's weights and model only, at
//             iteration 0 with a fresh optimizer and schedule, on any data. Nothing else is taken
//             from it but its tokenizer.
//   fresh     no checkpoint.
// Either way the tokenizer, unless given, is the checkpoint's (ckpt/checkpoint_tokenizer.hpp).
//
// Required without a checkpoint to resume: the model (--model or --model-config, except when
// fine-tuning), the data (--data or --data-path), --iters and --lr; all that are missing are
// named in one line. --global-batch defaults to --micro-batch x the data-parallel size, as
// Megatron-LM's does.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/precision.hpp"
#include "model/config.hpp"
#include "parallel/layout.hpp"
#include "train/trainer.hpp"

namespace meg {

enum class RunStart { fresh, resume, finetune };

struct ResolvedRun {
  RunStart start = RunStart::fresh;
  std::string checkpoint;          // the iter_* directory the run starts from ("" when fresh)
  nlohmann::json checkpoint_json;  // its checkpoint.json (null when fresh)
  bool tokenizer_in_checkpoint = false;  // the tokenizer is the checkpoint's attached copy
  ParallelLayout layout;
  Precision precision = Precision::fp32;  // of --device and --precision (resolved in the options)
  // Where training continues: the checkpoint's iteration and consumed samples (resume), else 0.
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  // --global-batch was not given: it is --micro-batch x the data-parallel size (said at start-up,
  // once everything is checked, so that a refusal stays one line).
  bool default_global_batch = false;

  const nlohmann::json& record() const { return checkpoint_json["record"]; }
  std::string record_path() const;  // the checkpoint's checkpoint.json
};

// Resolves OPTIONS in place for a job of WORLD processes, as the header says, and checks every
// value; InputError (one line) naming what is missing or wrong.
ResolvedRun resolve_train_options(TrainOptions& options, int world);

// The sequence length of the model the run trains before a blend says: --seq-length, or the
// model config's (resolve_train_model's base model).
int64_t train_seq_length(const TrainOptions& options, const ResolvedRun& run);

// The model the run trains: the checkpoint's when it starts from one and neither --model nor
// --model-config is given, else the preset's or the file's; then the option overrides, the
// dropout options, the blend's sequence length SEQ_LENGTH, the tokenizer's vocabulary
// TOKENIZER_VOCAB (0: none) and the layout's vocabulary padding and divisibility checks. A preset or
// config file whose vocabulary the user did not fix (--vocab-size, or the file's own vocab-size)
// takes the tokenizer's, as Megatron-LM does, with a line when that replaces the preset's.
ModelConfig resolve_train_model(const TrainOptions& options, const ResolvedRun& run, int64_t tokenizer_vocab,
                                int64_t seq_length);

// The train samples the run reads to --iters: consumed ones plus the rest of the steps'.
uint64_t train_samples_needed(const TrainOptions& options, const ResolvedRun& run);

}  // namespace meg
