#include "core/append_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "core/error.hpp"

namespace meg {

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::open(const std::string& path, std::string what) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) system_error(path, "cannot open for appending");
  path_ = path;
  what_ = std::move(what);
}

void AppendFile::append(std::string_view record) {
  const off_t start = ::lseek(fd_, 0, SEEK_END);  // where the record begins (the file may have grown)
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int err = n < 0 ? errno : ENOSPC;  // a write of nothing: the disk is full
    if (done > 0 && start >= 0) {  // the part written comes off again: the file holds whole records only
      const int cut = ::ftruncate(fd_, start);
      (void)cut;
    }
    errno = err;
    system_error(path_, "cannot write " + what_);
  }
}

}  // namespace meg
