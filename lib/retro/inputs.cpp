#include "retro/inputs.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "data/gpt_dataset.hpp"

namespace meg {
namespace {

bool is_blend_file(const std::string& path) {
  char magic[sizeof kBlendMagic] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(magic, sizeof magic) && std::memcmp(magic, kBlendMagic, sizeof magic) == 0;
}

}  // namespace

nlohmann::ordered_json RetroInputs::identity() const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const IndexedDataset& d : datasets)
    list.push_back({{"idx_xxh64", hex64(d.idx_fingerprint())}, {"bin_bytes", d.bin_bytes()}, {"documents", d.num_sequences()}});
  return list;
}

RetroInputs open_inputs(const std::vector<std::string>& data, const std::string& split) {
  if (data.empty()) input_error("--data: no inputs (a blend file or indexed dataset prefixes)");
  RetroInputs in;
  if (data.size() == 1 && std::filesystem::is_regular_file(data[0]) && is_blend_file(data[0])) {
    if (!split.empty()) input_error("--split {}: {} is a blend, which has its own split", split, data[0]);
    const GptDataset blend(data[0]);  // refuses a blend whose inputs changed since
    in.blend = data[0];
    const BlendHeader& h = blend.blend().header();
    in.split = fmt::format("{},{},{}", h.split[0], h.split[1], h.split[2]);
    for (size_t k = 0; k < blend.blend().num_inputs(); ++k) {
      in.datasets.emplace_back(std::string(blend.blend().prefix(k)));
      const BlendSplitRecord& train = blend.blend().input(k).splits[int(Split::kTrain)];
      in.train.push_back({train.begin, train.end});
    }
  } else {
    in.split = split.empty() ? BlendOptions{}.split : split;  // meg-blend's default, Megatron's
    const auto weights = parse_split(in.split);
    for (const std::string& prefix : data) {
      if (!std::filesystem::exists(prefix + ".idx") && std::filesystem::is_regular_file(prefix))
        input_error("{}: neither a blend file nor an indexed dataset prefix", prefix);
      in.datasets.emplace_back(prefix);
      in.train.push_back(split_ranges(weights, in.datasets.back().num_sequences())[int(Split::kTrain)]);
    }
  }
  for (const IndexedDataset& d : in.datasets) {
    if (d.num_tokens() == 0) input_error("{}: no tokens (an empty input)", d.prefix());
    if (d.dtype() != in.datasets[0].dtype())
      input_error("{} holds {} tokens but {} holds {}: the inputs come from different tokenizers", d.prefix(),
                  dtype_name(d.dtype()), in.datasets[0].prefix(), dtype_name(in.datasets[0].dtype()));
  }
  return in;
}

}  // namespace meg
