// Floating-point tensors of safetensors files as float arrays: the conversions between meg's fp32
// values and the F32, BF16 and F16 bytes that Hugging Face files hold.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ckpt/safetensors.hpp"

namespace meg {

// True for the dtypes these functions take: F32, BF16 and F16.
bool is_float_dtype(SafetensorsDtype dtype);

// VALUES as DTYPE's little-endian bytes (bf16 and fp16 rounded to nearest even, as PyTorch does),
// into OUT (resized; a caller encoding many chunks reuses it). std::invalid_argument for a dtype
// is_float_dtype() refuses.
void encode_floats(std::span<const float> values, SafetensorsDtype dtype, std::vector<uint8_t>& out);

// VALUES replaced by what DTYPE stores of them, widened back: decode_floats of encode_floats' bytes,
// without the bytes (what an export in DTYPE must read back as). std::invalid_argument as there.
void round_floats(std::span<float> values, SafetensorsDtype dtype);

// Writes VALUES as tensor NAME of W (declared with DTYPE) in DTYPE, converting a chunk at a time
// (no copy of the whole tensor).
void write_floats(SafetensorsWriter& w, const std::string& name, std::span<const float> values,
                  SafetensorsDtype dtype);

// The values of TENSOR widened to float (exactly). InputError naming the file and the tensor for a
// dtype is_float_dtype() refuses.
std::vector<float> decode_floats(const SafetensorsTensor& tensor, const std::string& path);

}  // namespace meg
