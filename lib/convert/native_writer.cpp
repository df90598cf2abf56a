#include "convert/native_writer.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>

#include "ckpt/state_reader.hpp"
#include "model/param_table.hpp"
#include "model/pipeline.hpp"
#include "model/tensor_parallel.hpp"
#include "optim/adamw.hpp"

namespace meg {

namespace {

std::vector<uint64_t> dims(const std::vector<int64_t>& shape) { return {shape.begin(), shape.end()}; }

std::string moment_name(StateKind kind, const std::string& name) { return std::string(to_string(kind)) + "." + name; }

// The open files of one layout, and the appends of one slice to them.
class LayoutFiles {
 public:
  LayoutFiles(CheckpointWriter& w, const NativeLayout& layout, const std::vector<std::vector<ParamTensor>>& rank_tables)
      : w_(w), layout_(layout), rank_tables_(rank_tables) {
    for (int p = 0; p < layout.pp; ++p) {
      const auto& table = rank_tables[size_t(p)];
      for (int t = 0; t < layout.tp; ++t) {
        SafetensorsWriter& model = open(layout.model_file(t, p));
        for (const auto& local : table) model.declare(local.name, SafetensorsDtype::kF32, dims(local.shape));
        model.write_header();
        if (layout.distributed_optimizer) {
          for (int d = 0; d < layout.dp; ++d) {
            SafetensorsWriter& shard = open(layout.optimizer_shard_file(t, p, d));
            const uint64_t size = optimizer_shard(table_size(table), layout.dp, d).size;
            for (const StateKind kind : {StateKind::exp_avg, StateKind::exp_avg_sq})
              shard.declare(to_string(kind), SafetensorsDtype::kF32, {size});
            shard.write_header();
          }
        } else {
          SafetensorsWriter& optimizer = open(layout.optimizer_file(t, p));
          for (const auto& local : table)
            for (const StateKind kind : {StateKind::exp_avg, StateKind::exp_avg_sq})
              optimizer.declare(moment_name(kind, local.name), SafetensorsDtype::kF32, dims(local.shape));
          optimizer.write_header();
        }
      }
    }
  }

  // Appends SLICE, state KIND of LOCAL (an entry of pipeline rank P's table) on tensor-parallel rank T.
  void append(int t, int p, const ParamTensor& local, StateKind kind, const float* slice) {
    if (kind == StateKind::param) return write(layout_.model_file(t, p), local.name, slice, local.numel);
    if (!layout_.distributed_optimizer)
      return write(layout_.optimizer_file(t, p), moment_name(kind, local.name), slice, local.numel);
    const size_t flat_size = table_size(rank_tables_[size_t(p)]);
    size_t at = local.offset, n = local.numel;
    while (n > 0) {
      const int d = int(at / optimizer_shard(flat_size, layout_.dp, 0).size);
      const Shard shard = optimizer_shard(flat_size, layout_.dp, d);
      const size_t k = std::min(n, shard.begin + shard.size - at);
      write(layout_.optimizer_shard_file(t, p, d), to_string(kind), slice, k);
      slice += k;
      at += k;
      n -= k;
    }
  }

  // The distributed optimizer's padding of KIND: zeros from the end of each rank's flat array to
  // the end of its last shard.
  void pad(StateKind kind) {
    static const std::vector<float> zeros(1 << 16, 0.0f);
    for (int p = 0; p < layout_.pp; ++p) {
      const size_t flat_size = table_size(rank_tables_[size_t(p)]);
      for (int t = 0; t < layout_.tp; ++t)
        for (int d = 0; d < layout_.dp; ++d) {
          const Shard shard = optimizer_shard(flat_size, layout_.dp, d);
          for (size_t at = std::clamp(flat_size, shard.begin, shard.begin + shard.size); at < shard.begin + shard.size;) {
            const size_t k = std::min(zeros.size(), shard.begin + shard.size - at);
            write(layout_.optimizer_shard_file(t, p, d), to_string(kind), zeros.data(), k);
            at += k;
          }
        }
    }
  }

  uint64_t bytes() const { return bytes_; }

 private:
  SafetensorsWriter& open(const std::string& file) { return *(files_[file] = &w_.file(file)); }

  void write(const std::string& file, const std::string& name, const float* data, size_t n) {
    files_.at(file)->write(name, data, n * sizeof(float));
    bytes_ += n * sizeof(float);
  }

  CheckpointWriter& w_;
  const NativeLayout& layout_;
  const std::vector<std::vector<ParamTensor>>& rank_tables_;
  std::unordered_map<std::string, SafetensorsWriter*> files_;
  uint64_t bytes_ = 0;
};

}  // namespace

uint64_t write_native_state(CheckpointWriter& w, const ModelConfig& config, const NativeLayout& layout,
                            const WholeTensorSource& source) {
  const auto full_table = gpt_parameter_table(config);
  const auto tp_table = layout.tp > 1 ? gpt_parameter_table(config, layout.tp) : full_table;
  std::vector<std::vector<ParamTensor>> rank_tables;
  for (int p = 0; p < layout.pp; ++p)
    rank_tables.push_back(chunks_table(config, rank_chunks(p, layout.pp, layout.virtual_stages), tp_table));
  std::unordered_map<std::string, const ParamTensor*> full_of;
  for (const auto& t : full_table) full_of[t.name] = &t;
  LayoutFiles files(w, layout, rank_tables);

  // One walk per group of kinds whose files take them in the same order (see the header).
  std::vector<std::vector<StateKind>> walks = {{StateKind::param, StateKind::exp_avg, StateKind::exp_avg_sq}};
  if (layout.distributed_optimizer) walks = {{StateKind::param, StateKind::exp_avg}, {StateKind::exp_avg_sq}};
  std::vector<float> whole, slice;
  const int stages = layout.pp * layout.virtual_stages;
  for (const auto& kinds : walks) {
    std::vector<size_t> next(size_t(layout.pp), 0);  // per pipeline rank: its next table entry
    for (int s = 0; s < stages; ++s) {
      const int p = s % layout.pp;
      const auto& table = rank_tables[size_t(p)];
      const size_t count = stage_table(config, {s, stages}, tp_table).size();
      for (size_t i = next[size_t(p)]; i < next[size_t(p)] + count; ++i) {
        const ParamTensor& local = table[i];
        const ParamTensor& full = *full_of.at(local.name);
        const bool replicated = tp_split_of(full).split == TpSplit::replicated;
        for (const StateKind kind : kinds) {
          source(full, kind, whole);
          for (int t = 0; t < layout.tp; ++t) {
            if (replicated) {
              files.append(t, p, local, kind, whole.data());
              continue;
            }
            slice.resize(local.numel);
            for_each_shard_run(full, layout.tp, t, [&](size_t fi, size_t li, size_t n) {
              std::copy_n(whole.data() + fi, n, slice.data() + li);
            });
            files.append(t, p, local, kind, slice.data());
          }
        }
      }
      next[size_t(p)] += count;
    }
    if (layout.distributed_optimizer)
      for (const StateKind kind : kinds)
        if (kind != StateKind::param) files.pad(kind);
  }
  for (const auto& name : layout.file_names()) w.close_file(name);
  return files.bytes();
}

void verify_native_state(const std::string& dir, const ModelConfig& config, const NativeLayout& layout,
                         const WholeTensorSource& expected) {
  std::map<std::string, std::unique_ptr<SafetensorsFile>> written;
  for (const auto& name : layout.file_names())
    written[name] = std::make_unique<SafetensorsFile>((std::filesystem::path(dir) / name).string());
  const NativeStateReader reader(
      [&written](const std::string& name) -> const SafetensorsFile& { return *written.at(name); }, config, layout);
  reader.check();
  std::vector<float> got, want;
  for (const auto& full : reader.table())
    for (const StateKind kind : kStateKinds) {
      got.resize(full.numel);
      reader.read(full, kind, got.data());
      expected(full, kind, want);
      if (std::memcmp(got.data(), want.data(), full.numel * sizeof(float)) == 0) continue;
      for (size_t i = 0; i < full.numel; ++i)
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
          throw std::runtime_error(fmt::format("--verify: {} of {} as written: element {} is {} where the source has {}",
                                               to_string(kind), full.name, i, got[i], want[i]));
    }
}

}  // namespace meg
