#include "train/checkpoint_shards.hpp"

#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "model/gpt.hpp"
#include "model/pipeline.hpp"
#include "model/tensor_parallel.hpp"

namespace meg {

namespace {

std::string model_file(int tp, int pp) { return fmt::format("model-tp{:02}-pp{:02}.safetensors", tp, pp); }
std::string optimizer_file(int tp, int pp) { return fmt::format("optimizer-tp{:02}-pp{:02}.safetensors", tp, pp); }
std::string optimizer_file(int tp, int pp, int dp) {
  return fmt::format("optimizer-tp{:02}-pp{:02}-dp{:02}.safetensors", tp, pp, dp);
}

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
                                    int keep, World& world, const LocalState& local) {
  const RankCoords at = world.coords();
  std::unique_ptr<CheckpointWriter> writer;
  std::string temp;
  if (world.rank() == 0) {
    writer = std::make_unique<CheckpointWriter>(dir, iteration, CheckpointSaveOptions{.keep = keep, .overwrite = true});
    temp = writer->temp_path();
  }
  broadcast_string(world.world(), temp, 0);

  std::vector<CheckpointFileInfo> written;
  if (at.dp == 0) {
    std::vector<SafetensorsInput> tensors;
    for (const auto& t : local.tensors)
      tensors.push_back({t.name, SafetensorsDtype::kF32, shape_of(t), local.params.data() + t.offset});
    written.push_back(write_checkpoint_file(temp, model_file(at.tp, at.pp), tensors));
  }
  if (local.moments_sharded) {
    const uint64_t n = local.m.size();
    written.push_back(write_checkpoint_file(temp, optimizer_file(at.tp, at.pp, at.dp),
                                            {{"exp_avg", SafetensorsDtype::kF32, {n}, local.m.data()},
                                             {"exp_avg_sq", SafetensorsDtype::kF32, {n}, local.v.data()}}));
  } else if (at.dp == 0) {
    std::vector<SafetensorsInput> tensors;
    for (const auto& t : local.tensors) {
      tensors.push_back({"exp_avg." + t.name, SafetensorsDtype::kF32, shape_of(t), local.m.data() + t.offset});
      tensors.push_back({"exp_avg_sq." + t.name, SafetensorsDtype::kF32, shape_of(t), local.v.data() + t.offset});
    }
    written.push_back(write_checkpoint_file(temp, optimizer_file(at.tp, at.pp), tensors));
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
  const auto full_table = gpt_parameter_table(config);
  const auto tp_table = saved.tp > 1 ? gpt_parameter_table(config, saved.tp) : full_table;
  // Each tensor-parallel rank's slice of the whole model, put together from the pipeline ranks.
  std::vector<std::vector<float>> slice_p(size_t(saved.tp), std::vector<float>(table_size(tp_table))),
      slice_m = slice_p, slice_v = slice_p;
  for (int tp = 0; tp < saved.tp; ++tp) {
    for (int pp = 0; pp < saved.pp; ++pp) {
      const auto stage = chunks_table(config, rank_chunks(pp, saved.pp, virtual_stages), tp_table);
      const size_t n = table_size(stage);
      std::vector<float> lp(n), lm(n), lv(n);
      const auto fetch = [&](const std::string& file, const std::string& name, const ParamTensor& t, float* dst) {
        const auto& st = ck.tensor(file, name, SafetensorsDtype::kF32, shape_of(t));
        std::memcpy(dst, st.bytes.data(), t.numel * sizeof(float));
      };
      for (const auto& t : stage) fetch(model_file(tp, pp), t.name, t, lp.data() + t.offset);
      if (sharded_moments) {  // the data-parallel shards one after the other, the padding cut off
        const size_t shard = (n + size_t(saved.dp) - 1) / size_t(saved.dp);
        for (int dp = 0; dp < saved.dp; ++dp) {
          const ParamTensor part{"", {int64_t(shard)}, 0, shard, false, ParamInit::zeros};
          std::vector<float> pm(shard), pv(shard);
          fetch(optimizer_file(tp, pp, dp), "exp_avg", part, pm.data());
          fetch(optimizer_file(tp, pp, dp), "exp_avg_sq", part, pv.data());
          for (size_t k = 0; k < shard && size_t(dp) * shard + k < n; ++k) {
            lm[size_t(dp) * shard + k] = pm[k];
            lv[size_t(dp) * shard + k] = pv[k];
          }
        }
      } else {
        for (const auto& t : stage) {
          fetch(optimizer_file(tp, pp), "exp_avg." + t.name, t, lm.data() + t.offset);
          fetch(optimizer_file(tp, pp), "exp_avg_sq." + t.name, t, lv.data() + t.offset);
        }
      }
      copy_stage(tp_table, stage, slice_p[size_t(tp)].data(), lp.data(), false);
      copy_stage(tp_table, stage, slice_m[size_t(tp)].data(), lm.data(), false);
      copy_stage(tp_table, stage, slice_v[size_t(tp)].data(), lv.data(), false);
    }
  }
  const auto whole = [&](std::vector<std::vector<float>>& slices, std::vector<float>& out) {
    if (saved.tp == 1) {
      out = std::move(slices[0]);
      return;
    }
    std::vector<const float*> parts;
    for (const auto& s : slices) parts.push_back(s.data());
    out.assign(table_size(full_table), 0.0f);
    unshard_parameters(config, saved.tp, parts, out.data());
  };
  whole(slice_p, params);
  whole(slice_m, m);
  whole(slice_v, v);
}

}  // namespace meg
