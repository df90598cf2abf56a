// meg-pretrain's training loop, in one process or many (TrainOptions, Trainer): AdamW, LR schedule,
// gradient accumulation, clipping, evaluation, metrics and checkpoints, on the CPU or on a GPU
// through a TrainBackend (train/backend.hpp).
//
// One iteration is one optimizer step over a global batch of G samples, taken as G / B micro-batches
// of B samples (forward + backward each, gradients accumulated and divided by G / B). With D
// data-parallel ranks, each takes G / (B D) of the micro-batches, as Megatron's sampler deals them:
// the sample of step s, micro-batch m of data-parallel rank r, row j is train sample
// C + (m*D + r)*B + j of the blend, C the samples consumed before the step (s*G while G stays the
// same), and that micro-batch's dropout key is (seed, s, m*D + r). So the samples and masks of a
// step are the same whatever the layout, and with D = 1 the formula is the single process's
// C + m*B + j. A run longer than its blend reads it again: the sample index wraps, epoch after
// epoch (logged at the start). A run resumed from a checkpoint (parameters, AdamW moments and
// step count, iteration, consumed samples) continues bit for bit as the uninterrupted run would
// have; train/resolved_options.hpp says what it takes from the checkpoint, and how fine-tuning
// starts from one.
//
// Distributed runs: rank 0 logs, writes the metrics and the checkpoints (data-parallel replicas
// hold the same state); the others report only errors. Before their first collective the ranks
// compare their settings and stop with one line naming those that differ
// (parallel/rank_agreement.hpp). A stop (signal, time limit) is agreed on by all ranks each step,
// so they stop together. A watchdog ends the job when a rank makes no progress for
// MEG_COLLECTIVE_TIMEOUT seconds (a collective that never completes), rather than hang.
//
// Rank 0 writes the metrics (JSON lines, one per --log-interval, one per evaluation) and, with
// --tensorboard-dir, TensorBoard events: train/run_log.hpp.
//
// Checkpoints (ckpt/checkpoint.hpp): model.safetensors holds the parameters by their table names,
// optimizer.safetensors the AdamW moments as "exp_avg.<name>" and "exp_avg_sq.<name>", all fp32
// whatever the device and precision (so a checkpoint written on a GPU loads on the CPU and the
// reverse); the record holds the model config, the resolved options, iteration, consumed samples,
// optimizer step, the blend fingerprints (with and without its sample counts), the seed, the
// parallel layout, the backend's extra state (fp16's loss scale) and the tokenizer, whose files
// every checkpoint keeps (ckpt/checkpoint_tokenizer.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_tokenizer.hpp"
#include "data/gpt_dataset.hpp"
#include "model/config.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/comm.hpp"
#include "parallel/layout.hpp"
#include "parallel/rank_agreement.hpp"
#include "parallel/watchdog.hpp"
#include "train/backend.hpp"
#include "train/run_log.hpp"
#include "train/run_summary.hpp"

namespace meg {

struct ResolvedRun;

struct TrainOptions {
  // Model: a preset and/or a JSON config file, then single-field overrides.
  std::string model;
  std::string model_config;
  ModelOverrides overrides;
  // Dropout probabilities (--hidden-dropout, --attention-dropout); unset: the config's. Training
  // forwards use the dropout key (seed, iteration, micro-batch); evaluation runs without dropout.
  std::optional<double> hidden_dropout;
  std::optional<double> attention_dropout;

  std::string data;                    // the blend file (meg-blend), or the one --data-path built
  std::vector<std::string> data_path;  // Megatron's --data-path: a blend built and cached by the run
  std::string split = "969,30,1";      // --split of the --data-path blend
  std::string data_cache_path;         // where that blend is kept (default SAVE/data-cache)
  bool override_data = false;          // resume on another blend, at the consumed samples
  std::string tokenizer;  // gives the vocabulary size (optional when the config has one)
  std::string merges;     // GPT-2 BPE merges.txt, with a vocab.json tokenizer

  int64_t iters = 0;
  int64_t micro_batch = 1;
  int64_t global_batch = 0;  // 0: the micro-batch times the data-parallel size

  LrScheduleOptions lr;  // train_iters is set from iters
  AdamWOptions adam;
  double clip_grad = 1.0;
  uint64_t seed = 1234;

  int64_t eval_interval = 0;  // 0: no evaluation during training
  int64_t eval_iters = 10;
  int64_t log_interval = 10;

  std::string save;
  int64_t save_interval = 0;  // 0: save only at the end (and on a stop request)
  int keep = 0;
  std::string load;
  // Fine-tuning, as Megatron-LM's options: --finetune loads the weights only (iteration 0, a fresh
  // optimizer and schedule, any data); --pretrained-checkpoint is fine-tuned from when --load
  // holds no checkpoint; --no-load-optim starts fresh AdamW moments; --no-load-rng takes --seed
  // rather than the checkpoint's (the dropout masks are a function of seed, iteration and
  // micro-batch: the seed is all the random state there is).
  bool finetune = false;
  std::string pretrained_checkpoint;
  bool no_load_optim = false;
  bool no_load_rng = false;
  bool overwrite = false;  // save into a directory that holds another run's checkpoints
  // Megatron-LM's: a --load that holds no checkpoint is an error rather than a fresh start.
  bool exit_on_missing_checkpoint = false;
  // Resuming, the learning-rate schedule (and weight decay) of the checkpoint holds even over
  // given values (--use-checkpoint-opt-param-scheduler), or the given values hold without the
  // warning that the run no longer repeats an uninterrupted one (--override-opt-param-scheduler).
  bool use_checkpoint_opt_param_scheduler = false;
  bool override_opt_param_scheduler = false;
  std::string metrics;  // default: SAVE/metrics.jsonl when --save is given
  std::string tensorboard_dir;  // --tensorboard-dir: TensorBoard event files (train/tensorboard_writer.hpp)
  double exit_after_minutes = 0;
  int64_t exit_interval = 0;  // save and stop when the iteration is a multiple of N (0: never)
  std::string device;     // cpu or cuda; empty: cuda when a GPU is present, else cpu
  std::string precision;  // bf16, fp16 or fp32; empty: bf16 on cuda, fp32 on cpu (its only one)
  std::string recompute = "none";  // none, selective or full (cuda only)

  // Parallelism (parallel/layout.hpp): dp unset is the world size over tp * pp * cp * ep.
  int tp = 1, pp = 1, cp = 1, ep = 1;
  std::optional<int> dp;
  bool distributed_optimizer = false;
  bool sequence_parallel = false;
  int virtual_stages = 1;
  // Measure the device communication time of each iteration (logged, and in the metrics).
  bool time_communication = false;

  // The long names (without dashes, every alias) of the options the user gave, on the command
  // line or in --config: a resumed run takes the others from its checkpoint
  // (train/resolved_options.hpp). An alias must be another name of the same CLI11 option, so
  // that the set holds the name the record uses (to_json's key).
  std::set<std::string> given;

  // The options as stored with checkpoints and printed at start.
  nlohmann::ordered_json to_json() const;
};

class Trainer {
 public:
  // Resolves and checks everything (InputError on a bad option, data or checkpoint), builds the
  // model and optimizer, and loads the checkpoint the run starts from when there is one.
  explicit Trainer(TrainOptions options);
  ~Trainer();

  // Trains to options.iters (or until a stop request / the time limit); returns the exit status.
  int run();

  const ModelConfig& config() const { return config_; }
  int64_t iteration() const { return iteration_; }
  // The resolved settings (options, model, data), one JSON object.
  nlohmann::ordered_json settings() const;

 private:
  StepStats train_step();
  // Whether any rank asks to stop (signal, time limit): every rank must stop at the same step.
  bool any_rank(bool flag);
  double evaluate();
  void save_checkpoint_now();
  nlohmann::ordered_json checkpoint_record() const;
  // What every rank must share, compared before the first collective (parallel/rank_agreement.hpp).
  std::vector<RankSetting> shared_settings(uint64_t tokenizer_fingerprint) const;
  // Whether the ranks hold different parts of the state (then each writes its own shard).
  bool sharded_state() const;
  // The blend: --data, or the one --data-path builds (or finds in its cache) for the model's
  // sequence length.
  void open_data();
  // Loads the checkpoint the run starts from: all of it to resume, the weights to fine-tune.
  void load_start();
  // Refuses, or allows with a line, a resumed run on a blend other than its checkpoint's.
  void check_resumed_blend(const nlohmann::ordered_json& record, const std::string& where) const;
  // What the run log writes where (rank 0 writes files, the others none), and what the start-up
  // block tells.
  RunLogOptions run_log_options() const;
  RunFacts run_facts(const RunLogOptions& log) const;

  TrainOptions opt_;
  std::unique_ptr<ResolvedRun> run_;  // where the run starts (train/resolved_options.hpp)
  ModelConfig config_;
  std::unique_ptr<GptDataset> data_;
  std::unique_ptr<TrainBackend> backend_;
  ParallelLayout layout_;
  World* world_ = nullptr;
  Comm* dp_group_ = nullptr;
  std::unique_ptr<Watchdog> watchdog_;  // distributed runs: ends the job when no step completes
  std::unique_ptr<LrSchedule> schedule_;
  int64_t iteration_ = 0;
  int64_t consumed_samples_ = 0;  // train samples read so far, the data position
  int64_t last_saved_ = -1;
  int64_t tokenizer_vocab_ = 0;
  KeptTokenizer tokenizer_;  // what each checkpoint keeps of the tokenizer
  std::vector<int32_t> sample_, tokens_, targets_;
};

}  // namespace meg
