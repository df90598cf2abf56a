// Reading JSON from every kind of file (a whole JSON file, one JSONL record, a JSON header inside a
// binary file) with the one-line errors of core/error.hpp, and reading its fields by type; writing a
// small JSON file atomically.
//
// nlohmann's own exceptions name no file, and some (number overflow, out_of_range.406) no position
// either; a wrong-typed field read with get<T>() is a type_error, which a tool reports as an
// internal error. Readers go through these functions instead, so every bad file gets
// "FILE:LINE:COLUMN: problem" (or "FILE: key 'k' must be ...").
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace meg {

// Where a JSON text lies, to place its errors.
struct JsonSource {
  explicit JsonSource(std::string file, uint64_t line = 1) : file(std::move(file)), line(line) {}

  std::string file;                // named by every error
  uint64_t line = 1;               // FILE's line where the text begins (a JSONL record's line)
  std::optional<uint64_t> offset;  // set: the text lies at this byte of a binary file, and errors
                                   // say "FILE: byte N: ..." instead of a line and column
  bool unique_keys = false;        // refuse an object that repeats a key (nlohmann keeps the last)
};

// Parses TEXT into OUT. Returns "" when it is valid JSON, else the one-line problem:
// "FILE:LINE:COLUMN: not valid JSON: WHY" or "FILE:LINE:COLUMN: number 1e999 is out of range".
template <typename Json>
std::string try_parse_json(std::string_view text, const JsonSource& source, Json& out);

// The JSON value TEXT holds; InputError with try_parse_json's line when it is not valid JSON.
template <typename Json = nlohmann::json>
Json parse_json(std::string_view text, const JsonSource& source);

// The JSON document in PATH: SystemError when it cannot be read, InputError naming PATH, line and
// column when it is not valid JSON.
template <typename Json = nlohmann::json>
Json read_json_file(const std::string& path);

// Writes JSON (indented) to PATH atomically: a temporary file, synced and renamed into place, so a
// reader sees the old file or the new one, never half of one (records, progress files).
void write_json_file(const std::string& path, const nlohmann::ordered_json& json);

// Parses RAW, line LINE (from 1) of the JSONL file FILE, into OUT, which must be an object. Returns
// "" when it is, else the one-line problem: try_parse_json's, or "FILE:LINE: expected a JSON
// object, found TYPE" (for callers that report it their own way).
std::string parse_json_record(std::string_view raw, const std::string& file, uint64_t line, nlohmann::json& out);

// ---------------------------------------------------------------------------------------------
// Typed fields. WHAT names the value in messages ("FILE: key 'x'"); T is bool, std::string, double
// or an integer type, whose range the value must fit.

template <typename T, typename Json>
T json_as(const Json& v, const std::string& what) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) input_error("{} must be true or false, not {}", what, v.type_name());
    return v.template get<bool>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) input_error("{} must be a string, not {}", what, v.type_name());
    return v.template get<std::string>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) input_error("{} must be a number, not {}", what, v.type_name());
    return v.template get<T>();
  } else {
    static_assert(std::is_integral_v<T>, "json_as reads bool, std::string, numbers");
    if (!v.is_number_integer())
      input_error("{} must be an integer, not {}", what, v.is_number() ? v.dump() : std::string(v.type_name()));
    // nlohmann keeps a non-negative integer as unsigned, a negative one as signed.
    constexpr T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
    const bool fits = v.is_number_unsigned() ? v.template get<uint64_t>() <= uint64_t(hi)
                                             : std::is_signed_v<T> && v.template get<int64_t>() >= int64_t(lo);
    if (!fits) input_error("{} must be an integer from {} to {}, not {}", what, lo, hi, v.dump());
    return v.template get<T>();
  }
}

// Key KEY of object J (InputError when J is not an object or KEY is missing).
template <typename T, typename Json>
T json_get(const Json& j, const std::string& key, const std::string& where) {
  if (!j.is_object()) input_error("{}: expected a JSON object, found {}", where, j.type_name());
  const auto it = j.find(key);
  if (it == j.end()) input_error("{}: key '{}' is missing", where, key);
  return json_as<T>(*it, where + ": key '" + key + "'");
}

// Key KEY of object J, or FALLBACK when it is missing or null.
template <typename T, typename Json>
T json_get(const Json& j, const std::string& key, const std::string& where, const T& fallback) {
  if (!j.is_object()) input_error("{}: expected a JSON object, found {}", where, j.type_name());
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return json_as<T>(*it, where + ": key '" + key + "'");
}

// VALUE, or null when unset (a settings record's option that was not given).
template <typename T>
nlohmann::ordered_json json_or_null(const std::optional<T>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

}  // namespace meg
