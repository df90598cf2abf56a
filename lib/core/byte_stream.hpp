// Buffered byte streams over files and stdin/stdout ("-"), with zstd on both sides.
//
// ByteReader recognises a zstd frame by its magic number and decompresses on the fly, so every
// reader in meg accepts compressed and plain input alike. ByteWriter never writes under the final
// name until commit(): output goes to a hidden temporary file beside it that is renamed into place,
// so a crash or an error never leaves a half-written file that looks whole. The temporary name,
// .NAME.tmp.HOST.PID, says whose it is: a writer removes those of NAME that a dead process of its
// own host left behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace meg {

class ByteReader {
 public:
  explicit ByteReader(const std::string& path);  // "-" is stdin
  ~ByteReader();
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  // Reads up to N bytes; returns fewer only at the end of the stream.
  size_t read(void* out, size_t n);
  // Reads exactly N bytes or returns false when the stream ends first (count read in *got).
  bool read_exact(void* out, size_t n, size_t* got = nullptr);
  // Reads exactly N bytes into BUF, N being a count the input itself declared, or returns false
  // when the stream ends first. A corrupt count must not cost gigabytes: against a plain file N is
  // checked with the bytes left before anything is allocated, and from a pipe or a compressed
  // stream (whose size is unknown) BUF grows in doubling chunks as bytes arrive.
  bool read_counted(std::vector<uint8_t>& buf, uint64_t n);
  bool at_end();  // true when no byte is left

  const std::string& path() const { return path_; }
  bool compressed() const { return zstd_ != nullptr; }
  uint64_t offset() const { return offset_; }         // decompressed bytes handed out so far
  uint64_t raw_consumed() const { return raw_consumed_; }  // bytes taken from the file, for progress
  uint64_t raw_size() const { return raw_size_; }    // size of a regular file, 0 for pipes

 private:
  size_t fill_raw();      // refills raw_ from the fd; returns bytes added
  bool refill();          // refills out_ (decompressing if needed); false at the end

  std::string path_;
  int fd_ = -1;
  bool own_fd_ = false;
  uint64_t raw_size_ = 0, raw_consumed_ = 0, offset_ = 0;
  std::vector<uint8_t> raw_, out_;
  size_t raw_pos_ = 0, raw_len_ = 0, out_pos_ = 0, out_len_ = 0;
  bool raw_eof_ = false;
  struct ZstdState;
  std::unique_ptr<ZstdState> zstd_;
};

class ByteWriter {
 public:
  // "-" is stdout (written as it comes: a pipe cannot be renamed). ZSTD_LEVEL > 0 compresses.
  explicit ByteWriter(const std::string& path, int zstd_level = 0);
  ~ByteWriter();  // without commit(): removes the temporary file
  ByteWriter(const ByteWriter&) = delete;
  ByteWriter& operator=(const ByteWriter&) = delete;

  void write(const void* data, size_t n);
  // Flushes and syncs the temporary file: after it the whole output is on disk, not yet in place.
  // Outputs that must appear together (a dataset's .bin and .idx) sync all before any commit().
  void sync();
  void commit();  // sync() if not done, then renames into place

  const std::string& path() const { return path_; }
  uint64_t bytes_written() const { return written_; }  // before compression

 private:
  void flush_buffer(bool end);
  void write_fd(const void* data, size_t n);

  std::string path_, temp_path_;
  int fd_ = -1;
  bool synced_all_ = false, committed_ = false;
  uint64_t written_ = 0;
  uint64_t on_disk_ = 0, synced_ = 0;  // bytes handed to the file, and those whose writeback began
  std::vector<uint8_t> buf_, zbuf_;
  size_t buf_len_ = 0;
  struct ZstdState;
  std::unique_ptr<ZstdState> zstd_;
};

// Makes what directory DIR holds (new names, renames) durable: fsync of the directory itself.
void sync_directory(const std::string& dir);
// The directory holding PATH: its parent, or "." for a bare name.
std::string directory_of(const std::string& path);

}  // namespace meg
