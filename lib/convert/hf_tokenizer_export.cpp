#include "convert/hf_tokenizer_export.hpp"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/byte_stream.hpp"
#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/log.hpp"
#include "core/mapped_file.hpp"
#include "tokenizer/sentencepiece_hf_json.hpp"
#include "tokenizer/tokenizer.hpp"

namespace meg {

namespace fs = std::filesystem;

namespace {

void copy_file(const std::string& from, const std::string& to) {
  ByteReader in(from);
  ByteWriter out(to);
  std::vector<char> buf(1 << 20);
  while (const size_t n = in.read(buf.data(), buf.size())) out.write(buf.data(), n);
  out.commit();
}

enum class Kind { sentencepiece, gpt2, hf };

// A SentencePiece model's tokenizer.json beside its tokenizer.model, where one encodes as it does
// (transformers reads that, and converts a bare tokenizer.model by rules of its own); whether it
// was written.
bool put_sentencepiece_json(const std::string& model_path, const std::string& dir, std::vector<std::string>& files) {
  const MappedFile file(model_path);
  const SentencePieceHfJson hf = sentencepiece_hf_json(read_sentencepiece_model(file.text(), model_path));
  if (hf.json.is_null()) {
    log::info("{}: no tokenizer.json written ({}): transformers converts tokenizer.model by its own rules, and "
              "may give other ids", model_path, hf.not_exact);
    return false;
  }
  if (!hf.caveat.empty()) log::info("{}: tokenizer.json encodes as the model but for {}", model_path, hf.caveat);
  write_json_file((fs::path(dir) / "tokenizer.json").string(), hf.json);
  files.push_back("tokenizer.json");
  return true;
}

}  // namespace

HfTokenIds write_hf_tokenizer_files(const ModelConfig& config, const std::string& tokenizer, const std::string& merges,
                                    const std::string& dir, std::vector<std::string>& files) {
  if (tokenizer.empty()) {
    log::info("no tokenizer known (the checkpoint keeps none; name one with --tokenizer): the export has no "
              "tokenizer files, and its config names no special token ids");
    return {};
  }
  const Kind kind = !merges.empty() ? Kind::gpt2 : tokenizer.ends_with(".json") ? Kind::hf : Kind::sentencepiece;
  const auto t = load_tokenizer(tokenizer, merges);
  if (t->vocab_size() > config.vocab_size)
    input_error("{}: the tokenizer has {} tokens, more than the model's vocabulary of {}", tokenizer, t->vocab_size(),
                config.vocab_size);
  const auto put = [&](const std::string& from, const std::string& name) {
    copy_file(from, (fs::path(dir) / name).string());
    files.push_back(name);
  };

  HfTokenIds ids;
  ids.eos = t->eod_id();
  const char* tokenizer_class = "PreTrainedTokenizerFast";
  switch (kind) {
    case Kind::gpt2:
      put(tokenizer, "vocab.json");
      put(merges, "merges.txt");
      ids.bos = ids.eos;  // GPT-2's <|endoftext|> both begins and ends texts, as in OpenAI's config
      tokenizer_class = "GPT2Tokenizer";
      break;
    case Kind::sentencepiece:
      put(tokenizer, "tokenizer.model");
      tokenizer_class = put_sentencepiece_json(tokenizer, dir, files) ? "PreTrainedTokenizerFast" : "LlamaTokenizer";
      break;
    case Kind::hf:
      put(tokenizer, "tokenizer.json");
      if (!t->special_prefix().empty()) ids.bos = t->special_prefix()[0];
      break;
  }
  if (!ids.bos && kind == Kind::sentencepiece && ids.eos != 1 && t->vocab_size() > 1 && t->token_text(1) == "<s>")
    ids.bos = 1;  // meg's SentencePiece models: <unk> 0, <s> 1, </s> 2

  nlohmann::ordered_json special;
  if (ids.bos) special["bos_token"] = t->token_text(int32_t(*ids.bos));
  special["eos_token"] = t->token_text(int32_t(*ids.eos));
  if (t->unk_id() >= 0) special["unk_token"] = t->token_text(t->unk_id());

  // A tokenizer.json that came with its own settings (an imported model's) keeps them.
  const fs::path own = fs::path(tokenizer).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (kind == Kind::hf && fs::is_regular_file(own, ec)) {
    put(own.string(), "tokenizer_config.json");
  } else {
    nlohmann::ordered_json tc = {{"tokenizer_class", tokenizer_class}};
    tc.update(special);
    // meg puts no special token around a text but a tokenizer.json's post-processor's.
    tc["add_bos_token"] = false;
    tc["add_eos_token"] = false;
    // Nor does meg find special tokens in the text of these kinds (as SentencePiece and Megatron's
    // GPT-2 tokenizer do not); a tokenizer.json's own added tokens say which it finds.
    if (kind != Kind::hf) tc["split_special_tokens"] = true;
    if (kind == Kind::gpt2) tc["add_prefix_space"] = false;
    if (kind == Kind::sentencepiece) tc["legacy"] = false;
    tc["model_max_length"] = config.seq_length;
    tc["clean_up_tokenization_spaces"] = false;
    write_json_file((fs::path(dir) / "tokenizer_config.json").string(), tc);
    files.push_back("tokenizer_config.json");
  }
  write_json_file((fs::path(dir) / "special_tokens_map.json").string(), special);
  files.push_back("special_tokens_map.json");
  return ids;
}

}  // namespace meg
