// A file that grows by whole records (the JSON lines of a training run's metrics, the TFRecords of
// a TensorBoard event file), appended to across resumed runs, written so that a run that is killed
// or fails keeps every record it finished: each record goes to the file in one write(2) as it is
// made (a kill cannot tear it, and no buffer holds it back), and a write that fails, or stops
// short as on a full disk, is cut back off the file and reported at once rather than losing the
// rest of the run's records in silence.
#pragma once

#include <string>
#include <string_view>

namespace meg {

class AppendFile {
 public:
  AppendFile() = default;
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // Creates PATH or appends to it; InputError naming it when it cannot. WHAT names the contents in
  // the error of a failed write ("the metrics": "PATH: cannot write the metrics: REASON").
  void open(const std::string& path, std::string what);
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  // RECORD at the end of the file, whole or not at all; InputError naming the file when it cannot.
  void append(std::string_view record);

 private:
  int fd_ = -1;
  std::string path_, what_;
};

}  // namespace meg
