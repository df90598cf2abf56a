#include "convert/reshard.hpp"

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "ckpt/checkpoint.hpp"
#include "ckpt/state_reader.hpp"
#include "convert/native_writer.hpp"
#include "convert/output_dir.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"

namespace meg {

ReshardResult reshard_checkpoint(const ReshardOptions& options) {
  if (options.load.empty()) input_error("--load DIR is required");
  if (options.save.empty()) input_error("--save DIR is required");
  const Checkpoint ck = load_checkpoint(options.load);  // every file's size and checksum
  const NativeSource src = read_native_source(ck);
  const ShardFiles source_files = [&ck](const std::string& name) -> const SafetensorsFile& { return ck.file(name); };
  const NativeStateReader reader(source_files, src.config, src.layout);
  reader.check();

  const NativeLayout& layout = options.layout;
  const ModelConfig config = config_for_layout(src.config, layout);
  check_layout(config, layout);
  check_output_outside(options.save, ck.path());

  std::unordered_map<std::string, const ParamTensor*> source_tensor;
  for (const auto& t : reader.table()) source_tensor[t.name] = &t;
  // The input's tensor as the output's: the vocabulary rows cut or zero-extended (rows are
  // contiguous, so that is a prefix or a zero tail).
  const auto read_source_tensor = [&](const ParamTensor& full, StateKind kind, std::vector<float>& whole) {
    const ParamTensor& in = *source_tensor.at(full.name);
    whole.resize(std::max(in.numel, full.numel));
    reader.read(in, kind, whole.data());
    std::fill(whole.begin() + std::ptrdiff_t(std::min(in.numel, full.numel)), whole.begin() + std::ptrdiff_t(full.numel),
              0.0f);
  };

  nlohmann::ordered_json record = ck.record();
  record["model"]["padded-vocab-size"] = config.padded_vocab_size;
  set_record_layout(record, layout);

  ReshardResult result{ck.path(), "", src.layout, 0, 0};
  if (auto done = finish_interrupted_save(options.save, ck.iteration(), record)) {
    log::info("{}: the same conversion was interrupted before it named its checkpoint `latest`; finished it", *done);
    result.path = *done;
    return result;
  }
  const auto start = std::chrono::steady_clock::now();
  write_or_nothing(options.save, [&] {
    CheckpointWriter w(options.save, ck.iteration(), {.attachments = ck.carried_attachments()});
    log::info("{} ({}) -> {} ({})", ck.path(), src.layout.describe(), w.final_path(), layout.describe());
    Progress progress("resharding", 3 * sizeof(float) * table_size(reader.table()));
    result.bytes = write_native_state(w, config, layout, [&](const ParamTensor& full, StateKind kind, auto& whole) {
      read_source_tensor(full, kind, whole);
      progress.add(full.numel * sizeof(float));
    });
    progress.finish();
    if (options.verify) {
      verify_native_state(w.temp_path(), config, layout, read_source_tensor);
      log::info("verified: every tensor of the output equals the input's");
    }
    result.path = w.commit(record);
  });
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace meg
