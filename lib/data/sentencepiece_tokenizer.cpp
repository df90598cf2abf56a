#include "data/sentencepiece_tokenizer.hpp"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include "core/byte_stream.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/mapped_file.hpp"

namespace meg {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : path_(model_path), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const MappedFile file(model_path);
  const std::string_view bytes(reinterpret_cast<const char*>(file.data()), file.size());
  const auto status = sp_->LoadFromSerializedProto(bytes);
  if (!status.ok()) input_error("{}: not a SentencePiece model: {}", model_path, status.ToString());
  fingerprint_ = xxh64(bytes.data(), bytes.size());
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

void SentencePieceTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) throw std::runtime_error("SentencePiece encode failed: " + status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  const int n = sp_->GetPieceSize();
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= n) input_error("token {} at position {} is outside the vocabulary of {}", ids[i], i, n);
  std::string text;
  const auto status = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok()) throw std::runtime_error("SentencePiece decode failed: " + status.ToString());
  return text;
}

int32_t SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

int32_t SentencePieceTokenizer::eod_id() const { return sp_->eos_id(); }

std::string SentencePieceTokenizer::describe() const {
  return fmt::format("SentencePiece, vocab {} ({})", vocab_size(), std::filesystem::path(path_).filename().string());
}

// ---------------------------------------------------------------------------------------------
// Training

namespace {
class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return pos_ >= lines_.size(); }
  void Next() override { ++pos_; }
  const std::string& value() const override { return lines_[pos_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  size_t pos_ = 0;
};
}  // namespace

void train_sentencepiece(const std::vector<std::string>& documents, const SentencePieceTrainOptions& options,
                         const std::string& output) {
  if (options.model_type != "bpe" && options.model_type != "unigram")
    input_error("--model-type must be bpe or unigram, not '{}'", options.model_type);
  // SentencePiece learns from sentences of bounded length, so documents are fed line by line, as
  // spm_train reads a text file.
  std::vector<std::string> lines;
  for (const auto& doc : documents) {
    size_t start = 0;
    while (start <= doc.size()) {
      size_t end = doc.find('\n', start);
      if (end == std::string::npos) end = doc.size();
      if (end > start) lines.emplace_back(doc.substr(start, end - start));
      start = end + 1;
    }
  }
  if (lines.empty()) input_error("no text to train on");
  std::string args = fmt::format(
      "--vocab_size={} --model_type={} --character_coverage={} --num_threads={} "
      "--minloglevel=2 --max_sentence_length=16384",
      options.vocab_size, options.model_type, options.character_coverage, options.threads);
  if (options.max_sentences > 0)
    args += fmt::format(" --input_sentence_size={} --shuffle_input_sentence=true", options.max_sentences);
  if (!options.extra.empty()) args += " " + options.extra;

  sentencepiece::SetRandomGeneratorSeed(options.seed);  // sampling of --max-sentences lines
  VectorIterator it(lines);
  std::string model;
  // The trainer logs its command line before it reads --minloglevel; its errors come back in the
  // status, so its stderr is silenced for the call.
  const int saved_stderr = ::dup(STDERR_FILENO);
  const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  ::dup2(devnull, STDERR_FILENO);
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  ::dup2(saved_stderr, STDERR_FILENO);
  ::close(saved_stderr);
  ::close(devnull);
  if (!status.ok()) input_error("SentencePiece training failed: {}", status.ToString());

  ByteWriter out(output);
  out.write(model.data(), model.size());
  out.commit();
}

}  // namespace meg
