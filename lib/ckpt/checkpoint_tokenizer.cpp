#include "ckpt/checkpoint_tokenizer.hpp"

#include <filesystem>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/mapped_file.hpp"
#include "tokenizer/tokenizer.hpp"

namespace meg {
namespace {

constexpr const char* kSentencePieceName = "tokenizer.model";
constexpr const char* kVocabName = "vocab.json";
constexpr const char* kMergesName = "merges.txt";
constexpr const char* kHfTokenizerName = "tokenizer.json";
constexpr const char* kHfConfigName = "tokenizer_config.json";  // beside tokenizer.json: its eos_token

uint64_t checksum(const std::string& path) {
  const MappedFile f(path);
  return xxh64(f.data(), f.size());
}

}  // namespace

KeptTokenizer::KeptTokenizer(const TokenizerFiles& given, bool from_checkpoint) {
  if (given.empty()) return;
  TokenizerFiles files = given;  // a model directory: the files it holds
  std::error_code ec;
  if (std::filesystem::is_directory(given.tokenizer, ec)) {
    const TokenizerPaths in = tokenizer_files_in(given.tokenizer);
    files.tokenizer = in.tokenizer, files.merges = in.merges;
  }
  merges_ = !files.merges.empty();
  const auto keep = [&](const char* name, const std::string& source) {
    attachments_.push_back({name, source, from_checkpoint, checksum(source)});
  };
  if (merges_) {
    keep(kVocabName, files.tokenizer);
    keep(kMergesName, files.merges);
  } else if (files.tokenizer.ends_with(".json")) {
    keep(kHfTokenizerName, files.tokenizer);
    const auto config = std::filesystem::path(files.tokenizer).parent_path() / kHfConfigName;
    std::error_code ec;
    if (std::filesystem::is_regular_file(config, ec)) keep(kHfConfigName, config.string());
  } else {
    keep(kSentencePieceName, files.tokenizer);
  }
}

nlohmann::ordered_json KeptTokenizer::record() const {
  if (attachments_.empty()) return nullptr;
  return {{"tokenizer", attachments_[0].name}, {"merges", merges_ ? kMergesName : ""}};
}

void KeptTokenizer::saved_in(const std::string& dir) {
  for (auto& a : attachments_) {
    a.source = (std::filesystem::path(dir) / a.name).string();
    a.link = true;
  }
}

bool KeptTokenizer::differs_from(const nlohmann::json& j) const {
  const auto attached = j.find("attachments");
  const auto record = j.find("record");
  if (attached == j.end() || record == j.end() || !record->is_object() || !record->contains("tokenizer")) return false;
  if (record->at("tokenizer") != nlohmann::json(this->record())) return true;
  for (const auto& a : attachments_)
    if (!attached->contains(a.name) || !(*attached)[a.name].contains("xxh64") ||
        (*attached)[a.name]["xxh64"] != hex64(a.xxh64.value_or(0)))
      return true;
  return false;
}

TokenizerFiles checkpoint_tokenizer(const std::string& dir, const nlohmann::json& j) {
  const std::string where = (std::filesystem::path(dir) / kCheckpointRecordFile).string();
  const auto string_at = [](const nlohmann::json& o, const char* key) {
    return o.is_object() && o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : std::string();
  };
  const nlohmann::json& record = j.contains("record") ? j["record"] : nlohmann::json::object();
  const nlohmann::json none = nlohmann::json::object();
  const auto& kept = record.is_object() && record.contains("tokenizer") ? record["tokenizer"] : none;
  if (kept.is_object() && !string_at(kept, "tokenizer").empty()) {
    const auto& attached = j.contains("attachments") ? j["attachments"] : none;
    const auto path = [&](const std::string& name) {
      if (name.empty()) return name;
      if (!attached.is_object() || !attached.contains(name))
        input_error("{}: the record names the tokenizer file {}, which is not attached", where, name);
      return (std::filesystem::path(dir) / name).string();
    };
    return {path(string_at(kept, "tokenizer")), path(string_at(kept, "merges")), true};
  }
  const auto& options = record.is_object() && record.contains("options") ? record["options"] : none;
  return {string_at(options, "tokenizer"), string_at(options, "merges")};
}

TokenizerFiles checkpoint_tokenizer(const Checkpoint& ck) { return checkpoint_tokenizer(ck.path(), ck.json()); }

void require_recorded_tokenizer(const TokenizerFiles& files, const std::string& checkpoint) {
  for (const std::string& file : {files.tokenizer, files.merges})
    if (!file.empty() && !std::filesystem::exists(file))
      input_error("{}: the tokenizer file it records, {}, is not there (a relative path is read from the current "
                  "directory); name the tokenizer with --tokenizer",
                  checkpoint, file);
}

}  // namespace meg
