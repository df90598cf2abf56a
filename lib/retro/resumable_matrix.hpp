// A matrix file (retro/matrix_file.hpp) whose rows are computed in order over one or more runs:
// the embeddings and the neighbour table, hours of work on a large corpus, survive an interrupted
// run.
//
// The rows land in PATH.partial, a matrix file created at its full size whose header carries the
// work's fingerprint (its checksum is 0 until the end). After each block of rows is written and
// synced, PATH.progress (JSON {"fingerprint": HEX, "rows": N}, replaced atomically) records how
// many rows are final. A later writer of the same shape and fingerprint resumes after those rows;
// any other starts again from row 0. commit() writes the checksum and renames the file to PATH, so
// a file under PATH is always whole.
//
// For tests of resumption, MEG_RETRO_INTERRUPT_AFTER=N kills the process (SIGKILL, as a crash or
// kill -9 would) right after its Nth block has been recorded.
#pragma once

#include <cstdint>
#include <string>

#include "retro/matrix_file.hpp"

namespace meg {

class ResumableMatrixWriter {
 public:
  ResumableMatrixWriter(const std::string& path, MatrixDtype dtype, uint64_t rows, uint64_t cols,
                        uint64_t fingerprint);
  ~ResumableMatrixWriter();  // closes; an uncommitted file stays for the next run to resume
  ResumableMatrixWriter(const ResumableMatrixWriter&) = delete;
  ResumableMatrixWriter& operator=(const ResumableMatrixWriter&) = delete;

  uint64_t rows() const { return header_.rows; }
  uint64_t rows_done() const { return done_; }  // rows final on disk; the next append() starts there

  // Writes the next N rows from DATA, syncs them and records the progress.
  void append(const void* data, uint64_t n);
  // Every row written: fills in the checksum, renames the file into place and removes the
  // progress record. Returns the file's size.
  uint64_t commit();

 private:
  bool resume();
  void start();
  uint64_t row_bytes() const { return header_.cols * matrix_dtype_size(header_.dtype); }

  std::string path_, partial_, progress_;
  MatrixHeader header_{};
  int fd_ = -1;
  uint64_t done_ = 0;
};

}  // namespace meg
