// Progress of long work on stderr: rate, percentage and time left, redrawn in place when stderr is
// a terminal, plain periodic lines otherwise (logs of batch jobs), nothing under --quiet.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace meg {

class Progress {
 public:
  // TOTAL in UNITs (0 when unknown: no percentage or ETA, only the count and the rate).
  Progress(std::string what, uint64_t total, std::string unit = "B");
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void set(uint64_t done);  // cheap: draws at most a few times a second
  void add(uint64_t n) { set(done_ + n); }
  void finish();  // final line with the totals

 private:
  void draw(bool final);

  std::string what_, unit_;
  uint64_t total_, done_ = 0;
  bool tty_, enabled_, finished_ = false, drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "12.3 MB", "4.56 GB" for byte counts; "1.23 M" for other units.
std::string human_count(double value, const std::string& unit);
// "42s", "3m07s", "5h12m", "2d03h" (rounded to the second, then cut to two units).
std::string human_duration(double seconds);

}  // namespace meg
