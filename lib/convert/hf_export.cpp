#include "convert/hf_export.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "ckpt/safetensors_floats.hpp"
#include "convert/hf_config.hpp"
#include "convert/hf_names.hpp"
#include "convert/hf_tokenizer_export.hpp"
#include "core/byte_stream.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "tokenizer/tokenizer.hpp"

namespace meg {

namespace fs = std::filesystem;

namespace {

// The new directory being written: a hidden sibling of the final name until commit() renames it
// into place; removed with its contents when destroyed uncommitted.
class StagingDir {
 public:
  explicit StagingDir(const std::string& final_dir) : final_(fs::absolute(final_dir).lexically_normal()) {
    if (final_.filename().empty()) final_ = final_.parent_path();
    std::error_code ec;
    if (fs::exists(final_, ec)) {
      if (!fs::is_directory(final_, ec)) input_error("{}: exists and is not a directory", final_dir);
      if (!fs::is_empty(final_, ec)) input_error("{}: exists and is not empty (refusing to mix two models)", final_dir);
    }
    const std::string prefix = fmt::format(".{}.tmp-", final_.filename().string());
    remove_leftovers(final_.parent_path(), prefix);
    temp_ = final_.parent_path() / fmt::format("{}{}", prefix, ::getpid());
    fs::remove_all(temp_, ec);
    if (!fs::create_directories(temp_, ec) || ec) system_error(temp_.string(), "cannot create directory");
  }
  ~StagingDir() {
    std::error_code ec;
    if (!committed_) fs::remove_all(temp_, ec);
  }
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  std::string path(const std::string& name) const { return (temp_ / name).string(); }
  std::string temp_path() const { return temp_.string(); }

  void commit() {
    sync_directory(temp_.string());
    if (::rename(temp_.c_str(), final_.c_str()) != 0)
      system_error(final_.string(), fmt::format("cannot rename {} to it", temp_.string()));
    committed_ = true;
    sync_directory(final_.parent_path().string());
  }

 private:
  // The staging folders PARENT/PREFIX<pid> of exports that were killed: their process is gone.
  // One of a live process (an export running beside this one) is left alone.
  static void remove_leftovers(const fs::path& parent, const std::string& prefix) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(parent, ec)) {
      const std::string name = entry.path().filename().string();
      if (!name.starts_with(prefix)) continue;
      const std::string digits = name.substr(prefix.size());
      if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      const auto pid = static_cast<pid_t>(std::stol(digits));
      if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
      std::error_code rm;
      fs::remove_all(entry.path(), rm);
      if (rm) log::warn("{}: cannot remove leftover of a killed export: {}", entry.path().string(), rm.message());
    }
  }

  fs::path final_, temp_;
  bool committed_ = false;
};

void write_text(const std::string& path, const std::string& text) {
  ByteWriter out(path);
  out.write(text.data(), text.size());
  out.commit();
}

uint64_t stored_bytes(const HfTensorMap& m, SafetensorsDtype dtype) { return m.numel() * dtype_size(dtype); }

// huggingface_hub's split_state_dict_into_shards: indices into MAPS, shard by shard.
std::vector<std::vector<size_t>> plan_shards(const std::vector<HfTensorMap>& maps, SafetensorsDtype dtype,
                                             uint64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_bytes = 0;
  for (size_t i = 0; i < maps.size(); ++i) {
    const uint64_t bytes = stored_bytes(maps[i], dtype);
    if (bytes > max_shard_bytes) {
      shards.push_back({i});
      continue;
    }
    if (current_bytes + bytes > max_shard_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += bytes;
  }
  if (!current.empty()) shards.push_back(std::move(current));
  return shards;
}

std::string shard_name(size_t index, size_t count) {
  if (count == 1) return "model.safetensors";
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index + 1, count);
}

// SOURCE's tensors, the last one kept: q, k and v (gate and up) come from one meg tensor. One
// buffer serves every tensor (and one the transposes): at most the largest tensor twice, and no
// fresh pages to fault in per tensor.
class SourceCache {
 public:
  SourceCache(const MegTensorSource& source) : source_(source) {}
  const std::vector<float>& get(const HfTensorMap& m) {
    if (m.meg_name != name_) {
      source_(m.meg_name, values_);
      name_ = m.meg_name;
      size_t numel = 1;
      for (int64_t d : m.meg_shape) numel *= static_cast<size_t>(d);
      if (values_.size() != numel)
        throw std::logic_error(fmt::format("export_hf: the source gave {} values for {}, which has {}",
                                           values_.size(), name_, numel));
    }
    return values_;
  }
  std::vector<float>& transposed() { return transposed_; }

 private:
  const MegTensorSource& source_;
  std::string name_;
  std::vector<float> values_, transposed_;
};

void write_shard(const std::string& path, const std::vector<HfTensorMap>& maps, const std::vector<size_t>& shard,
                 SafetensorsDtype dtype, SourceCache& cache) {
  SafetensorsWriter w(path, {{"format", "pt"}}, SafetensorsWriter::Order::kReference);
  std::map<std::string, const HfTensorMap*> by_name;
  for (size_t i : shard) {
    w.declare(maps[i].hf_name, dtype, maps[i].hf_shape);
    by_name[maps[i].hf_name] = &maps[i];
  }
  w.write_header();
  for (const auto& name : w.order()) {
    const HfTensorMap& m = *by_name.at(name);
    const std::vector<float>& meg = cache.get(m);
    if (m.transpose) {
      hf_from_meg(m, meg, cache.transposed());
      write_floats(w, name, cache.transposed(), dtype);
    } else {  // the rows as they lie: no copy
      const size_t cols = static_cast<size_t>(m.meg_cols());
      write_floats(w, name, std::span<const float>(meg).subspan(size_t(m.row_begin) * cols, size_t(m.rows) * cols),
                   dtype);
    }
  }
  w.commit();
}

}  // namespace

HfExportSummary export_hf(const ModelConfig& config, const MegTensorSource& source, const std::string& out_dir,
                          const HfExportOptions& options) {
  config.validate();
  check_hf_exportable(config);
  if (!is_float_dtype(options.dtype))
    input_error("{}: cannot export in {} (F32, BF16 or F16)", out_dir, dtype_name(options.dtype));
  StagingDir dir(out_dir);
  HfExportSummary summary;

  const HfTokenIds ids = write_hf_tokenizer_files(config, options.tokenizer, options.merges, dir.temp_path(), summary.files);
  write_text(dir.path("config.json"), hf_json_text(hf_config_json(config, options.dtype, ids)));
  write_text(dir.path("generation_config.json"), hf_json_text(hf_generation_config_json(ids)));
  summary.files.insert(summary.files.end(), {"config.json", "generation_config.json"});

  const std::vector<HfTensorMap> maps = hf_tensor_map(config);
  const auto shards = plan_shards(maps, options.dtype, options.max_shard_bytes);
  SourceCache cache(source);
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shard_name(s, shards.size());
    write_shard(dir.path(name), maps, shards[s], options.dtype, cache);
    summary.files.push_back(name);
    for (size_t i : shards[s]) {
      weight_map[maps[i].hf_name] = name;
      summary.tensor_bytes += stored_bytes(maps[i], options.dtype);
    }
  }
  if (shards.size() > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", summary.tensor_bytes}}}, {"weight_map", weight_map}};
    write_text(dir.path("model.safetensors.index.json"), hf_json_text(index));
    summary.files.push_back("model.safetensors.index.json");
  }
  if (options.before_commit) options.before_commit(dir.temp_path());
  dir.commit();
  return summary;
}

}  // namespace meg
