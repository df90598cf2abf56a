#include "data/sentencepiece_tokenizer.hpp"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <filesystem>
#include <utility>

#include "core/byte_stream.hpp"
#include "core/bytes.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/mapped_file.hpp"
#include "data/sentencepiece_bpe.hpp"
#include "data/word_cache.hpp"

namespace meg {

namespace {

// The few fields of the model's protobuf (sentencepiece_model.proto) that decide whether a text
// may be encoded word by word, and natively. Read from the wire format directly: the library does
// not expose them.
struct NormalizerFlags {
  std::string name;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
  bool has_rules = false;
};

struct ModelFields {
  NormalizerFlags normalizer;
  static constexpr int kBpe = 2;  // TrainerSpec.ModelType: UNIGRAM 1, BPE 2, WORD 3, CHAR 4
  int model_type = 1;
  bool whitespace_as_suffix = false;
  std::vector<SentencePieceBpe::Piece> pieces;  // views into the model's bytes
};

bool read_varint(std::string_view& in, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const auto b = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    v |= uint64_t(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// Calls F(field, wire_type, value, bytes) for each field of a message, VALUE holding a varint or
// the bits of a fixed32/fixed64; false if malformed.
template <typename F>
bool for_each_field(std::string_view msg, F&& f) {
  while (!msg.empty()) {
    uint64_t key, v = 0;
    std::string_view bytes;
    if (!read_varint(msg, key)) return false;
    switch (key & 7) {
      case 0: if (!read_varint(msg, v)) return false; break;
      case 1: if (msg.size() < 8) return false; v = load_unaligned<uint64_t>(msg.data()); msg.remove_prefix(8); break;
      case 5: if (msg.size() < 4) return false; v = load_unaligned<uint32_t>(msg.data()); msg.remove_prefix(4); break;
      case 2:
        if (!read_varint(msg, v) || v > msg.size()) return false;
        bytes = msg.substr(0, v);
        msg.remove_prefix(v);
        break;
      default: return false;
    }
    f(key >> 3, key & 7, v, bytes);
  }
  return true;
}

ModelFields read_model(std::string_view model) {
  ModelFields m;
  NormalizerFlags& n = m.normalizer;
  for_each_field(model, [&](uint64_t field, uint64_t, uint64_t, std::string_view bytes) {
    if (field == 1) {  // ModelProto.pieces
      SentencePieceBpe::Piece& p = m.pieces.emplace_back();
      for_each_field(bytes, [&](uint64_t f, uint64_t, uint64_t v, std::string_view b) {
        if (f == 1) p.text = b;
        if (f == 2) p.score = std::bit_cast<float>(static_cast<uint32_t>(v));
        if (f == 3) p.type = static_cast<int>(v);
      });
    } else if (field == 2) {  // ModelProto.trainer_spec
      for_each_field(bytes, [&](uint64_t f, uint64_t, uint64_t v, std::string_view) {
        if (f == 3) m.model_type = static_cast<int>(v);
        if (f == 24) m.whitespace_as_suffix = v != 0;
      });
    } else if (field == 3) {  // ModelProto.normalizer_spec
      for_each_field(bytes, [&](uint64_t f, uint64_t, uint64_t v, std::string_view b) {
        if (f == 1) n.name = b;
        if (f == 3) n.add_dummy_prefix = v != 0;
        if (f == 4) n.remove_extra_whitespaces = v != 0;
        if (f == 5) n.escape_whitespaces = v != 0;
        if (f == 6) n.has_rules = !b.empty();
      });
    }
  });
  return m;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : path_(model_path),
      sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()),
      cache_owner_(WordCache::new_owner_id()) {
  const MappedFile file(model_path);
  const std::string_view bytes = file.text();
  const auto status = sp_->LoadFromSerializedProto(bytes);
  if (!status.ok()) input_error("{}: not a SentencePiece model: {}", model_path, status.ToString());
  fingerprint_ = xxh64(bytes.data(), bytes.size());

  // Encoding space-separated words one at a time gives the same ids as encoding the whole text when
  // (a) runs of spaces collapse and every word gets the same "\u2581" prefix, (b) the normalizer
  // never rewrites across a space (the standard NFKC tables; no custom rules), and (c) no piece holds
  // "\u2581" anywhere but at its start, so no piece can span two words. Then each distinct word is
  // encoded once and cached. Other models take the library's path for every text.
  const ModelFields model = read_model(bytes);
  const NormalizerFlags& n = model.normalizer;
  const bool standard_tables = n.name.empty() || n.name == "nmt_nfkc" || n.name == "nfkc" ||
                               n.name == "nmt_nfkc_cf" || n.name == "nfkc_cf" || n.name == "identity";
  by_word_ = n.add_dummy_prefix && n.remove_extra_whitespaces && n.escape_whitespaces && standard_tables &&
             !n.has_rules;
  for (int i = 0; by_word_ && i < sp_->GetPieceSize(); ++i) {
    const std::string& piece = sp_->IdToPiece(i);
    if (piece.find("\xe2\x96\x81", 1) != std::string::npos) by_word_ = false;
  }
  // Words end at spaces, and at tabs and line breaks where the normalizer turns them into spaces
  // (NFKC tables do; "identity" does not): probed here, since the tables live in the model.
  separator_[' '] = true;
  const auto ids_of = [&](std::string_view t) {
    std::vector<int32_t> ids;
    encode_whole(t, ids);
    return ids;
  };
  for (const char c : {'\t', '\n', '\r'}) {
    const std::string sep(1, c);
    separator_[static_cast<uint8_t>(c)] = by_word_ && ids_of("hello" + sep + "world") == ids_of("hello world") &&
                                          ids_of(sep + "world") == ids_of("world") &&
                                          ids_of("hello" + sep) == ids_of("hello");
  }

  // Cache misses of BPE models segment words of printable ASCII natively. The normalizers without
  // case folding leave such a word as it is, so the library segments "\u2581" + word (the prefix
  // goes first unless the model puts whitespace after words). Each printable character alone is
  // checked against the library, as the normalization tables live in the model.
  const bool keeps_ascii = n.name == "nmt_nfkc" || n.name == "nfkc" || n.name == "identity";
  if (by_word_ && keeps_ascii && model.model_type == ModelFields::kBpe && !model.whitespace_as_suffix &&
      std::cmp_equal(model.pieces.size(), sp_->GetPieceSize()))
    bpe_ = SentencePieceBpe::build(model.pieces);
  for (char c = 0x21; bpe_ && c <= 0x7e; ++c) {
    const std::string_view word(&c, 1);
    std::vector<int32_t> native;
    if (encode_word_bpe(word, native) && native != ids_of(word)) bpe_.reset();
  }
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

void SentencePieceTokenizer::encode_whole(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) throw std::runtime_error("SentencePiece encode failed: " + status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

bool SentencePieceTokenizer::encode_word_bpe(std::string_view word, std::vector<int32_t>& out) const {
  return bpe_ && bpe_->encode(word, out);
}

void SentencePieceTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (!by_word_) return encode_whole(text, out);
  WordCache& cache = WordCache::for_thread(cache_owner_);
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = pos;
    while (end < text.size() && !separator_[static_cast<uint8_t>(text[end])]) ++end;
    if (end > pos) {
      const std::string_view word = text.substr(pos, end - pos);
      if (const auto hit = cache.find(word)) {
        out.insert(out.end(), hit->begin(), hit->end());
      } else {
        // One word per library call: its encoder grows faster than linearly with the text, so
        // batching misses together costs more than it saves.
        ids.clear();
        if (!encode_word_bpe(word, ids)) encode_whole(word, ids);
        cache.insert(word, ids);
        out.insert(out.end(), ids.begin(), ids.end());
      }
    }
    pos = end + 1;
  }
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
