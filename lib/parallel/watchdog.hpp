// A watchdog for distributed training: MPI collectives have no time-out, so a rank stuck in one
// (a peer that hangs rather than dies, a mismatched collective) would wait forever. The watchdog
// is a thread that calls ON_TIMEOUT (which logs and aborts the job) when kick() has not been called
// for SECONDS; the training loop kicks it at every step, evaluation and checkpoint.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace meg {

class Watchdog {
 public:
  Watchdog(double seconds, std::function<void()> on_timeout);
  ~Watchdog();  // stops the thread; ON_TIMEOUT is not called after
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void kick();

  // MEG_COLLECTIVE_TIMEOUT (seconds; InputError when not a positive number), else 1800.
  static double timeout_seconds();

 private:
  void run();

  std::chrono::duration<double> limit_;
  std::function<void()> on_timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::chrono::steady_clock::time_point last_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace meg
