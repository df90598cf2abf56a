// TensorBoard event files, written without TensorFlow or a protobuf library (man/meg-formats.5,
// TENSORBOARD EVENT FILE).
//
// The file DIR/events.out.tfevents.SECONDS.HOST.PID is a sequence of TFRecords
//   uint64 length | uint32 masked CRC-32C of the length's 8 bytes | data | uint32 masked CRC-32C of data
// (little-endian; core/crc32c.hpp), each holding one tensorboard.Event protocol buffer
// (tensorboard/compat/proto/event.proto, summary.proto):
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5;
//             SessionLog session_log = 7; SourceMetadata source_metadata = 10 }
//   Summary { repeated Value value = 1 }   Value { string tag = 1; float simple_value = 2 }
//   SessionLog { SessionStatus status = 1 (START = 1) }   SourceMetadata { string writer = 1 }
// The first record says file_version "brain.Event:2" and the writer. The second is a SessionLog
// START at the run's first step, as TensorFlow and PyTorch write one when a run resumes: TensorBoard
// then drops what older files of the directory hold from that step on (a run that was killed after
// its last checkpoint, and logs those steps again). Every later record holds the scalars of a step. Each record reaches the file whole as it is written (core/append_file.hpp),
// so a run that crashes keeps every record before the crash.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/append_file.hpp"

namespace meg {

struct TensorBoardScalar {
  std::string tag;  // "lm loss", "learning-rate", ...
  float value = 0;  // TensorBoard keeps scalars as float
};

class TensorBoardWriter {
 public:
  // Creates DIR when missing and a new event file in it, for a run whose first step is FIRST_STEP;
  // InputError naming DIR when it cannot.
  TensorBoardWriter(const std::string& dir, int64_t first_step);

  const std::string& path() const { return file_.path(); }
  // One event at STEP holding SCALARS, stamped with the time of day.
  void add_scalars(int64_t step, std::span<const TensorBoardScalar> scalars);

 private:
  void write_event(const std::string& event);

  AppendFile file_;
};

}  // namespace meg
