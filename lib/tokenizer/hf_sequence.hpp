// The steps of a tokenizer.json "Sequence" (of normalizers, pre-tokenizers or decoders).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace meg {

// J[KEY], an array, each element read by T::from_json (null ones, none, are left out); WHERE
// names J in errors.
template <typename T>
std::vector<std::unique_ptr<T>> hf_sequence_steps(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) input_error("{}: a Sequence needs its \"{}\" array", where, key);
  std::vector<std::unique_ptr<T>> steps;
  for (size_t i = 0; i < it->size(); ++i)
    if (auto s = T::from_json((*it)[i], fmt::format("{}.{}[{}]", where, key, i))) steps.push_back(std::move(s));
  return steps;
}

}  // namespace meg
