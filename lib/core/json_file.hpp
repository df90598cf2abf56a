// Reading a whole JSON file, and one JSONL record, with the one-line errors of core/error.hpp;
// writing a small JSON file atomically.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace meg {

// The JSON document in PATH: SystemError when it cannot be read, InputError naming PATH when it is
// not valid JSON.
nlohmann::json read_json_file(const std::string& path);

// Writes JSON (indented) to PATH atomically: a temporary file, synced and renamed into place, so a
// reader sees the old file or the new one, never half of one (records, progress files).
void write_json_file(const std::string& path, const nlohmann::ordered_json& json);

// Parses RAW, one record of a JSONL file named WHERE ("file:line"), into OUT, which must be an
// object. Returns "" when it is, else the one-line problem: "WHERE: malformed JSON at column N:
// WHY" or "WHERE: expected a JSON object, found TYPE" (for callers that report it their own way).
std::string parse_json_record(std::string_view raw, const std::string& where, nlohmann::json& out);

}  // namespace meg
