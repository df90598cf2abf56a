#include "parallel/watchdog.hpp"

#include <cstdlib>
#include <string>

#include "core/error.hpp"

namespace meg {

Watchdog::Watchdog(double seconds, std::function<void()> on_timeout)
    : limit_(seconds), on_timeout_(std::move(on_timeout)), last_(std::chrono::steady_clock::now()) {
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::kick() {
  std::lock_guard<std::mutex> lock(mutex_);
  last_ = std::chrono::steady_clock::now();
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    const auto deadline = last_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(limit_);
    if (wake_.wait_until(lock, deadline, [this] { return stop_; })) return;
    if (std::chrono::steady_clock::now() >= last_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(limit_)) {
      lock.unlock();
      on_timeout_();  // aborts the job; should it return, the watchdog is done
      return;
    }
  }
}

double Watchdog::timeout_seconds() {
  const char* value = std::getenv("MEG_COLLECTIVE_TIMEOUT");
  if (!value || !*value) return 1800.0;
  char* end = nullptr;
  const double seconds = std::strtod(value, &end);
  if (end == value || *end != '\0' || !(seconds > 0))
    input_error("MEG_COLLECTIVE_TIMEOUT '{}': expected a positive number of seconds", value);
  return seconds;
}

}  // namespace meg
