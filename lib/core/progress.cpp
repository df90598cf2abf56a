#include "core/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/log.hpp"

namespace meg {
namespace {
constexpr auto kTerminalInterval = std::chrono::milliseconds(200);
constexpr auto kLogInterval = std::chrono::seconds(30);
}  // namespace

std::string human_duration(double seconds) {
  if (!std::isfinite(seconds)) return "?";
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s / 60 % 60);
  return fmt::format("{}d{:02}h", s / 86400, s / 3600 % 24);
}

std::string human_count(double value, const std::string& unit) {
  static const char* kPrefixes[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (value >= 1000 && i < 5) {
    value /= 1000;
    ++i;
  }
  return i == 0 ? fmt::format("{:.0f} {}", value, unit) : fmt::format("{:.2f} {}{}", value, kPrefixes[i], unit);
}

Progress::Progress(std::string what, uint64_t total, std::string unit)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      total_(total),
      tty_(::isatty(STDERR_FILENO) == 1),
      enabled_(!log::quiet()),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() {
  if (tty_ && drawn_ && !finished_) {  // interrupted: leave the cursor on a fresh line
    ssize_t ignored = ::write(STDERR_FILENO, "\n", 1);
    (void)ignored;
  }
}

void Progress::set(uint64_t done) {
  done_ = done;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < (tty_ ? kTerminalInterval : std::chrono::duration_cast<std::chrono::milliseconds>(kLogInterval)))
    return;
  last_draw_ = now;
  draw(false);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_ && drawn_) draw(true);  // short work that never showed progress needs no total either
}

void Progress::draw(bool final) {
  drawn_ = true;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = secs > 0 ? done_ / secs : 0;
  std::string line = fmt::format("{}: {}", what_, human_count(done_, unit_));
  if (total_ > 0 && !final) {
    const double frac = std::min(1.0, double(done_) / total_);
    const double left = rate > 0 ? (total_ - std::min(done_, total_)) / rate : 0;
    line += fmt::format(" of {} ({:.1f}%), {}/s, {} left", human_count(total_, unit_), 100 * frac,
                        human_count(rate, unit_), human_duration(left));
  } else {
    line += fmt::format(", {}/s, {}", human_count(rate, unit_), human_duration(secs));
  }
  if (tty_) {
    const std::string out = "\r" + log::program() + ": " + line + "\x1b[K" + (final ? "\n" : "");
    ssize_t ignored = ::write(STDERR_FILENO, out.data(), out.size());
    (void)ignored;
  } else {
    log::write_line(line);
  }
}

}  // namespace meg
