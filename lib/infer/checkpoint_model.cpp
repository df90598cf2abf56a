#include "infer/checkpoint_model.hpp"

#include "ckpt/checkpoint.hpp"
#include "ckpt/checkpoint_tokenizer.hpp"
#include "ckpt/state_reader.hpp"
#include "core/error.hpp"
#include "model/tensor_parallel_shard.hpp"

namespace meg {

CheckpointModel load_checkpoint_model(const std::string& dir, int tp, int rank) {
  // Only the parameter files are read, so only theirs are checksummed (the moments are not).
  const Checkpoint ck =
      load_checkpoint(dir, {.checksum_file = NativeLayout::holds_parameters, .verify_checksums = true});
  const NativeSource src = read_native_source(ck);
  const NativeStateReader reader([&ck](const std::string& name) -> const SafetensorsFile& { return ck.file(name); },
                                 src.config, src.layout);
  reader.check();
  CheckpointModel m;
  m.path = ck.path();
  m.config = src.config;
  const auto read = [&reader](const ParamTensor& t, float* out) { reader.read(t, StateKind::param, out); };
  if (tp > 1) {
    const ModelConfig sharded = tensor_parallel_config(m.config, size_t(m.config.num_parameters()), tp);
    m.params = tensor_parallel_shard(m.config, sharded, tp, rank, read);
    m.tp = tp;
    m.rank = rank;
  } else {
    m.params.resize(m.config.num_parameters());
    for (const ParamTensor& t : reader.table()) read(t, m.params.data() + t.offset);
  }
  const TokenizerFiles tokenizer = checkpoint_tokenizer(ck);
  m.tokenizer = tokenizer.tokenizer;
  m.merges = tokenizer.merges;
  return m;
}

std::unique_ptr<Tokenizer> load_model_tokenizer(const CheckpointModel& model, const std::string& tokenizer,
                                                const std::string& merges) {
  const bool given = !tokenizer.empty();
  const std::string path = given ? tokenizer : model.tokenizer;
  if (path.empty())
    input_error("{}: the checkpoint records no tokenizer; name one with --tokenizer", model.path);
  // Checkpoints keep their tokenizer's files; older ones record its absolute path, or older still
  // the path as meg-pretrain was given it, which only reads from the directory it ran in.
  if (!given) require_recorded_tokenizer({model.tokenizer, model.merges}, model.path);
  auto tok = load_tokenizer(path, given ? merges : model.merges);
  if (tok->vocab_size() > model.config.vocab_size)
    input_error("{}: the tokenizer's {} tokens do not fit the model's vocabulary of {}", path, tok->vocab_size(),
                model.config.vocab_size);
  return tok;
}

}  // namespace meg
