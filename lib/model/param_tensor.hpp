// One named tensor of a model's flat parameter array: the entries of the parameter table (gpt.hpp)
// that the models, the optimizer, checkpoints and the parallel splits share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace meg {

// How init() fills a tensor.
enum class ParamInit { normal, normal_scaled, zeros, ones };

// One named tensor of the flat parameter array.
struct ParamTensor {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;         // in elements, into the flat array
  size_t numel = 0;          // product of shape
  bool weight_decay = true;  // false for norm weights and biases
  ParamInit init = ParamInit::normal;
};

// The length of the flat array laid out by TABLE (offsets contiguous from 0).
inline size_t table_size(const std::vector<ParamTensor>& table) {
  return table.empty() ? 0 : table.back().offset + table.back().numel;
}

}  // namespace meg
