// The number format of a model's activations and compute weights on the CUDA path (the CPU path
// computes in fp32): fp32, or bf16/fp16 with fp32 accumulation (ops/cuda/ops.hpp).
#pragma once

#include <string>

namespace meg {

enum class Precision { fp32, bf16, fp16 };
Precision parse_precision(const std::string& name);  // InputError on an unknown name
const char* precision_name(Precision p);

}  // namespace meg
