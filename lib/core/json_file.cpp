#include "core/json_file.hpp"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/byte_stream.hpp"
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

void write_json_file(const std::string& path, const nlohmann::ordered_json& json) {
  const std::string text = json.dump(2) + "\n";
  ByteWriter out(path);
  out.write(text.data(), text.size());
  out.commit();
}

std::string parse_json_record(std::string_view raw, const std::string& where, nlohmann::json& out) {
  try {
    out = nlohmann::json::parse(raw);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's message starts with "[json.exception.parse_error.101] parse error at line 1, column N: "
    std::string why = e.what();
    if (const auto colon = why.find(": "); colon != std::string::npos) why = why.substr(colon + 2);
    return fmt::format("{}: malformed JSON at column {}: {}", where, e.byte, why);
  }
  if (!out.is_object()) return fmt::format("{}: expected a JSON object, found {}", where, out.type_name());
  return {};
}

}  // namespace meg
