#include "retro/resumable_matrix.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/byte_stream.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/json_file.hpp"

namespace meg {
namespace {

void write_all(int fd, const void* data, uint64_t n, uint64_t offset, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      system_error(path, "write failed");
    }
    p += w;
    n -= static_cast<uint64_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

// The test hook of the header comment: blocks recorded by this process so far.
void maybe_interrupt() {
  static const long limit = [] {
    const char* env = std::getenv("MEG_RETRO_INTERRUPT_AFTER");
    return env ? std::strtol(env, nullptr, 10) : 0L;
  }();
  static long blocks = 0;
  if (limit > 0 && ++blocks >= limit) std::raise(SIGKILL);
}

}  // namespace

ResumableMatrixWriter::ResumableMatrixWriter(const std::string& path, MatrixDtype dtype, uint64_t rows,
                                             uint64_t cols, uint64_t fingerprint)
    : path_(path), partial_(path + ".partial"), progress_(path + ".progress") {
  std::memcpy(header_.magic, kMatrixMagic, sizeof header_.magic);
  header_.version = kMatrixVersion;
  header_.dtype = dtype;
  header_.rows = rows;
  header_.cols = cols;
  header_.fingerprint = fingerprint;
  if (!resume()) start();
}

ResumableMatrixWriter::~ResumableMatrixWriter() {
  if (fd_ >= 0) ::close(fd_);
}

bool ResumableMatrixWriter::resume() {
  if (!std::filesystem::exists(progress_) || !std::filesystem::exists(partial_)) return false;
  uint64_t rows = 0;
  try {
    const auto progress = read_json_file(progress_);
    if (progress.value("fingerprint", "") != hex64(header_.fingerprint)) return false;
    rows = progress.at("rows").get<uint64_t>();
  } catch (const std::exception&) {
    return false;  // an unreadable record: the work starts again
  }
  const int fd = ::open(partial_.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  MatrixHeader on_disk{};
  struct stat st {};
  const bool same = ::pread(fd, &on_disk, sizeof on_disk, 0) == ssize_t(sizeof on_disk) && ::fstat(fd, &st) == 0 &&
                    std::memcmp(&on_disk, &header_, sizeof on_disk) == 0 && rows <= header_.rows &&
                    uint64_t(st.st_size) == sizeof(MatrixHeader) + header_.rows * row_bytes();
  if (!same) {
    ::close(fd);
    return false;
  }
  fd_ = fd;
  done_ = rows;
  return true;
}

void ResumableMatrixWriter::start() {
  std::filesystem::remove(progress_);
  fd_ = ::open(partial_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) system_error(partial_, "cannot create");
  write_all(fd_, &header_, sizeof header_, 0, partial_);
  if (::ftruncate(fd_, static_cast<off_t>(sizeof(MatrixHeader) + header_.rows * row_bytes())) != 0)
    system_error(partial_, "cannot size");
  done_ = 0;
}

void ResumableMatrixWriter::append(const void* data, uint64_t n) {
  if (done_ + n > header_.rows) throw std::logic_error("ResumableMatrixWriter: more rows than the matrix holds");
  write_all(fd_, data, n * row_bytes(), sizeof(MatrixHeader) + done_ * row_bytes(), partial_);
  if (::fdatasync(fd_) != 0) system_error(partial_, "sync failed");
  done_ += n;
  write_json_file(progress_, {{"fingerprint", hex64(header_.fingerprint)}, {"rows", done_}});
  maybe_interrupt();
}

uint64_t ResumableMatrixWriter::commit() {
  if (done_ != header_.rows) throw std::logic_error("ResumableMatrixWriter: commit before every row is written");
  Hasher hash;
  std::vector<uint8_t> buf(size_t(16) << 20);
  const uint64_t bytes = header_.rows * row_bytes();
  for (uint64_t at = 0; at < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - at));
    if (::pread(fd_, buf.data(), n, static_cast<off_t>(sizeof(MatrixHeader) + at)) != ssize_t(n))
      system_error(partial_, "read back failed");
    hash.update(buf.data(), n);
    at += n;
  }
  header_.checksum = hash.digest();
  write_all(fd_, &header_, sizeof header_, 0, partial_);
  if (::fsync(fd_) != 0) system_error(partial_, "sync failed");
  ::close(fd_);
  fd_ = -1;
  std::filesystem::rename(partial_, path_);
  std::filesystem::remove(progress_);
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  sync_directory(dir.empty() ? "." : dir);
  return sizeof(MatrixHeader) + bytes;
}

}  // namespace meg
