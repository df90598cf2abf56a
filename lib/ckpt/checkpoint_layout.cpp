#include "ckpt/checkpoint_layout.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/pipeline.hpp"
#include "model/tensor_parallel.hpp"
#include "parallel/layout.hpp"

namespace meg {

std::string shard_model_file(int tp, int pp) { return fmt::format("model-tp{:02}-pp{:02}.safetensors", tp, pp); }
std::string shard_optimizer_file(int tp, int pp) {
  return fmt::format("optimizer-tp{:02}-pp{:02}.safetensors", tp, pp);
}
std::string shard_optimizer_file(int tp, int pp, int dp) {
  return fmt::format("optimizer-tp{:02}-pp{:02}-dp{:02}.safetensors", tp, pp, dp);
}

const char* to_string(StateKind kind) {
  switch (kind) {
    case StateKind::param: return "param";
    case StateKind::exp_avg: return "exp_avg";
    case StateKind::exp_avg_sq: return "exp_avg_sq";
  }
  return "?";
}

NativeLayout NativeLayout::of(int tp, int pp, int dp, int virtual_stages, bool distributed_optimizer) {
  const auto positive = [](const char* option, int size) {
    if (size < 1) input_error("{} {} must be at least 1", option, size);
  };
  positive("--tp", tp);
  positive("--pp", pp);
  positive("--dp", dp);
  positive("--virtual-stages", virtual_stages);
  return {tp, pp, dp, virtual_stages, distributed_optimizer && dp > 1};
}

std::string NativeLayout::model_file(int tp_rank, int pp_rank) const {
  return sharded() ? shard_model_file(tp_rank, pp_rank) : "model.safetensors";
}

std::string NativeLayout::optimizer_file(int tp_rank, int pp_rank) const {
  return sharded() ? shard_optimizer_file(tp_rank, pp_rank) : "optimizer.safetensors";
}

std::string NativeLayout::optimizer_shard_file(int tp_rank, int pp_rank, int dp_rank) const {
  return shard_optimizer_file(tp_rank, pp_rank, dp_rank);
}

bool NativeLayout::holds_parameters(const std::string& file) {
  return file == NativeLayout{}.model_file(0, 0) || file.starts_with("model-");  // shard_model_file's names
}

std::vector<std::string> NativeLayout::file_names() const {
  std::vector<std::string> out;
  for (int p = 0; p < pp; ++p)
    for (int t = 0; t < tp; ++t) {
      out.push_back(model_file(t, p));
      if (!distributed_optimizer) out.push_back(optimizer_file(t, p));
      else
        for (int d = 0; d < dp; ++d) out.push_back(optimizer_shard_file(t, p, d));
    }
  return out;
}

std::string NativeLayout::describe() const {
  std::string s = fmt::format("tp {}, pp {}", tp, pp);
  if (virtual_stages > 1) s += fmt::format(" ({} virtual stages)", virtual_stages);
  s += fmt::format(", dp {}", dp);
  if (distributed_optimizer) s += ", distributed optimizer";
  return s;
}

NativeLayout layout_of_record(const nlohmann::ordered_json& record, const std::string& where) {
  const auto size = [&](const nlohmann::ordered_json& parallel, const char* key, bool required) {
    if (!parallel.contains(key)) {
      if (required) input_error("{}: record \"parallel\" has no \"{}\"", where, key);
      return 1;
    }
    const auto& v = parallel[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1 << 20)
      input_error("{}: record \"parallel\".\"{}\" is {}, not a positive size", where, key, v.dump());
    return v.get<int>();
  };
  const auto flag = [&](const char* key) {
    if (!record.contains(key)) return false;
    if (!record[key].is_boolean()) input_error("{}: record \"{}\" is {}, not true or false", where, key, record[key].dump());
    return record[key].get<bool>();
  };
  if (!record.is_object()) input_error("{}: the record is not an object", where);
  // Records of one process written before the layout was recorded are unsharded.
  if (!record.contains("parallel")) {
    if (flag("sharded")) input_error("{}: a sharded record without \"parallel\"", where);
    return {};
  }
  const auto& parallel = record["parallel"];
  if (!parallel.is_object()) input_error("{}: record \"parallel\" is not an object", where);
  for (const char* dim : {"cp", "ep"})
    if (size(parallel, dim, false) != 1)
      input_error("{}: written with {} {}: context and expert parallelism are not supported", where, dim,
                  parallel[dim].dump());
  const NativeLayout layout{size(parallel, "tp", true), size(parallel, "pp", true), size(parallel, "dp", true),
                            size(parallel, "virtual_stages", false), flag("distributed_optimizer")};
  if (layout.distributed_optimizer && layout.dp == 1)
    input_error("{}: record says \"distributed_optimizer\" with one data-parallel rank", where);
  if (flag("sharded") != layout.sharded())
    input_error("{}: record says \"sharded\": {} but its layout ({}) is {}", where, flag("sharded"), layout.describe(),
                layout.sharded() ? "sharded" : "not");
  return layout;
}

void set_record_layout(nlohmann::ordered_json& record, const NativeLayout& layout) {
  ParallelLayout sizes;
  sizes.tp = layout.tp;
  sizes.pp = layout.pp;
  sizes.dp = layout.dp;
  nlohmann::ordered_json parallel = sizes.to_json();
  parallel["virtual_stages"] = layout.virtual_stages;
  record["parallel"] = parallel;
  record["sharded"] = layout.sharded();
  record["distributed_optimizer"] = layout.distributed_optimizer;
}

void check_layout(const ModelConfig& config, const NativeLayout& layout) {
  if (layout.virtual_stages > 1 && layout.pp == 1) input_error("--virtual-stages needs --pp above 1");
  check_tensor_parallel(config, layout.tp);
  check_pipeline_parallel(config, layout.pp, layout.virtual_stages);
}

ModelConfig config_for_layout(ModelConfig config, const NativeLayout& layout) {
  config.pad_vocab(layout.tp);
  return config;
}

}  // namespace meg
