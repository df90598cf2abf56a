#include "core/byte_stream.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/stdout.hpp"

namespace meg {
namespace {
constexpr size_t kBufferSize = 1 << 20;
constexpr uint64_t kWritebackChunk = 8 << 20;
constexpr uint8_t kZstdMagic[4] = {0x28, 0xB5, 0x2F, 0xFD};

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// Removes DIR/.NAME.tmp.HOST.PID files whose writer died: same host, no such process. A writer
// on another host sharing the directory, or one alive here, is left alone.
void remove_stale_temps(const std::filesystem::path& dir, const std::string& name, const std::string& host) {
  const std::string prefix = "." + name + ".tmp." + host + ".";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.size() <= prefix.size() || file.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid_text = file.substr(prefix.size());
    if (pid_text.find_first_not_of("0123456789") != std::string::npos || pid_text.size() > 9) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) std::filesystem::remove(entry.path(), ec);
  }
}
}  // namespace

struct ByteReader::ZstdState {
  ZSTD_DStream* stream = ZSTD_createDStream();
  size_t pending = 0;  // last ZSTD_decompressStream result: 0 once a frame is complete
  ~ZstdState() { ZSTD_freeDStream(stream); }
};

struct ByteWriter::ZstdState {
  ZSTD_CStream* stream = ZSTD_createCStream();
  ~ZstdState() { ZSTD_freeCStream(stream); }
};

// ---------------------------------------------------------------------------------------------
// ByteReader

ByteReader::ByteReader(const std::string& path)
    : path_(path == "-" ? "<stdin>" : path), raw_(kBufferSize), out_(kBufferSize) {
  if (path == "-") {
    fd_ = STDIN_FILENO;
  } else {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) system_error(path, "cannot open");
    own_fd_ = true;
  }
  struct stat st {};
  if (::fstat(fd_, &st) == 0) {
    if (S_ISDIR(st.st_mode)) input_error("{}: is a directory", path_);
    if (S_ISREG(st.st_mode)) raw_size_ = static_cast<uint64_t>(st.st_size);
  }
  // Peek at the first bytes to recognise a zstd frame.
  while (raw_len_ < sizeof(kZstdMagic) && fill_raw() > 0) {
  }
  if (raw_len_ >= sizeof(kZstdMagic) && std::memcmp(raw_.data(), kZstdMagic, sizeof(kZstdMagic)) == 0) {
    zstd_ = std::make_unique<ZstdState>();
    ZSTD_initDStream(zstd_->stream);
  }
}

ByteReader::~ByteReader() {
  if (own_fd_) ::close(fd_);
}

size_t ByteReader::fill_raw() {
  if (raw_eof_) return 0;
  if (raw_pos_ > 0) {  // keep unread bytes at the front
    std::memmove(raw_.data(), raw_.data() + raw_pos_, raw_len_ - raw_pos_);
    raw_len_ -= raw_pos_;
    raw_pos_ = 0;
  }
  for (;;) {
    const ssize_t n = ::read(fd_, raw_.data() + raw_len_, raw_.size() - raw_len_);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) system_error(path_, "read failed");
    if (n == 0) raw_eof_ = true;
    raw_len_ += static_cast<size_t>(n);
    raw_consumed_ += static_cast<uint64_t>(n);
    return static_cast<size_t>(n);
  }
}

bool ByteReader::refill() {
  out_pos_ = out_len_ = 0;
  if (!zstd_) {
    if (raw_pos_ == raw_len_ && fill_raw() == 0) return false;
    // Hand raw bytes over by swapping buffers: no copy for uncompressed input.
    std::swap(raw_, out_);
    out_pos_ = raw_pos_;
    out_len_ = raw_len_;
    raw_pos_ = raw_len_ = 0;
    if (raw_.size() < kBufferSize) raw_.resize(kBufferSize);
    return out_len_ > out_pos_;
  }
  while (out_len_ == 0) {
    if (raw_pos_ == raw_len_ && fill_raw() == 0) {
      if (zstd_->pending != 0) input_error("{}: truncated zstd stream", path_);
      return false;
    }
    ZSTD_inBuffer in{raw_.data(), raw_len_, raw_pos_};
    ZSTD_outBuffer out{out_.data(), out_.size(), 0};
    const size_t ret = ZSTD_decompressStream(zstd_->stream, &out, &in);
    if (ZSTD_isError(ret))
      input_error("{}: corrupt zstd data near compressed offset {}: {}", path_,
                  raw_consumed_ - (raw_len_ - in.pos), ZSTD_getErrorName(ret));
    raw_pos_ = in.pos;
    out_len_ = out.pos;
    zstd_->pending = ret;
  }
  return true;
}

size_t ByteReader::read(void* out, size_t n) {
  auto* dst = static_cast<uint8_t*>(out);
  size_t done = 0;
  while (done < n) {
    if (out_pos_ == out_len_ && !refill()) break;
    const size_t take = std::min(n - done, out_len_ - out_pos_);
    std::memcpy(dst + done, out_.data() + out_pos_, take);
    out_pos_ += take;
    done += take;
  }
  offset_ += done;
  return done;
}

bool ByteReader::read_exact(void* out, size_t n, size_t* got) {
  const size_t r = read(out, n);
  if (got) *got = r;
  return r == n;
}

bool ByteReader::read_counted(std::vector<uint8_t>& buf, uint64_t n) {
  if (!zstd_ && raw_size_ > 0) {
    // A plain file: its size bounds what can follow (raw and handed-out bytes are the same here).
    if (n > raw_size_ - std::min(raw_size_, offset_)) return false;
    buf.resize(n);
    return read_exact(buf.data(), n);
  }
  buf.clear();
  while (buf.size() < n) {
    const size_t at = buf.size();
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n - at, std::max(kBufferSize, at)));
    buf.resize(at + take);
    size_t got = 0;
    if (!read_exact(buf.data() + at, take, &got)) {
      buf.resize(at + got);
      return false;
    }
  }
  return true;
}

bool ByteReader::at_end() { return out_pos_ == out_len_ && !refill(); }

// ---------------------------------------------------------------------------------------------
// ByteWriter

ByteWriter::ByteWriter(const std::string& path, int zstd_level)
    : path_(path == "-" ? "<stdout>" : path), buf_(kBufferSize) {
  if (path == "-") {
    fd_ = STDOUT_FILENO;
  } else {
    const std::filesystem::path dir = directory_of(path);
    const std::string name = std::filesystem::path(path).filename().string(), host = host_name();
    remove_stale_temps(dir, name, host);
    temp_path_ = (dir / fmt::format(".{}.tmp.{}.{}", name, host, ::getpid())).string();
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) system_error(path, "cannot create");
  }
  if (zstd_level > 0) {
    zstd_ = std::make_unique<ZstdState>();
    ZSTD_CCtx_setParameter(zstd_->stream, ZSTD_c_compressionLevel, zstd_level);
    // A checksum per frame, as the zstd tool writes: corruption is found on read, not trusted.
    ZSTD_CCtx_setParameter(zstd_->stream, ZSTD_c_checksumFlag, 1);
    zbuf_.resize(ZSTD_CStreamOutSize());
  }
}

ByteWriter::~ByteWriter() {
  if (temp_path_.empty()) return;
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

void ByteWriter::write_fd(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && temp_path_.empty()) stdout_failed(errno);  // "-": a closed pipe ends the tool quietly
    if (w < 0) system_error(path_, "write failed");
    p += w;
    n -= static_cast<size_t>(w);
    on_disk_ += static_cast<uint64_t>(w);
  }
#ifdef __linux__
  // Start writing back what is written so far, without waiting, so the fsync in commit() finds
  // little left to do: large outputs then cost about what an unsynced copy costs.
  if (!temp_path_.empty() && on_disk_ - synced_ >= kWritebackChunk) {
    ::sync_file_range(fd_, static_cast<off_t>(synced_), static_cast<off_t>(on_disk_ - synced_), SYNC_FILE_RANGE_WRITE);
    synced_ = on_disk_;
  }
#endif
}

void ByteWriter::flush_buffer(bool end) {
  if (!zstd_) {
    write_fd(buf_.data(), buf_len_);
    buf_len_ = 0;
    return;
  }
  ZSTD_inBuffer in{buf_.data(), buf_len_, 0};
  for (;;) {
    ZSTD_outBuffer out{zbuf_.data(), zbuf_.size(), 0};
    const size_t ret = ZSTD_compressStream2(zstd_->stream, &out, &in, end ? ZSTD_e_end : ZSTD_e_continue);
    if (ZSTD_isError(ret)) throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(ret));
    write_fd(zbuf_.data(), out.pos);
    if (end ? ret == 0 : in.pos == in.size) break;
  }
  buf_len_ = 0;
}

void ByteWriter::write(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  written_ += n;
  while (n > 0) {
    const size_t take = std::min(n, buf_.size() - buf_len_);
    std::memcpy(buf_.data() + buf_len_, p, take);
    buf_len_ += take;
    p += take;
    n -= take;
    if (buf_len_ == buf_.size()) flush_buffer(false);
  }
}

void ByteWriter::sync() {
  if (synced_all_) return;
  flush_buffer(true);
  if (!temp_path_.empty()) {
    if (::fsync(fd_) != 0) system_error(path_, "fsync failed");
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) system_error(path_, "close failed");
  }
  synced_all_ = true;
}

void ByteWriter::commit() {
  if (committed_) return;
  sync();
  committed_ = true;
  if (temp_path_.empty()) return;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    ::unlink(temp_path_.c_str());
    system_error(path_, "cannot rename into place");
  }
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) system_error(dir, "cannot open directory to sync it");
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    system_error(dir, "fsync of directory failed");
  }
  ::close(fd);
}

std::string directory_of(const std::string& path) {
  const std::filesystem::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

}  // namespace meg
