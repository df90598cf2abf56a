#include "data/document_reader.hpp"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "core/json_file.hpp"
#include "tokenizer/tokenizer.hpp"

namespace meg {

RecordReader::RecordReader(const std::string& path, const DocumentFormat& format) : in_(path), format_(format) {}

bool RecordReader::next_batch(RecordBatch& b, size_t target_bytes) {
  b.path = in_.path();
  b.records.clear();
  b.data = std::move(pending_);
  pending_.clear();

  const bool by_line = !format_.separator.has_value();
  uint64_t line = line_;       // number of the line starting at `pos`
  size_t pos = 0;              // start of the first line not yet looked at
  bool open = false;           // separator mode: a record has begun and not ended
  size_t open_begin = 0, open_end = 0;
  uint64_t open_line = 0;
  size_t record_bytes = 0;

  auto close_open = [&] {
    b.records.push_back({open_begin, open_end, open_line});
    record_bytes += open_end - open_begin;
    open = false;
  };
  auto take_line = [&](size_t begin, size_t end) {  // [begin, end) without its '\n'
    if (by_line) {
      b.records.push_back({begin, end, line});
      record_bytes += end - begin;
    } else {
      size_t e = end;
      if (e > begin && b.data[e - 1] == '\r') --e;  // CRLF files: "\r\n" ends a separator line too
      if (std::string_view(b.data).substr(begin, e - begin) == *format_.separator) {
        if (open) close_open();
      } else {
        if (!open) open = true, open_begin = begin, open_line = line;
        open_end = end;
      }
    }
    ++line;
  };

  for (;;) {
    if (!eof_) {
      const size_t old = b.data.size(), want = std::max<size_t>(target_bytes, 1 << 16);
      b.data.resize(old + want);
      const size_t got = in_.read(b.data.data() + old, want);
      b.data.resize(old + got);
      if (got == 0) eof_ = true;
    }
    for (size_t nl; (nl = b.data.find('\n', pos)) != std::string::npos; pos = nl + 1) take_line(pos, nl);
    if (eof_) {
      if (pos < b.data.size()) take_line(pos, b.data.size());  // last line without a newline
      if (open) close_open();
      break;
    }
    if (!b.records.empty() && record_bytes >= target_bytes / 2) {
      // Carry the unfinished line (and, in separator mode, the unfinished record) to the next batch.
      const size_t carry = open ? open_begin : pos;
      pending_.assign(b.data, carry, std::string::npos);
      b.data.resize(carry);
      line_ = open ? open_line : line;
      break;
    }
  }
  if (eof_) line_ = line;
  b.raw_bytes = in_.raw_consumed();
  return !b.records.empty();
}

RecordProblem extract_document(const RecordBatch& batch, size_t i, const DocumentFormat& format, std::string& text,
                               std::string& message) {
  const auto& r = batch.records[i];
  std::string_view raw(batch.data.data() + r.begin, r.end - r.begin);
  const auto where = [&] { return fmt::format("{}:{}", batch.path, r.line + 1); };

  size_t bad = 0;
  if (!valid_utf8(raw, &bad)) {
    // The line number of a multi-line record's bad byte, for blank-line separated text.
    uint64_t line = r.line;
    size_t line_start = 0;
    for (size_t k = 0; k < bad; ++k)
      if (raw[k] == '\n') ++line, line_start = k + 1;
    message = fmt::format("{}:{}: invalid UTF-8 at column {} (byte 0x{:02x})", batch.path, line + 1,
                          bad - line_start + 1, static_cast<unsigned char>(raw[bad]));
    return RecordProblem::kBad;
  }

  if (!format.jsonl) {
    if (format.separator.has_value()) {
      text.assign(raw);
    } else {
      text.assign(raw.substr(0, raw.size() - (raw.ends_with('\r') ? 1 : 0)));
    }
    if (text.empty()) {
      message = where() + ": empty document";
      return RecordProblem::kEmpty;
    }
    return RecordProblem::kNone;
  }

  if (raw.find_first_not_of(" \t\r") == std::string_view::npos) {
    message = where() + ": empty line where a JSON object was expected";
    return RecordProblem::kEmpty;
  }
  nlohmann::json j;
  message = parse_json_record(raw, batch.path, r.line + 1, j);
  if (!message.empty()) return RecordProblem::kBad;
  const auto it = j.find(format.json_key);
  if (it == j.end()) {
    message = fmt::format("{}: no \"{}\" key (choose the key with --json-key)", where(), format.json_key);
    return RecordProblem::kBad;
  }
  if (!it->is_string()) {
    message = fmt::format("{}: \"{}\" is a {}, not a string", where(), format.json_key, it->type_name());
    return RecordProblem::kBad;
  }
  text = it->get_ref<const std::string&>();
  if (text.empty()) {
    message = fmt::format("{}: empty document (\"{}\" is \"\")", where(), format.json_key);
    return RecordProblem::kEmpty;
  }
  return RecordProblem::kNone;
}

}  // namespace meg
