// The matrix file: one row-major 2-D array of fixed-size elements behind a 64-byte header, the
// container of every array of a retrieval database (chunk table, embeddings, index arrays,
// neighbour table; man/meg-formats.5, RETRO DATABASE). Readers map the file and use the array in
// place; the header's checksum covers the array, so a torn or corrupt file is refused.
//
//   offset  0  magic "MEGMATRX"
//           8  u32 version (1)
//          12  u32 element type (MatrixDtype)
//          16  u64 rows
//          24  u64 columns
//          32  u64 XXH64 (seed 0) of the data bytes
//          40  u64 fingerprint of the stage that wrote it (0: none)
//          48  16 zero bytes
//          64  the data: rows * columns elements, little-endian, row after row
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <string>

#include "core/mapped_file.hpp"

namespace meg {

static_assert(std::endian::native == std::endian::little, "matrix files are little-endian");

// Float16 elements are IEEE binary16 bit patterns, held as uint16_t (core/float16.hpp).
enum class MatrixDtype : uint32_t { kF16 = 1, kF32 = 2, kI32 = 3, kI64 = 4, kU8 = 5 };

size_t matrix_dtype_size(MatrixDtype dtype);
const char* matrix_dtype_name(MatrixDtype dtype);

template <typename T>
constexpr MatrixDtype matrix_dtype_of();
template <> constexpr MatrixDtype matrix_dtype_of<uint16_t>() { return MatrixDtype::kF16; }
template <> constexpr MatrixDtype matrix_dtype_of<float>() { return MatrixDtype::kF32; }
template <> constexpr MatrixDtype matrix_dtype_of<int32_t>() { return MatrixDtype::kI32; }
template <> constexpr MatrixDtype matrix_dtype_of<int64_t>() { return MatrixDtype::kI64; }
template <> constexpr MatrixDtype matrix_dtype_of<uint8_t>() { return MatrixDtype::kU8; }

inline constexpr char kMatrixMagic[8] = {'M', 'E', 'G', 'M', 'A', 'T', 'R', 'X'};
inline constexpr uint32_t kMatrixVersion = 1;

struct MatrixHeader {
  char magic[8];
  uint32_t version;
  MatrixDtype dtype;
  uint64_t rows, cols;
  uint64_t checksum;
  uint64_t fingerprint;
  uint64_t reserved[2];
};
static_assert(sizeof(MatrixHeader) == 64);

// Writes ROWS x COLS elements of DTYPE from DATA as the matrix file PATH (a temporary file renamed
// into place, synced). Returns the file's size.
uint64_t write_matrix(const std::string& path, MatrixDtype dtype, uint64_t rows, uint64_t cols, const void* data,
                      uint64_t fingerprint = 0);
template <typename T>
uint64_t write_matrix(const std::string& path, uint64_t rows, uint64_t cols, std::span<const T> data,
                      uint64_t fingerprint = 0) {
  return write_matrix(path, matrix_dtype_of<T>(), rows, cols, data.data(), fingerprint);
}

class MatrixFile {
 public:
  // Maps PATH and checks magic, version, element type (must be DTYPE), size and, with VERIFY, the
  // checksum. InputError naming the file and the problem otherwise.
  MatrixFile(const std::string& path, MatrixDtype dtype, bool verify = true);

  const std::string& path() const { return map_.path(); }
  uint64_t rows() const { return header_.rows; }
  uint64_t cols() const { return header_.cols; }
  uint64_t fingerprint() const { return header_.fingerprint; }

  // The elements, read in place (the data starts at offset 64, aligned for every element type).
  template <typename T>
  std::span<const T> data() const {
    static_assert(sizeof(T) <= 8);
    return {reinterpret_cast<const T*>(map_.data() + sizeof(MatrixHeader)), header_.rows * header_.cols};
  }
  template <typename T>
  const T* row(uint64_t i) const { return data<T>().data() + i * header_.cols; }

 private:
  MappedFile map_;
  MatrixHeader header_{};
};

// InputError unless FILE is ROWS x COLS (either 0: any), naming WHAT.
void check_matrix_shape(const MatrixFile& file, uint64_t rows, uint64_t cols, const char* what);

}  // namespace meg
