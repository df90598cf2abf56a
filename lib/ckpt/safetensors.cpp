#include "ckpt/safetensors.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_file.hpp"

namespace meg {

namespace {

using ojson = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderSize = 100'000'000;  // the reference implementation's limit

struct DtypeInfo {
  SafetensorsDtype dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DtypeInfo, 15> kDtypes = {{
    {SafetensorsDtype::kBool, "BOOL", 1},     {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},         {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1}, {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},       {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2},     {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},       {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF64, "F64", 8},       {SafetensorsDtype::kI64, "I64", 8},
    {SafetensorsDtype::kU64, "U64", 8},
}};

const DtypeInfo& info(SafetensorsDtype d) { return kDtypes.at(static_cast<size_t>(d)); }

// numel * element size, or nullopt when it overflows 64 bits.
std::optional<uint64_t> byte_size(const std::vector<uint64_t>& shape, SafetensorsDtype dtype) {
  uint64_t n = dtype_size(dtype);
  for (uint64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  return n;
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// A JSON string literal as serde_json writes it: only '"', '\\' and control characters escaped.
std::string json_string(const std::string& s) {
  return ojson(s).dump(-1, ' ', false, ojson::error_handler_t::strict);
}

// A header string for error messages: JSON-escaped, so it cannot break the line.
std::string quote_name(const std::string& s) {
  return ojson(s).dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string_view json_type(const ojson& v) {
  if (v.is_number_unsigned()) return "a non-negative integer";
  if (v.is_number_integer()) return "a negative integer";
  if (v.is_number_float()) return "a fraction";
  return v.type_name();  // "object", "array", "string", "boolean", "null"
}

}  // namespace

size_t dtype_size(SafetensorsDtype d) { return info(d).size; }

std::string_view dtype_name(SafetensorsDtype d) { return info(d).name; }

std::optional<SafetensorsDtype> parse_dtype(std::string_view name) {
  for (const auto& d : kDtypes)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

uint64_t SafetensorsTensor::numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Reading

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const uint8_t* bytes = file_.data();
  const uint64_t size = file_.size();
  if (size < 8) input_error("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length", path, size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxHeaderSize)
    input_error("{}: header length {} is larger than the {}-byte limit (not a safetensors file?)", path, n,
                kMaxHeaderSize);
  if (n > size - 8)
    input_error("{}: header length {} runs past the end of the file ({} bytes; truncated?)", path, n, size);
  header_size_ = n;
  const uint64_t data_size = size - 8 - n;

  // A repeated key is refused: nlohmann would keep the last silently, another reader the first.
  const char* text = reinterpret_cast<const char*>(bytes + 8);
  JsonSource source(path);
  source.offset = 8;
  source.unique_keys = true;
  const auto header = parse_json<ojson>(std::string_view(text, n), source);
  if (!header.is_object()) input_error("{}: header is {}, not a JSON object", path, json_type(header));

  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) input_error("{}: __metadata__ is {}, not an object", path, json_type(value));
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string())
          input_error("{}: __metadata__ {}: value is {}, not a string", path, quote_name(key), json_type(v));
        metadata_[key] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = fmt::format("{}: tensor {}", path, quote_name(name));
    if (!value.is_object()) input_error("{}: entry is {}, not an object", where, json_type(value));
    for (const auto& [key, v] : value.items()) {
      (void)v;
      if (key != "dtype" && key != "shape" && key != "data_offsets")
        input_error("{}: unexpected field {}", where, quote_name(key));
    }
    SafetensorsTensor t;
    t.name = name;

    const auto dt = value.find("dtype");
    if (dt == value.end()) input_error("{}: no dtype", where);
    if (!dt->is_string()) input_error("{}: dtype is {}, not a string", where, json_type(*dt));
    const auto dtype = parse_dtype(dt->get<std::string>());
    if (!dtype) input_error("{}: unknown dtype {}", where, quote_name(dt->get<std::string>()));
    t.dtype = *dtype;

    const auto sh = value.find("shape");
    if (sh == value.end()) input_error("{}: no shape", where);
    if (!sh->is_array()) input_error("{}: shape is {}, not an array of non-negative integers", where, json_type(*sh));
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned())
        input_error("{}: shape holds {}, not a non-negative integer", where, json_type(d));
      t.shape.push_back(d.get<uint64_t>());
    }

    const auto off = value.find("data_offsets");
    if (off == value.end()) input_error("{}: no data_offsets", where);
    if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      input_error("{}: data_offsets is not [begin, end] with non-negative integers: {}", where,
                  off->dump(-1, ' ', false, ojson::error_handler_t::replace));
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.begin > t.end) input_error("{}: data_offsets [{}, {}] end before they begin", where, t.begin, t.end);
    if (t.end > data_size)
      input_error("{}: data_offsets [{}, {}] run past the end of the {}-byte data section (truncated file?)", where,
                  t.begin, t.end, data_size);
    const auto need = byte_size(t.shape, t.dtype);
    if (!need)
      input_error("{}: shape {} of {} overflows 64 bits", where, shape_string(t.shape), dtype_name(t.dtype));
    if (*need != t.end - t.begin)
      input_error("{}: data_offsets [{}, {}] hold {} bytes but {} {} needs {}", where, t.begin, t.end,
                  t.end - t.begin, dtype_name(t.dtype), shape_string(t.shape), *need);
    t.bytes = {bytes + 8 + n + t.begin, static_cast<size_t>(t.end - t.begin)};
    tensors_.push_back(std::move(t));
  }

  // The tensors must tile the data section: sorted by offset, each begins where the last ended.
  std::stable_sort(tensors_.begin(), tensors_.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  uint64_t at = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const auto& t : tensors_) {
    if (t.begin > at)
      input_error("{}: data bytes [{}, {}) belong to no tensor (gap before tensor {})", path, at, t.begin,
                  quote_name(t.name));
    if (t.begin < at)
      input_error("{}: tensor {} at [{}, {}) overlaps tensor {} at [{}, {})", path, quote_name(t.name), t.begin, t.end,
                  quote_name(previous->name), previous->begin, previous->end);
    at = t.end;
    if (t.end > t.begin || previous == nullptr) previous = &t;
  }
  if (at != data_size)
    input_error("{}: data bytes [{}, {}) after the last tensor belong to no tensor", path, at, data_size);
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& t : tensors_) out.push_back(t.name);
  return out;
}

const SafetensorsTensor& SafetensorsFile::tensor(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) input_error("{}: no tensor named {}", path(), quote_name(name));
  return tensors_[it->second];
}

const SafetensorsTensor& SafetensorsFile::tensor(const std::string& name, SafetensorsDtype dtype,
                                                 const std::vector<uint64_t>& shape) const {
  const SafetensorsTensor& t = tensor(name);
  if (t.dtype != dtype)
    input_error("{}: tensor {} has dtype {}, expected {}", path(), quote_name(name), dtype_name(t.dtype),
                dtype_name(dtype));
  if (t.shape != shape)
    input_error("{}: tensor {} has shape {}, expected {}", path(), quote_name(name), shape_string(t.shape),
                shape_string(shape));
  return t;
}

uint64_t SafetensorsFile::checksum() const {
  Hasher h;
  constexpr size_t kChunk = size_t{64} << 20;
  for (size_t at = 0; at < file_.size(); at += kChunk) h.update(file_.data() + at, std::min(kChunk, file_.size() - at));
  return h.digest();
}

void SafetensorsFile::verify_checksum(uint64_t expected) const {
  const uint64_t got = checksum();
  if (got != expected)
    input_error("{}: checksum mismatch: xxh64 {} but {} was recorded (corrupt or replaced file)", path(), hex64(got),
                hex64(expected));
}

// ---------------------------------------------------------------------------------------------
// Writing

SafetensorsWriter::SafetensorsWriter(const std::string& path, SafetensorsMetadata metadata, Order order)
    : out_(std::make_unique<ByteWriter>(path)), metadata_(std::move(metadata)), layout_(order) {
  for (const auto& [k, v] : metadata_) {
    try {
      (void)json_string(k);
      (void)json_string(v);
    } catch (const nlohmann::json::exception&) {
      throw std::logic_error(fmt::format("{}: metadata {} is not valid UTF-8", path, quote_name(k)));
    }
  }
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::declare(const std::string& name, SafetensorsDtype dtype, std::vector<uint64_t> shape) {
  const std::string& path = out_->path();
  if (header_written_) throw std::logic_error(fmt::format("{}: tensor {} declared after the header", path, quote_name(name)));
  if (name == "__metadata__") throw std::logic_error(fmt::format("{}: a tensor cannot be named __metadata__", path));
  try {
    (void)json_string(name);
  } catch (const nlohmann::json::exception&) {
    throw std::logic_error(fmt::format("{}: tensor name {} is not valid UTF-8", path, quote_name(name)));
  }
  if (!index_.emplace(name, entries_.size()).second)
    throw std::logic_error(fmt::format("{}: tensor {} declared twice", path, quote_name(name)));
  const auto nbytes = byte_size(shape, dtype);
  if (!nbytes) throw std::logic_error(fmt::format("{}: tensor {}: shape overflows", path, quote_name(name)));
  entries_.push_back({name, dtype, std::move(shape), *nbytes, 0, 0});
}

void SafetensorsWriter::write_header() {
  if (header_written_) throw std::logic_error(fmt::format("{}: header written twice", out_->path()));
  if (layout_ == Order::kReference) {
    std::stable_sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
      if (a.dtype != b.dtype) return a.dtype > b.dtype;
      return a.name < b.name;  // byte order, as Rust compares strings
    });
  }
  index_.clear();
  order_.clear();
  uint64_t at = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    entries_[i].begin = at;
    at += entries_[i].nbytes;
    index_.emplace(entries_[i].name, i);
    order_.push_back(entries_[i].name);
  }

  std::string json = "{";
  bool first = true;
  if (!metadata_.empty()) {
    json += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata_) {
      if (!first) json += ',';
      first = false;
      json += json_string(k) + ':' + json_string(v);
    }
    json += '}';
    first = false;
  }
  for (const auto& e : entries_) {
    if (!first) json += ',';
    first = false;
    json += fmt::format("{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}", json_string(e.name),
                        dtype_name(e.dtype), fmt::join(e.shape, ","), e.begin, e.begin + e.nbytes);
  }
  json += '}';
  json.append((8 - json.size() % 8) % 8, ' ');

  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(json.size()) >> (8 * i));
  emit(len, 8);
  emit(json.data(), json.size());
  header_written_ = true;
  current_ = 0;
}

void SafetensorsWriter::write(const std::string& name, const void* data, size_t n) {
  const std::string& path = out_->path();
  if (!header_written_) throw std::logic_error(fmt::format("{}: tensor bytes before the header", path));
  const auto it = index_.find(name);
  if (it == index_.end()) throw std::logic_error(fmt::format("{}: tensor {} was not declared", path, quote_name(name)));
  const size_t i = it->second;
  // Move on from whole tensors (zero-size ones included) up to I; bytes may not skip a tensor.
  if (i < current_) throw std::logic_error(fmt::format("{}: tensor {} is already written", path, quote_name(name)));
  for (; current_ < i; ++current_) {
    const Entry& e = entries_[current_];
    if (e.written != e.nbytes)
      throw std::logic_error(fmt::format("{}: bytes for tensor {} before tensor {} is whole ({} of {} bytes)", path,
                                         quote_name(name), quote_name(e.name), e.written, e.nbytes));
  }
  Entry& e = entries_[i];
  if (n > e.nbytes - e.written)
    throw std::logic_error(fmt::format("{}: tensor {}: {} bytes more than its {}", path, quote_name(name),
                                       n - (e.nbytes - e.written), e.nbytes));
  emit(data, n);
  e.written += n;
}

uint64_t SafetensorsWriter::commit() {
  const std::string& path = out_->path();
  if (committed_) throw std::logic_error(fmt::format("{}: committed twice", path));
  if (!header_written_) write_header();
  for (const auto& e : entries_)
    if (e.written != e.nbytes)
      throw std::logic_error(fmt::format("{}: commit with tensor {} incomplete ({} of {} bytes)", path, quote_name(e.name),
                                         e.written, e.nbytes));
  out_->commit();
  committed_ = true;
  return hasher_.digest();
}

uint64_t SafetensorsWriter::bytes_written() const { return out_->bytes_written(); }

void SafetensorsWriter::emit(const void* data, size_t n) {
  if (n == 0) return;
  out_->write(data, n);
  hasher_.update(data, n);
}

void write_tensors(SafetensorsWriter& w, const std::vector<SafetensorsInput>& tensors) {
  std::unordered_map<std::string, const SafetensorsInput*> by_name;
  for (const auto& t : tensors) {
    w.declare(t.name, t.dtype, t.shape);
    by_name[t.name] = &t;
  }
  w.write_header();
  for (const auto& name : w.order()) {
    const SafetensorsInput& t = *by_name.at(name);
    w.write(name, t.data, static_cast<size_t>(*byte_size(t.shape, t.dtype)));
  }
}

uint64_t write_safetensors(const std::string& path, const std::vector<SafetensorsInput>& tensors,
                           const SafetensorsMetadata& metadata, SafetensorsWriter::Order order) {
  SafetensorsWriter w(path, metadata, order);
  write_tensors(w, tensors);
  return w.commit();
}

}  // namespace meg
