#include "train/run_log.hpp"

#include <algorithm>
#include <cmath>

#include "core/log.hpp"
#include "core/progress.hpp"

namespace meg {
namespace {

// The pace behind "left": the mean of this many recent iterations, which follows a run that
// speeds up after its first steps or slows down with evaluations and checkpoints.
constexpr size_t kRecentIterations = 50;

}  // namespace

RunLog::RunLog(RunLogOptions options) : opt_(std::move(options)) {
  if (!opt_.metrics.empty()) metrics_.open(opt_.metrics, "the metrics");
  if (!opt_.tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(opt_.tensorboard_dir, opt_.start_iteration + 1);
}

void RunLog::start(const nlohmann::ordered_json& settings, const std::vector<std::string>& summary) {
  log::info("settings {}", settings.dump());
  for (const auto& line : summary) log::info("{}", line);
  start_ = window_start_ = Clock::now();
  recent_.assign(1, start_);
}

void RunLog::train_step(int64_t iteration, double loss, double lr, double grad_norm,
                        const std::map<std::string, double>& aux_losses) {
  recent_.push_back(Clock::now());
  if (recent_.size() > kRecentIterations + 1) recent_.pop_front();
  loss_sum_ += loss;
  for (const auto& [name, value] : aux_losses) aux_sums_[name] += value;
  ++window_iters_;
  if (iteration % opt_.log_interval == 0 || iteration == opt_.iters) write_train_record(iteration, lr, grad_norm);
}

double RunLog::seconds_left(int64_t iteration) const {
  const double span = std::chrono::duration<double>(recent_.back() - recent_.front()).count();
  return span / static_cast<double>(recent_.size() - 1) * static_cast<double>(opt_.iters - iteration);
}

void RunLog::write_train_record(int64_t iteration, double lr, double grad_norm) {
  const auto now = Clock::now();
  const double n = static_cast<double>(window_iters_);
  const double secs = std::chrono::duration<double>(now - window_start_).count();
  const double ms = 1000.0 * secs / n;
  const double tps = opt_.tokens_per_iter * n / std::max(secs, 1e-9);
  const double loss = loss_sum_ / n;
  const auto consumed = static_cast<int64_t>(opt_.tokens_per_iter) * iteration;
  const DeviceNumbers device = opt_.device_numbers ? opt_.device_numbers() : DeviceNumbers{};
  const double comm_ms = device.communication_ms / n;
  // Model FLOPs (6 N + 12 L C T per token) per second and GPU, Megatron's throughput figure.
  const double tflops = tps * opt_.flops_per_token / static_cast<double>(opt_.world_size) / 1e12;

  std::string aux;
  for (const auto& [name, sum] : aux_sums_) aux += fmt::format(" | {} {:.4f}", name, sum / n);
  std::string extra;
  if (device.peak_memory_bytes > 0) extra += fmt::format(" | peak mem {:.2f} GiB", double(device.peak_memory_bytes) / double(1 << 30));
  if (opt_.time_communication) extra += fmt::format(" | comm {:.1f} ms/iter", comm_ms);
  log::info("iter {}/{} | tokens {} | loss {:.4f}{} | lr {:.3e} | grad norm {:.3f} | {:.1f} ms/iter | {:.0f} tokens/s{} | "
            "elapsed {} | left {}",
            iteration, opt_.iters, consumed, loss, aux, lr, grad_norm, ms, tps, extra,
            human_duration(std::chrono::duration<double>(now - start_).count()), human_duration(seconds_left(iteration)));

  if (metrics_.is_open()) {
    nlohmann::ordered_json line{{"iteration", iteration}, {"split", "train"}, {"consumed_tokens", consumed},
                                {"loss", loss},           {"lr", lr},         {"grad_norm", grad_norm},
                                {"ms_per_iter", ms},      {"tokens_per_s", tps}};
    for (const auto& [name, sum] : aux_sums_) line[name] = sum / n;
    if (device.peak_memory_bytes > 0) line["peak_memory_bytes"] = device.peak_memory_bytes;
    if (opt_.time_communication) line["comm_ms_per_iter"] = comm_ms;
    line["model_tflops_per_gpu"] = tflops;
    metrics_.append(line.dump() + '\n');
  }
  if (tensorboard_) {
    // Megatron-LM's tags (training.py), with its units: iteration-time in seconds, throughput in
    // model TFLOP/s per GPU.
    std::vector<TensorBoardScalar> scalars{{"lm loss", float(loss)},
                                           {"learning-rate", float(lr)},
                                           {"grad-norm", float(grad_norm)},
                                           {"iteration-time", float(secs / n)},
                                           {"throughput", float(tflops)},
                                           {"tokens-per-second", float(tps)}};
    if (device.peak_memory_bytes > 0) scalars.push_back({"mem-max-allocated-bytes", float(device.peak_memory_bytes)});
    if (opt_.time_communication) scalars.push_back({"comm-ms-per-iter", float(comm_ms)});
    for (const auto& [name, sum] : aux_sums_) scalars.push_back({name, float(sum / n)});
    tensorboard_->add_scalars(iteration, scalars);
  }
  loss_sum_ = 0;
  aux_sums_.clear();
  window_iters_ = 0;
  window_start_ = Clock::now();
}

void RunLog::evaluation(int64_t iteration, double loss) {
  const double ppl = std::exp(loss);
  log::info("iter {} | valid loss {:.4f} | valid ppl {:.3f}", iteration, loss, ppl);
  if (metrics_.is_open()) {
    const nlohmann::ordered_json line{
        {"iteration", iteration}, {"split", "valid"}, {"valid_loss", loss}, {"valid_ppl", ppl}};
    metrics_.append(line.dump() + '\n');
  }
  if (tensorboard_) {
    const TensorBoardScalar scalars[] = {{"lm loss validation", float(loss)}, {"lm loss validation ppl", float(ppl)}};
    tensorboard_->add_scalars(iteration, scalars);
  }
}

}  // namespace meg
