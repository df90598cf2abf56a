#include "retro/stage.hpp"

#include <filesystem>

#include "core/hash.hpp"
#include "core/json_file.hpp"
#include "core/mapped_file.hpp"

namespace fs = std::filesystem;

namespace meg {
namespace {

// The first top-level setting whose value differs, for the message of a stale stage.
std::string first_difference(const nlohmann::ordered_json& recorded, const nlohmann::ordered_json& current) {
  for (const auto& [key, value] : current.items())
    if (!recorded.contains(key) || value != recorded[key]) return key;
  return "settings";
}

}  // namespace

uint64_t settings_fingerprint(const nlohmann::ordered_json& settings) {
  const std::string text = settings.dump();
  return xxh64(text.data(), text.size());
}

StageStatus stage_status(const std::string& folder, const nlohmann::ordered_json& settings) {
  const std::string path = folder + "/" + kStageRecordFile;
  if (!fs::exists(path)) return {StageState::missing, "not built"};
  try {
    const auto record = nlohmann::ordered_json::parse(MappedFile(path).text());
    if (record.at("format") != kStageFormat || record.at("version") != kStageVersion)
      return {StageState::stale, "its record is of another format"};
    if (record.at("fingerprint") != hex64(settings_fingerprint(settings)))
      return {StageState::stale, "built with other " + first_difference(record.at("settings"), settings)};
    for (const auto& [name, file] : record.at("files").items()) {
      const std::string p = folder + "/" + name;
      if (!fs::exists(p) || fs::file_size(p) != file.at("bytes").get<uint64_t>())
        return {StageState::stale, name + " is missing or of another size than recorded"};
    }
  } catch (const std::exception&) {
    return {StageState::stale, "its record is unreadable"};
  }
  return {StageState::done, ""};
}

void begin_stage(const std::string& folder, bool keep_files) {
  fs::create_directories(folder);
  fs::remove(folder + "/" + kStageRecordFile);
  if (keep_files) return;
  for (const auto& entry : fs::directory_iterator(folder)) fs::remove_all(entry.path());
}

void finish_stage(const std::string& folder, const std::string& name, const nlohmann::ordered_json& settings,
                  const std::vector<std::string>& files, const nlohmann::ordered_json& stats) {
  nlohmann::ordered_json listed = nlohmann::ordered_json::object();
  for (const std::string& f : files) listed[f] = {{"bytes", fs::file_size(folder + "/" + f)}};
  write_json_file(folder + "/" + kStageRecordFile, {{"format", kStageFormat},
                                                    {"version", kStageVersion},
                                                    {"stage", name},
                                                    {"fingerprint", hex64(settings_fingerprint(settings))},
                                                    {"settings", settings},
                                                    {"files", listed},
                                                    {"stats", stats}});
}

}  // namespace meg
