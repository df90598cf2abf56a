#include "ckpt/state_reader.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.hpp"
#include "model/param_table.hpp"
#include "model/pipeline.hpp"
#include "model/tensor_parallel.hpp"
#include "optim/adamw.hpp"

namespace meg {

namespace {

std::vector<uint64_t> dims(const std::vector<int64_t>& shape) { return {shape.begin(), shape.end()}; }

std::string moment_name(StateKind kind, const std::string& name) { return std::string(to_string(kind)) + "." + name; }

}  // namespace

NativeSource read_native_source(const Checkpoint& ck) {
  const std::string where = (std::filesystem::path(ck.path()) / kCheckpointRecordFile).string();
  const auto& record = ck.record();
  NativeSource s;
  try {
    if (!record.is_object() || !record.contains("model")) input_error("{}: the record has no \"model\"", where);
    s.config = ModelConfig::from_json(record["model"], where);
  } catch (const nlohmann::json::exception& e) {
    input_error("{}: malformed \"model\": {}", where, e.what());
  }
  s.config.validate(where);
  s.layout = layout_of_record(record, where);
  try {
    check_layout(s.config, s.layout);
  } catch (const InputError& e) {
    input_error("{}: the recorded layout does not fit the model: {}", where, e.what());
  }
  const auto expected = s.layout.file_names();
  const std::set<std::string> known(expected.begin(), expected.end());
  for (const auto& name : ck.file_names())
    if (!known.count(name))
      input_error("{}: file {} does not belong to the recorded layout ({})", where, name, s.layout.describe());
  return s;
}

NativeStateReader::NativeStateReader(ShardFiles files, const ModelConfig& config, const NativeLayout& layout)
    : files_(std::move(files)), config_(config), layout_(layout), full_(gpt_parameter_table(config)) {
  const auto tp_table = layout.tp > 1 ? gpt_parameter_table(config, layout.tp) : full_;
  for (int p = 0; p < layout.pp; ++p)
    rank_tables_.push_back(chunks_table(config, rank_chunks(p, layout.pp, layout.virtual_stages), tp_table));
  // The first virtual stage holding a tensor names its pipeline rank (virtual stage s is on rank
  // s mod pp), which holds it once.
  const int stages = layout.pp * layout.virtual_stages;
  for (int s = stages - 1; s >= 0; --s) {
    const int p = s % layout.pp;
    for (const auto& t : stage_table(config, {s, stages}, tp_table)) {
      const auto& rank_table = rank_tables_[size_t(p)];
      const auto it = std::find_if(rank_table.begin(), rank_table.end(), [&](const auto& r) { return r.name == t.name; });
      holders_[t.name] = {p, &*it};
    }
  }
}

const float* NativeStateReader::tensor_data(const std::string& file, const std::string& name,
                                            const std::vector<int64_t>& shape) const {
  return reinterpret_cast<const float*>(files_(file).tensor(name, SafetensorsDtype::kF32, dims(shape)).bytes.data());
}

void NativeStateReader::check() const {
  const auto count = [&](const std::string& file, size_t expected) {
    const SafetensorsFile& f = files_(file);
    if (f.tensors().size() != expected)
      input_error("{}: {} tensors where the layout ({}) puts {} (inconsistent shards?)", f.path(), f.tensors().size(),
                  layout_.describe(), expected);
  };
  for (int p = 0; p < layout_.pp; ++p) {
    const auto& table = rank_tables_[size_t(p)];
    const uint64_t n = table_size(table);
    for (int t = 0; t < layout_.tp; ++t) {
      count(layout_.model_file(t, p), table.size());
      for (const auto& local : table) tensor_data(layout_.model_file(t, p), local.name, local.shape);
      if (layout_.distributed_optimizer) {
        for (int d = 0; d < layout_.dp; ++d) {
          const int64_t shard = int64_t(optimizer_shard(n, layout_.dp, d).size);
          const std::string file = layout_.optimizer_shard_file(t, p, d);
          count(file, 2);
          for (const StateKind kind : {StateKind::exp_avg, StateKind::exp_avg_sq})
            tensor_data(file, to_string(kind), {shard});
        }
      } else {
        count(layout_.optimizer_file(t, p), 2 * table.size());
        for (const auto& local : table)
          for (const StateKind kind : {StateKind::exp_avg, StateKind::exp_avg_sq})
            tensor_data(layout_.optimizer_file(t, p), moment_name(kind, local.name), local.shape);
      }
    }
  }
}

void NativeStateReader::read_local(const Holder& holder, int tp_rank, StateKind kind, size_t begin, size_t n,
                                   float* dst) const {
  const ParamTensor& local = *holder.local;
  const int p = holder.pp_rank;
  if (kind == StateKind::param) {
    std::memcpy(dst, tensor_data(layout_.model_file(tp_rank, p), local.name, local.shape) + begin, n * sizeof(float));
  } else if (!layout_.distributed_optimizer) {
    const float* src = tensor_data(layout_.optimizer_file(tp_rank, p), moment_name(kind, local.name), local.shape);
    std::memcpy(dst, src + begin, n * sizeof(float));
  } else {  // the rank's flat array, cut into data-parallel shards
    const size_t flat_size = table_size(rank_tables_[size_t(p)]);
    size_t at = local.offset + begin;
    while (n > 0) {
      const int d = int(at / optimizer_shard(flat_size, layout_.dp, 0).size);
      const Shard shard = optimizer_shard(flat_size, layout_.dp, d);
      const size_t k = std::min(n, shard.begin + shard.size - at);
      const float* src =
          tensor_data(layout_.optimizer_shard_file(tp_rank, p, d), to_string(kind), {int64_t(shard.size)});
      std::memcpy(dst, src + (at - shard.begin), k * sizeof(float));
      dst += k;
      at += k;
      n -= k;
    }
  }
}

void NativeStateReader::read(const ParamTensor& full, StateKind kind, float* whole) const {
  const Holder& holder = holders_.at(full.name);
  // A replicated tensor is whole on every tensor-parallel rank: the first one's copy serves.
  const int ranks = tp_split_of(full).split == TpSplit::replicated ? 1 : layout_.tp;
  for (int r = 0; r < ranks; ++r)
    for_each_shard_run(full, layout_.tp, r,
                       [&](size_t fi, size_t li, size_t n) { read_local(holder, r, kind, li, n, whole + fi); });
}

}  // namespace meg
