// Small JSON records (stage records, progress records) written atomically: a temporary file,
// synced and renamed into place, so a reader sees the old record or the new one, never half.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace meg {

void write_json_file(const std::string& path, const nlohmann::ordered_json& json);

}  // namespace meg
