#include "ckpt/sharded_checkpoint.hpp"

#include <cstring>
#include <memory>

#include "ckpt/checkpoint_layout.hpp"
#include "ckpt/state_reader.hpp"

namespace meg {

namespace {

std::vector<uint64_t> shape_of(const ParamTensor& t) { return {t.shape.begin(), t.shape.end()}; }

// ROOT's TEXT to every member of C.
void broadcast_string(Comm& c, std::string& text, int root) {
  int64_t size = static_cast<int64_t>(text.size());
  c.broadcast(&size, sizeof(size), root);
  text.resize(static_cast<size_t>(size));
  if (size > 0) c.broadcast(text.data(), text.size(), root);
}

}  // namespace

std::string save_sharded_checkpoint(const std::string& dir, int64_t iteration, const nlohmann::ordered_json& record,
                                    const CheckpointSaveOptions& options, World& world, const LocalState& local) {
  const RankCoords at = world.coords();
  std::unique_ptr<CheckpointWriter> writer;
  std::string temp;
  if (world.rank() == 0) {
    writer = std::make_unique<CheckpointWriter>(dir, iteration, options);
    temp = writer->temp_path();
  }
  broadcast_string(world.world(), temp, 0);

  std::vector<CheckpointFileInfo> written;
  if (at.dp == 0) {
    std::vector<SafetensorsInput> tensors;
    for (const auto& t : local.tensors)
      tensors.push_back({t.name, SafetensorsDtype::kF32, shape_of(t), local.params.data() + t.offset});
    written.push_back(write_checkpoint_file(temp, shard_model_file(at.tp, at.pp), tensors));
  }
  if (local.moments_sharded) {
    const uint64_t n = local.m.size();
    written.push_back(write_checkpoint_file(temp, shard_optimizer_file(at.tp, at.pp, at.dp),
                                            {{"exp_avg", SafetensorsDtype::kF32, {n}, local.m.data()},
                                             {"exp_avg_sq", SafetensorsDtype::kF32, {n}, local.v.data()}}));
  } else if (at.dp == 0) {
    std::vector<SafetensorsInput> tensors;
    for (const auto& t : local.tensors) {
      tensors.push_back({"exp_avg." + t.name, SafetensorsDtype::kF32, shape_of(t), local.m.data() + t.offset});
      tensors.push_back({"exp_avg_sq." + t.name, SafetensorsDtype::kF32, shape_of(t), local.v.data() + t.offset});
    }
    written.push_back(write_checkpoint_file(temp, shard_optimizer_file(at.tp, at.pp), tensors));
  }

  // Every rank tells rank 0 what it wrote; rank 0 lists it all and commits.
  for (int r = 0; r < world.size(); ++r) {
    std::string list;
    if (world.rank() == r) {
      nlohmann::json files = nlohmann::json::array();
      for (const auto& f : written) files.push_back({f.name, f.xxh64, f.bytes});
      list = files.dump();
    }
    broadcast_string(world.world(), list, r);
    if (writer)
      for (const auto& f : nlohmann::json::parse(list))
        writer->add_file({f.at(0).get<std::string>(), f.at(1).get<uint64_t>(), f.at(2).get<uint64_t>()});
  }
  std::string path;
  if (writer) path = writer->commit(record);
  world.world().barrier();  // no rank goes on before the checkpoint is complete
  return path;
}

void load_sharded_state(const Checkpoint& ck, const ModelConfig& config, const ParallelLayout& saved,
                        int virtual_stages, bool sharded_moments, std::vector<float>& params, std::vector<float>& m,
                        std::vector<float>& v) {
  const NativeLayout layout{saved.tp, saved.pp, saved.dp, virtual_stages, sharded_moments};
  const NativeStateReader reader([&ck](const std::string& name) -> const SafetensorsFile& { return ck.file(name); },
                                 config, layout);
  reader.check();
  const size_t n = table_size(reader.table());
  params.resize(n);
  m.resize(n);
  v.resize(n);
  for (const auto& t : reader.table()) {
    reader.read(t, StateKind::param, params.data() + t.offset);
    reader.read(t, StateKind::exp_avg, m.data() + t.offset);
    reader.read(t, StateKind::exp_avg_sq, v.data() + t.offset);
  }
}

}  // namespace meg
