// The metrics file of a training run (JSON lines, appended to across resumed runs), written so that
// a run that is killed or fails keeps the metrics of every iteration it finished, in whole lines:
// each line goes to the file in one write(2) as it is logged (a kill cannot tear it), and a write
// that fails, or stops short as on a full disk, is cut back off the file and reported at once
// rather than losing the rest of the run's metrics in silence.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace meg {

class MetricsFile {
 public:
  MetricsFile() = default;
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  // Creates PATH or appends to it; InputError naming it when it cannot.
  void open(const std::string& path);
  bool is_open() const { return fd_ >= 0; }
  // LINE as one JSON line; InputError naming the file when it cannot be written whole.
  void write(const nlohmann::ordered_json& line);

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace meg
