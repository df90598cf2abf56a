// Documents from JSONL or plain-text inputs, read in batches so tokenizing can run on many threads
// while the output keeps the input's order.
//
//   jsonl  one JSON object per line, the text under a key ("text" by default)
//   text   one document per line, or documents separated by a separator line ("" = blank line)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/byte_stream.hpp"

namespace meg {

struct DocumentFormat {
  bool jsonl = true;
  std::string json_key = "text";
  // Plain text only: unset = one document per line; set = documents end at a line equal to it.
  std::optional<std::string> separator;
};

// Whole records (lines, or separator-delimited blocks) of one input, with their first line numbers.
struct RecordBatch {
  std::string path;
  std::string data;
  struct Record {
    size_t begin, end;
    uint64_t line;
  };
  std::vector<Record> records;
  uint64_t raw_bytes = 0;  // bytes of input consumed up to the end of this batch, for progress
};

class RecordReader {
 public:
  RecordReader(const std::string& path, const DocumentFormat& format);
  // Fills BATCH with whole records, about TARGET_BYTES of them; false when the input is done.
  bool next_batch(RecordBatch& batch, size_t target_bytes);
  const ByteReader& input() const { return in_; }

 private:
  bool read_line(std::string& out);  // false at end

  ByteReader in_;
  DocumentFormat format_;
  uint64_t line_ = 0;
  std::string pending_;  // bytes read past the last whole line
  bool eof_ = false;
  std::vector<char> chunk_;
};

// Why a record is not a document.
enum class RecordProblem { kNone, kEmpty, kBad };

// Extracts the document text of record I of BATCH into TEXT. On a problem returns it and puts a
// one-line "FILE:LINE: ..." message in MESSAGE.
RecordProblem extract_document(const RecordBatch& batch, size_t i, const DocumentFormat& format, std::string& text,
                               std::string& message);

}  // namespace meg
