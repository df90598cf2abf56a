#include "retro/matrix_file.hpp"

#include <cstring>

#include "core/byte_stream.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"

namespace meg {

size_t matrix_dtype_size(MatrixDtype dtype) {
  switch (dtype) {
    case MatrixDtype::kF16: return 2;
    case MatrixDtype::kF32: return 4;
    case MatrixDtype::kI32: return 4;
    case MatrixDtype::kI64: return 8;
    case MatrixDtype::kU8: return 1;
  }
  return 0;
}

const char* matrix_dtype_name(MatrixDtype dtype) {
  switch (dtype) {
    case MatrixDtype::kF16: return "f16";
    case MatrixDtype::kF32: return "f32";
    case MatrixDtype::kI32: return "i32";
    case MatrixDtype::kI64: return "i64";
    case MatrixDtype::kU8: return "u8";
  }
  return "unknown";
}

uint64_t write_matrix(const std::string& path, MatrixDtype dtype, uint64_t rows, uint64_t cols, const void* data,
                      uint64_t fingerprint) {
  const uint64_t bytes = rows * cols * matrix_dtype_size(dtype);
  MatrixHeader h{};
  std::memcpy(h.magic, kMatrixMagic, sizeof h.magic);
  h.version = kMatrixVersion;
  h.dtype = dtype;
  h.rows = rows;
  h.cols = cols;
  h.checksum = xxh64(data, bytes);
  h.fingerprint = fingerprint;
  ByteWriter out(path);
  out.write(&h, sizeof h);
  out.write(data, bytes);
  out.commit();
  return sizeof h + bytes;
}

MatrixFile::MatrixFile(const std::string& path, MatrixDtype dtype, bool verify) : map_(path) {
  if (map_.size() < sizeof(MatrixHeader) || std::memcmp(map_.data(), kMatrixMagic, sizeof kMatrixMagic) != 0)
    input_error("{}: offset 0: not a meg matrix file", path);
  std::memcpy(&header_, map_.data(), sizeof header_);
  if (header_.version != kMatrixVersion)
    input_error("{}: offset 8: matrix file version {} is not supported (only {})", path, header_.version,
                kMatrixVersion);
  if (header_.dtype != dtype)
    input_error("{}: offset 12: holds {} elements, expected {}", path, matrix_dtype_name(header_.dtype),
                matrix_dtype_name(dtype));
  const uint64_t elements = header_.rows * header_.cols;
  if (header_.cols != 0 && elements / header_.cols != header_.rows)
    input_error("{}: offset 16: {} x {} elements overflow", path, header_.rows, header_.cols);
  const uint64_t want = sizeof(MatrixHeader) + elements * matrix_dtype_size(dtype);
  if (map_.size() != want)
    input_error("{}: size is {} bytes, but a {} x {} {} matrix takes {} ({})", path, map_.size(), header_.rows,
                header_.cols, matrix_dtype_name(dtype), want, map_.size() < want ? "truncated" : "trailing bytes");
  if (verify && xxh64(map_.data() + sizeof(MatrixHeader), map_.size() - sizeof(MatrixHeader)) != header_.checksum)
    input_error("{}: checksum mismatch: the data is corrupt", path);
}

void check_matrix_shape(const MatrixFile& file, uint64_t rows, uint64_t cols, const char* what) {
  if ((rows != 0 && file.rows() != rows) || (cols != 0 && file.cols() != cols))
    input_error("{}: {} is {} x {}, expected {} x {}", file.path(), what, file.rows(), file.cols(),
                rows != 0 ? std::to_string(rows) : std::string("any"), cols != 0 ? std::to_string(cols) : std::string("any"));
}

}  // namespace meg
