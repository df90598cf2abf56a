#include "core/json_file.hpp"

#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace meg {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) system_error(path, "cannot open");
  std::stringstream s;
  s << in.rdbuf();
  try {
    return nlohmann::json::parse(s.str());
  } catch (const nlohmann::json::parse_error& e) {
    input_error("{}: not valid JSON: {}", path, e.what());
  }
}

}  // namespace meg
