// The plain start-up block of meg-pretrain, printed after the one-line JSON "settings" record for
// a person reading the log: the model, the parallel layout, the batch arithmetic, the data the run
// takes, the learning-rate schedule and where the outputs go, one line each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/layout.hpp"

namespace meg {

struct RunFacts {
  std::string model_source;  // the preset or config file the model came from; empty: the checkpoint's
  ModelConfig model;
  ParallelLayout layout;
  int virtual_stages = 1;
  bool distributed_optimizer = false, sequence_parallel = false;
  std::string backend;  // TrainBackend::describe()
  int64_t micro_batch = 0, global_batch = 0, seq_length = 0;
  int64_t start_iteration = 0, iters = 0;
  std::string blend;
  uint64_t blend_train_samples = 0;
  uint64_t train_tokens_per_epoch = 0;  // the train splits of the blend's inputs, once each
  LrScheduleOptions lr;                 // decay_iters resolved (LrSchedule::options())
  std::string save;
  int64_t save_interval = 0;
  int keep = 0;
  std::string metrics, tensorboard_dir;  // empty: none
};

// The lines, without the program's prefix.
std::vector<std::string> run_summary(const RunFacts& facts);

// 0.17M, 124.44M, 1.24B: a parameter count as model cards give it.
std::string parameter_count(int64_t n);

}  // namespace meg
