#include "convert/hf_import.hpp"

#include <filesystem>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors_floats.hpp"
#include "convert/hf_config.hpp"
#include "core/error.hpp"
#include "core/json_file.hpp"
#include "model/param_table.hpp"

namespace meg {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";


// A file name an index may use: plain, inside the directory.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

HfReader::HfReader(const std::string& dir, const HfImportOptions& options) : dir_(dir) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  config_ = model_config_from_hf(read_json_file(config_path), config_path, options.make_vocab_size_divisible_by,
                                 options.tp);
  open_files();
  // Every layer has tensors: a config of more layers than the files hold tensors is refused before
  // the table of its tensors is built (tens of thousands of layers would take gigabytes).
  if (uint64_t(config_.num_layers) > weight_map_.size())
    input_error("{}: {} layers, but {} holds only {} tensors", config_path, config_.num_layers, dir_,
                weight_map_.size());
  table_ = gpt_parameter_table(config_);
  locate_tensors();
}

HfReader::~HfReader() = default;

void HfReader::open_files() {
  const fs::path dir(dir_);
  std::set<std::string> names;
  if (fs::exists(dir / kIndexFile)) {
    index_path_ = (dir / kIndexFile).string();
    const nlohmann::json index = read_json_file(index_path_);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      input_error("{}: no weight_map object", index_path_);
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (!file.is_string() || !plain_file_name(file.get<std::string>()))
        input_error("{}: weight_map: tensor {} names {}, not a file name in the directory", index_path_, tensor,
                    file.dump());
      const std::string name = file.get<std::string>();
      if (!fs::exists(dir / name))
        input_error("{}: weight_map: tensor {} is in {}, which does not exist", index_path_, tensor, name);
      weight_map_[tensor] = name;
      names.insert(name);
    }
  } else if (fs::exists(dir / kSingleFile)) {
    names.insert(kSingleFile);
  } else {
    input_error("{}: neither {} nor {} (meg reads safetensors checkpoints, not pytorch_model.bin)", dir_,
                kSingleFile, kIndexFile);
  }
  for (const auto& name : names) {
    files_.push_back(std::make_unique<SafetensorsFile>((dir / name).string()));
    if (index_path_.empty())
      for (const auto& t : files_.back()->tensors()) weight_map_[t.name] = name;
  }
}

void HfReader::locate_tensors() {
  std::map<std::string, const SafetensorsFile*> by_file;
  for (const auto& f : files_) by_file[fs::path(f->path()).filename().string()] = f.get();
  const std::string& listing = index_path_.empty() ? files_.front()->path() : index_path_;

  std::vector<HfTensorMap> maps = hf_tensor_map(config_);
  // Tensors transformers itself would skip, named with and without the optional prefix.
  const std::string prefix = hf_optional_prefix(config_);
  std::set<std::string> ignored;
  for (const std::string& name : hf_ignored_tensors(config_)) {
    ignored.insert(name);
    if (!prefix.empty() && name.starts_with(prefix)) ignored.insert(name.substr(prefix.size()));
  }
  const auto ignorable = [&](const std::string& name) { return ignored.count(name) > 0; };
  // Files without the prefix (OpenAI's GPT-2 upload) name the first tensor without it too.
  const std::string& first = maps.front().hf_name;
  if (!prefix.empty() && first.starts_with(prefix) && !weight_map_.count(first) &&
      weight_map_.count(first.substr(prefix.size())))
    for (auto& m : maps)
      if (m.hf_name.starts_with(prefix)) m.hf_name.erase(0, prefix.size());

  for (auto& m : maps) {
    const auto where = weight_map_.find(m.hf_name);
    if (where == weight_map_.end())
      input_error("{}: tensor {} is missing (config.json describes {} layers{})", listing, m.hf_name,
                  config_.num_layers, config_.tie_embeddings ? ", tied embeddings" : ", untied embeddings");
    const SafetensorsFile& file = *by_file.at(where->second);
    if (!file.contains(m.hf_name))
      input_error("{}: has no tensor {}, which {} places in it", file.path(), m.hf_name, listing);
    const SafetensorsTensor& t = file.tensor(m.hf_name);
    if (!is_float_dtype(t.dtype))
      input_error("{}: tensor {}: dtype {} is not F32, BF16 or F16", file.path(), m.hf_name, dtype_name(t.dtype));
    if (t.shape != m.hf_shape)
      input_error("{}: tensor {} has shape [{}], expected [{}] from config.json", file.path(), m.hf_name,
                  fmt::join(t.shape, ", "), fmt::join(m.hf_shape, ", "));
    located_[m.hf_name] = {&file, &t};
    pieces_[m.meg_name].push_back(m);
  }
  stored_dtype_ = located_.at(maps.front().hf_name).tensor->dtype;

  for (const auto& f : files_)
    for (const auto& t : f->tensors())
      if (!located_.count(t.name) && !ignorable(t.name))
        input_error("{}: unexpected tensor {} (config.json describes a {} model without it)", f->path(), t.name,
                    to_string(config_.family));
  for (const auto& [name, file] : weight_map_)
    if (!located_.count(name) && !ignorable(name) && !by_file.at(file)->contains(name))
      input_error("{}: weight_map: tensor {} is not in {}", listing, name, file);
}

std::vector<float> HfReader::tensor(const std::string& name) const {
  const auto pieces = pieces_.find(name);
  if (pieces == pieces_.end()) throw std::invalid_argument("HfReader::tensor: no tensor " + name);
  size_t numel = 1;
  for (int64_t d : pieces->second.front().meg_shape) numel *= static_cast<size_t>(d);
  std::vector<float> meg(numel, 0.0f);
  for (const auto& m : pieces->second) {
    const Located& at = located_.at(m.hf_name);
    meg_from_hf(m, decode_floats(*at.tensor, at.file->path()), meg);
  }
  return meg;
}

}  // namespace meg
