#include "ckpt/safetensors_floats.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/bytes.hpp"
#include "core/error.hpp"
#include "core/float16.hpp"
#include "core/parallel.hpp"

namespace meg {

bool is_float_dtype(SafetensorsDtype dtype) {
  return dtype == SafetensorsDtype::kF32 || dtype == SafetensorsDtype::kBF16 || dtype == SafetensorsDtype::kF16;
}

void encode_floats(std::span<const float> values, SafetensorsDtype dtype, std::vector<uint8_t>& out) {
  if (!is_float_dtype(dtype))
    throw std::invalid_argument("encode_floats: " + std::string(dtype_name(dtype)) + " is not F32, BF16 or F16");
  out.resize(values.size() * dtype_size(dtype));
  if (dtype == SafetensorsDtype::kF32) {
    if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
    return;
  }
  const auto narrow = dtype == SafetensorsDtype::kBF16 ? float_to_bf16 : float_to_fp16;
  parallel_for(values.size(), size_t{1} << 16, [&](size_t begin, size_t end) {  // each element once
    for (size_t i = begin; i < end; ++i) {
      const uint16_t h = narrow(values[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  });
}

void round_floats(std::span<float> values, SafetensorsDtype dtype) {
  if (!is_float_dtype(dtype))
    throw std::invalid_argument("round_floats: " + std::string(dtype_name(dtype)) + " is not F32, BF16 or F16");
  if (dtype == SafetensorsDtype::kBF16)
    for (float& x : values) x = bf16_to_float(float_to_bf16(x));
  else if (dtype == SafetensorsDtype::kF16)
    for (float& x : values) x = fp16_to_float(float_to_fp16(x));
}

void write_floats(SafetensorsWriter& w, const std::string& name, std::span<const float> values,
                  SafetensorsDtype dtype) {
  if (dtype == SafetensorsDtype::kF32) {
    w.write(name, values.data(), values.size_bytes());
    return;
  }
  constexpr size_t kChunk = size_t{1} << 22;
  std::vector<uint8_t> bytes;
  for (size_t at = 0; at < values.size(); at += kChunk) {
    encode_floats(values.subspan(at, std::min(kChunk, values.size() - at)), dtype, bytes);
    w.write(name, bytes.data(), bytes.size());
  }
}

std::vector<float> decode_floats(const SafetensorsTensor& tensor, const std::string& path) {
  if (!is_float_dtype(tensor.dtype))
    input_error("{}: tensor {}: dtype {} is not a floating-point type meg reads (F32, BF16, F16)", path,
                tensor.name, dtype_name(tensor.dtype));
  const size_t n = tensor.numel();
  std::vector<float> out(n);
  if (tensor.dtype == SafetensorsDtype::kF32) {
    if (n > 0) std::memcpy(out.data(), tensor.bytes.data(), n * sizeof(float));
    return out;
  }
  const auto widen = tensor.dtype == SafetensorsDtype::kBF16 ? bf16_to_float : fp16_to_float;
  for (size_t i = 0; i < n; ++i) out[i] = widen(load_unaligned<uint16_t>(tensor.bytes.data() + 2 * i));
  return out;
}

}  // namespace meg
