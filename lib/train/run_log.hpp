// What meg-pretrain tells about a run while it trains: the start-up block, a log line per
// --log-interval and per evaluation on stderr, the same numbers as JSON lines in the metrics file,
// and as scalars in a TensorBoard event file (--tensorboard-dir). The trainer hands it each
// step's and each evaluation's numbers; RunLog averages, times, formats and writes them.
//
// Metrics records (man/meg-formats.5, METRICS FILE), told apart by "split":
//   {"iteration": 10, "split": "train", "consumed_tokens": 1280, "loss": 6.9, "lr": 0.001,
//    "grad_norm": 1.2, "ms_per_iter": 12.3, "tokens_per_s": 10400.0, "model_tflops_per_gpu": 0.01,
//    ["peak_memory_bytes": N, "comm_ms_per_iter": X]}
//   {"iteration": 10, "split": "valid", "valid_loss": 6.8, "valid_ppl": 900.2}
// The loss, time and rate of a train record are means over the iterations since the last one; lr
// and grad_norm are the last iteration's.
//
// In a distributed run every rank keeps the log (so that every rank takes its communication time
// at the same steps), and only rank 0 is given files to write.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/append_file.hpp"
#include "train/tensorboard_writer.hpp"

namespace meg {

// What the device measured over the iterations since the last log line.
struct DeviceNumbers {
  size_t peak_memory_bytes = 0;  // 0: not known (the CPU)
  double communication_ms = 0;   // summed over those iterations
};

struct RunLogOptions {
  int64_t start_iteration = 0;  // the iterations done before (a resumed run's checkpoint)
  int64_t iters = 0;            // the iteration the run trains to (--iters)
  int64_t log_interval = 1;     // a train record every N iterations, and at the last
  double tokens_per_iter = 0;
  double flops_per_token = 0;  // model FLOPs, for model_tflops_per_gpu
  int world_size = 1;
  bool time_communication = false;  // log comm_ms_per_iter
  std::string metrics;              // the metrics file; empty: none
  std::string tensorboard_dir;      // empty: no event file
  // Called at each log line, on every rank; empty: nothing measured.
  std::function<DeviceNumbers()> device_numbers;
};

class RunLog {
 public:
  // Opens the metrics file and creates the event file (InputError naming them when it cannot).
  explicit RunLog(RunLogOptions options);

  // The start-up block: "settings {JSON}" and the plain lines of SUMMARY. Starts the clock of the
  // elapsed time.
  void start(const nlohmann::ordered_json& settings, const std::vector<std::string>& summary);
  // Iteration ITERATION (counted from 1) is done: its mean loss, the learning rate it used and its
  // gradient norm, and an MoE model's auxiliary losses by name (StepStats::aux_losses: each is
  // averaged over the log interval, written after the loss in the log line, into metrics.jsonl
  // and as TensorBoard scalars under its name, as Megatron logs them). Writes a train record when
  // the iteration ends a log interval.
  void train_step(int64_t iteration, double loss, double lr, double grad_norm,
                  const std::map<std::string, double>& aux_losses = {});
  // The validation loss after ITERATION.
  void evaluation(int64_t iteration, double loss);

 private:
  void write_train_record(int64_t iteration, double lr, double grad_norm);
  // Seconds left to --iters at the mean pace of the recent iterations.
  double seconds_left(int64_t iteration) const;

  using Clock = std::chrono::steady_clock;
  RunLogOptions opt_;
  AppendFile metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  Clock::time_point start_ = Clock::now(), window_start_ = start_;
  double loss_sum_ = 0;
  std::map<std::string, double> aux_sums_;  // the auxiliary losses' sums over the window
  int64_t window_iters_ = 0;
  std::deque<Clock::time_point> recent_;  // when each recent iteration ended, oldest first
};

}  // namespace meg
