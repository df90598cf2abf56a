#include "train/tensorboard_writer.hpp"

#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "core/crc32c.hpp"
#include "core/error.hpp"

namespace meg {
namespace {

static_assert(std::endian::native == std::endian::little, "TFRecords and protobuf fixed fields are little-endian");

// Protocol buffer wire format: each field is a key (field number << 3 | wire type), then its value.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (uint64_t(field) << 3) | type); }

template <typename T>
void put_fixed(std::string& out, uint32_t field, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  put_key(out, field, sizeof(T) == 8 ? kFixed64 : kFixed32);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Event fields (event.proto), Summary and Summary.Value fields (summary.proto).
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5,
                   kEventSessionLog = 7, kSessionLogStatus = 1, kSessionStart = 1, kEventSourceMetadata = 10, kSourceMetadataWriter = 1, kSummaryValue = 1, kValueTag = 1,
                   kValueSimpleValue = 2;

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_fixed(e, kEventWallTime, wall_time);
  put_key(e, kEventStep, kVarint);
  put_varint(e, static_cast<uint64_t>(step));  // int64: a negative step takes ten bytes, as protobuf's
  return e;
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t first_step) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) input_error("--tensorboard-dir {}: cannot create: {}", dir, ec.message());
  const double now = wall_time_now();
  const std::string name =
      fmt::format("events.out.tfevents.{:010d}.{}.{}", static_cast<int64_t>(now), host_name(), ::getpid());
  file_.open((std::filesystem::path(dir) / name).string(), "the TensorBoard events");
  std::string first = event_header(now, 0);
  put_bytes(first, kEventFileVersion, "brain.Event:2");
  std::string source;
  put_bytes(source, kSourceMetadataWriter, "meg-pretrain");
  put_bytes(first, kEventSourceMetadata, source);
  write_event(first);
  std::string session;
  put_key(session, kSessionLogStatus, kVarint);
  put_varint(session, kSessionStart);
  std::string start = event_header(now, first_step);
  put_bytes(start, kEventSessionLog, session);
  write_event(start);
}

void TensorBoardWriter::add_scalars(int64_t step, std::span<const TensorBoardScalar> scalars) {
  std::string summary;
  for (const auto& s : scalars) {
    std::string value;
    put_bytes(value, kValueTag, s.tag);
    put_fixed(value, kValueSimpleValue, s.value);  // written even when 0: it is a oneof member
    put_bytes(summary, kSummaryValue, value);
  }
  std::string event = event_header(wall_time_now(), step);
  put_bytes(event, kEventSummary, summary);
  write_event(event);
}

void TensorBoardWriter::write_event(const std::string& event) {
  std::string record;
  const uint64_t length = event.size();
  record.append(reinterpret_cast<const char*>(&length), sizeof(length));
  const uint32_t length_crc = masked_crc32c(record), data_crc = masked_crc32c(event);
  record.append(reinterpret_cast<const char*>(&length_crc), sizeof(length_crc));
  record.append(event);
  record.append(reinterpret_cast<const char*>(&data_crc), sizeof(data_crc));
  file_.append(record);
}

}  // namespace meg
