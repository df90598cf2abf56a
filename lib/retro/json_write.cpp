#include "retro/json_write.hpp"

#include "core/byte_stream.hpp"

namespace meg {

void write_json_file(const std::string& path, const nlohmann::ordered_json& json) {
  const std::string text = json.dump(2) + "\n";
  ByteWriter out(path);
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace meg
