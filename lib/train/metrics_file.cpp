#include "train/metrics_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "core/error.hpp"

namespace meg {

MetricsFile::~MetricsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::open(const std::string& path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) system_error(path, "cannot open for appending");
  path_ = path;
}

void MetricsFile::write(const nlohmann::ordered_json& line) {
  const std::string text = line.dump() + '\n';
  const off_t start = ::lseek(fd_, 0, SEEK_END);  // where the line begins (the file may have grown)
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int err = n < 0 ? errno : ENOSPC;  // a write of nothing: the disk is full
    if (done > 0 && start >= 0) {  // the part written comes off again: the file holds whole lines only
      const int cut = ::ftruncate(fd_, start);
      (void)cut;
    }
    errno = err;
    system_error(path_, "cannot write the metrics");
  }
}

}  // namespace meg
