// safetensors: the tensor container of meg's checkpoints and of Hugging Face interchange.
//
// A file is an 8-byte little-endian length N, then N bytes of UTF-8 JSON, then the data section:
//
//   {"__metadata__": {"format": "pt"},                        optional, string -> string
//    "NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]}, ...}
//
// Offsets are relative to the start of the data section, which follows the header. Tensors are
// contiguous, row-major and little-endian, and together cover the data section exactly: no gaps,
// no overlaps, nothing after the last one (the reference implementation refuses such files too).
// Writers pad the header with spaces to a multiple of 8 bytes, so the data starts 8-byte aligned.
//
// SafetensorsWriter streams a file through ByteWriter (temporary name, renamed into place on
// commit) and returns the XXH64 of the whole file; SafetensorsFile maps a file and checks every
// part of it, throwing a one-line InputError naming the file and the problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/byte_stream.hpp"
#include "core/hash.hpp"
#include "core/mapped_file.hpp"

namespace meg {

// Element types, in the reference implementation's order (increasing alignment): its writer sorts
// tensors by this order, descending, so the declaration order here is part of the format.
enum class SafetensorsDtype : uint8_t {
  kBool, kU8, kI8, kF8E5M2, kF8E4M3, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kF64, kI64, kU64
};

size_t dtype_size(SafetensorsDtype d);               // bytes per element
std::string_view dtype_name(SafetensorsDtype d);     // "F32", "BF16", "BOOL", ...
std::optional<SafetensorsDtype> parse_dtype(std::string_view name);

using SafetensorsMetadata = std::map<std::string, std::string>;

// One tensor of a file: its bytes are a view of the mapped file.
struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<uint64_t> shape;       // [] is a scalar
  uint64_t begin = 0, end = 0;       // data_offsets, relative to the data section
  std::span<const uint8_t> bytes;

  uint64_t numel() const;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // InputError on anything malformed

  const std::string& path() const { return file_.path(); }
  // Tensors in file order (by data offset; for files meg writes, also the header order).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const SafetensorsTensor& tensor(const std::string& name) const;  // InputError when absent
  // InputError also when it is of another dtype or shape.
  const SafetensorsTensor& tensor(const std::string& name, SafetensorsDtype dtype,
                                  const std::vector<uint64_t>& shape) const;
  const SafetensorsMetadata& metadata() const { return metadata_; }

  uint64_t header_size() const { return header_size_; }    // N, padding included
  uint64_t data_offset() const { return 8 + header_size_; }
  uint64_t file_size() const { return file_.size(); }

  // XXH64 of the whole file, as SafetensorsWriter::commit() returns it.
  uint64_t checksum() const;
  // InputError naming the file when its checksum is not EXPECTED.
  void verify_checksum(uint64_t expected) const;

 private:
  MappedFile file_;
  uint64_t header_size_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  SafetensorsMetadata metadata_;
};

// Writes a file in two phases, so that tensors far larger than memory can be streamed:
//
//   SafetensorsWriter w(path, metadata);
//   w.declare("a", SafetensorsDtype::kF32, {2, 3});  ...    every tensor, before any byte
//   w.write_header();
//   for (const auto& name : w.order()) w.write(name, bytes, n);   in chunks if need be
//   uint64_t xxh = w.commit();
//
// Order::kDeclared (the default) lays tensors out in the order declared. Order::kReference lays
// them out as Hugging Face's safetensors writer does: by dtype alignment, largest first, then by
// name; with it a file is byte-identical to the reference's. Either way the header lists
// "__metadata__" first (omitted when empty, its keys sorted), then the tensors in data order, as
// compact JSON padded with spaces to a multiple of 8 bytes.
//
// Misuse (a tensor declared twice, bytes out of order, commit before every byte) is a bug in
// the caller and throws std::logic_error.
class SafetensorsWriter {
 public:
  enum class Order { kDeclared, kReference };

  explicit SafetensorsWriter(const std::string& path, SafetensorsMetadata metadata = {},
                             Order order = Order::kDeclared);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  void declare(const std::string& name, SafetensorsDtype dtype, std::vector<uint64_t> shape);
  void write_header();
  // Names in data order; valid after write_header().
  const std::vector<std::string>& order() const { return order_; }
  // Appends N bytes to tensor NAME: the tensor being written, or the next one once it is full.
  void write(const std::string& name, const void* data, size_t n);
  // Checks every tensor is whole, syncs and renames into place; returns the file's XXH64.
  uint64_t commit();

  uint64_t bytes_written() const;

 private:
  struct Entry {
    std::string name;
    SafetensorsDtype dtype;
    std::vector<uint64_t> shape;
    uint64_t nbytes = 0, begin = 0, written = 0;
  };
  void emit(const void* data, size_t n);

  std::unique_ptr<ByteWriter> out_;
  SafetensorsMetadata metadata_;
  Order layout_;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in entries_ (data order)
  std::vector<std::string> order_;
  size_t current_ = 0;
  bool header_written_ = false, committed_ = false;
  Hasher hasher_;
};

// One tensor held in memory: DATA holds its numel * dtype size bytes, row-major; [] is a scalar.
struct SafetensorsInput {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<uint64_t> shape;
  const void* data;
};

// Declares TENSORS on W, writes its header, then every tensor's bytes in W's order (no commit).
void write_tensors(SafetensorsWriter& w, const std::vector<SafetensorsInput>& tensors);

// Writes TENSORS to PATH in one go; returns the file's XXH64.
uint64_t write_safetensors(const std::string& path, const std::vector<SafetensorsInput>& tensors,
                           const SafetensorsMetadata& metadata = {},
                           SafetensorsWriter::Order order = SafetensorsWriter::Order::kDeclared);

}  // namespace meg
