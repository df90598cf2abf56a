// Stage records of a retrieval database. Each stage writes into its own folder DIR/NAME and, last
// of all, DIR/NAME/stage.json (through a synced temporary file and a rename):
//
//   {"format": "meg-retro-stage", "version": 1, "stage": NAME, "fingerprint": HEX,
//    "settings": {...}, "files": {FILE: {"bytes": N}, ...}, "stats": {...}}
//
// SETTINGS hold everything the stage's output depends on: its options, the identity of its inputs
// (hashes and sizes, never paths) and the fingerprints of the stages it reads. The fingerprint is
// the XXH64 of their compact JSON. A stage is done when its record is whole, its fingerprint is
// the one the current settings give, and its files are there at their recorded sizes (their
// contents are checked by their readers); otherwise it is missing (no record) or stale.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace meg {

inline constexpr const char* kStageFormat = "meg-retro-stage";
inline constexpr int kStageVersion = 1;
inline constexpr const char* kStageRecordFile = "stage.json";

uint64_t settings_fingerprint(const nlohmann::ordered_json& settings);

enum class StageState { missing, stale, done };

struct StageStatus {
  StageState state = StageState::missing;
  std::string why;  // for missing and stale: what is wrong, for a message
};

// The state of the stage in FOLDER against SETTINGS.
StageStatus stage_status(const std::string& folder, const nlohmann::ordered_json& settings);

// Makes FOLDER ready for the stage to run: created, its record removed (a folder without a record
// holds no finished stage) and, unless KEEP_FILES (a stage that resumes its partial files), every
// other file removed too.
void begin_stage(const std::string& folder, bool keep_files);

// Writes FOLDER's record: the stage NAME, SETTINGS and their fingerprint, the sizes of FILES (in
// FOLDER) and STATS.
void finish_stage(const std::string& folder, const std::string& name, const nlohmann::ordered_json& settings,
                  const std::vector<std::string>& files, const nlohmann::ordered_json& stats);

}  // namespace meg
