// Reading a whole JSON file, with the one-line errors of core/error.hpp.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace meg {

// The JSON document in PATH: SystemError when it cannot be read, InputError naming PATH when it is
// not valid JSON.
nlohmann::json read_json_file(const std::string& path);

}  // namespace meg
