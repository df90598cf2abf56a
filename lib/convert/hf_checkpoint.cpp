#include "convert/hf_checkpoint.hpp"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>

#include "ckpt/checkpoint.hpp"
#include "ckpt/checkpoint_tokenizer.hpp"
#include "ckpt/safetensors_floats.hpp"
#include "ckpt/state_reader.hpp"
#include "convert/hf_config.hpp"
#include "convert/hf_import.hpp"
#include "convert/hf_names.hpp"
#include "convert/native_writer.hpp"
#include "convert/output_dir.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "tokenizer/tokenizer.hpp"

namespace meg {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The tokenizer of Hugging Face directory DIR where meg reads its kind (tokenizer.json first, as
// transformers' fast tokenizers prefer it; else the SentencePiece tokenizer.model, or GPT-2's
// vocab.json with merges.txt), by absolute path. None when it has none of them.
TokenizerFiles hf_tokenizer_files(const std::string& dir) {
  const TokenizerPaths files = tokenizer_files_in(std::filesystem::absolute(dir).lexically_normal().string());
  return {files.tokenizer, files.merges};
}

// The tokenizer an export copies: --tokenizer when given, else the one the checkpoint keeps (or,
// older, records by a path that still holds it).
HfExportOptions with_checkpoint_tokenizer(HfExportOptions hf, const Checkpoint& ck) {
  if (!hf.tokenizer.empty()) return hf;
  const TokenizerFiles kept = checkpoint_tokenizer(ck);
  if (kept.empty()) return hf;
  for (const std::string& file : {kept.tokenizer, kept.merges})
    if (!file.empty() && !std::filesystem::is_regular_file(file)) {
      log::warn("{}: the tokenizer file it records, {}, is not there: the export has no tokenizer (give --tokenizer)",
                ck.path(), file);
      return hf;
    }
  hf.tokenizer = kept.tokenizer;
  hf.merges = kept.merges;
  return hf;
}

// --verify of an export: the directory DIR read back by the importer holds SOURCE's tensors of
// CONFIG's model, each as DTYPE rounds it. A meg tensor's Hugging Face tensors tile its rows from
// the first (hf_names.hpp), so its stored part is a prefix; the rest is vocabulary padding, which
// is not exported.
void verify_export(const std::string& dir, const ModelConfig& config, SafetensorsDtype dtype,
                   const MegTensorSource& source) {
  const HfReader back(dir, {.make_vocab_size_divisible_by = config.make_vocab_size_divisible_by});
  std::map<std::string, size_t> stored;  // meg name -> elements exported
  for (const auto& m : hf_tensor_map(config)) stored[m.meg_name] += m.numel();
  for (const auto& [name, n] : stored) {
    std::vector<float> want;
    source(name, want);
    round_floats(std::span<float>(want).first(n), dtype);
    const std::vector<float> got = back.tensor(name);
    for (size_t i = 0; i < n; ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
        throw std::runtime_error(fmt::format("--verify: {} as written in {}: element {} is {} where the source has {}",
                                             name, dir, i, got[i], want[i]));
  }
}

}  // namespace

HfConvertResult export_checkpoint_to_hf(const ToHfOptions& options) {
  if (options.load.empty()) input_error("--load DIR is required");
  if (options.save.empty()) input_error("--save DIR is required");
  // Every file's size and header; the checksums of the parameters' files, the only ones read.
  const Checkpoint ck = load_checkpoint(options.load, {.checksum_file = NativeLayout::holds_parameters, .verify_checksums = true});
  const NativeSource src = read_native_source(ck);
  const NativeStateReader reader([&ck](const std::string& name) -> const SafetensorsFile& { return ck.file(name); },
                                 src.config, src.layout);
  reader.check();
  check_output_outside(options.save, ck.path());

  std::unordered_map<std::string, const ParamTensor*> tensor_of;
  for (const auto& t : reader.table()) tensor_of[t.name] = &t;
  const MegTensorSource source = [&](const std::string& name, std::vector<float>& whole) {
    const ParamTensor& t = *tensor_of.at(name);
    whole.resize(t.numel);
    reader.read(t, StateKind::param, whole.data());
  };
  HfExportOptions hf = with_checkpoint_tokenizer(options.hf, ck);
  if (options.verify)
    hf.before_commit = [&](const std::string& dir) {
      verify_export(dir, src.config, hf.dtype, source);
      log::info("verified: every tensor of the output equals the input's{}",
                hf.dtype == SafetensorsDtype::kF32 ? "" : fmt::format(" rounded to {}", torch_dtype_name(hf.dtype)));
    };

  log::info("{} ({}, {}) -> {} (Hugging Face, {})", ck.path(), to_string(src.config.family), src.layout.describe(),
            options.save, torch_dtype_name(hf.dtype));
  const auto start = Clock::now();
  const HfExportSummary summary = export_hf(src.config, source, options.save, hf);
  return {ck.path(), options.save, src.config, summary.tensor_bytes, seconds_since(start)};
}

HfConvertResult import_hf_checkpoint(const FromHfOptions& options) {
  if (options.save.empty()) input_error("--save DIR is required");
  const HfReader reader(options.dir, {.tp = options.layout.tp});  // checks every file and tensor
  const ModelConfig& config = reader.config();
  check_layout(config, options.layout);
  check_output_outside(options.save, options.dir);

  // A run about to take its first step from the imported weights: zero moments.
  const WholeTensorSource source = [&](const ParamTensor& full, StateKind kind, std::vector<float>& whole) {
    if (kind == StateKind::param) whole = reader.tensor(full.name);
    else whole.assign(full.numel, 0.0f);
  };
  // The tokenizer, when the directory has one meg reads, is kept with the checkpoint, so that
  // fine-tuning from it and meg-generate find it there (ckpt/checkpoint_tokenizer.hpp).
  const TokenizerFiles tokenizer = hf_tokenizer_files(options.dir);
  const KeptTokenizer kept(tokenizer, false);
  nlohmann::ordered_json record;
  record["model"] = config.to_json();
  record["iteration"] = 0;
  record["consumed_samples"] = 0;
  record["optimizer_step"] = 0;
  set_record_layout(record, options.layout);
  record["imported_from"] = {{"format", "hf"}, {"dir", std::filesystem::absolute(options.dir).string()}};
  if (!tokenizer.empty()) {
    record["options"] = {{"tokenizer", tokenizer.tokenizer}, {"merges", tokenizer.merges}};
    record["tokenizer"] = kept.record();
  }

  HfConvertResult result{options.dir, "", config, 0, 0};
  if (auto done = finish_interrupted_save(options.save, 0, record)) {
    log::info("{}: the same import was interrupted before it named its checkpoint `latest`; finished it", *done);
    result.path = *done;
    return result;
  }
  const auto start = Clock::now();
  write_or_nothing(options.save, [&] {
    CheckpointWriter w(options.save, 0, {.attachments = kept.attachments()});
    log::info("{} (Hugging Face, {}) -> {} ({})", options.dir, to_string(config.family), w.final_path(),
              options.layout.describe());
    result.bytes = write_native_state(w, config, options.layout, source);
    if (options.verify) {
      verify_native_state(w.temp_path(), config, options.layout, source);
      log::info("verified: every tensor of the output equals the input's");
    }
    result.path = w.commit(record);
  });
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace meg
