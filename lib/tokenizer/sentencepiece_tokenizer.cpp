#include "tokenizer/sentencepiece_tokenizer.hpp"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cmath>
#include <exception>
#include <filesystem>

#include "core/byte_stream.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/mapped_file.hpp"
#include "core/quiet_stderr.hpp"
#include "tokenizer/sentencepiece_bpe.hpp"
#include "tokenizer/sentencepiece_model.hpp"
#include "tokenizer/word_cache.hpp"

namespace meg {

namespace {

// Log-probabilities of real unigram pieces stay above about -30; the bound leaves a wide margin.
constexpr float kMaxUnigramScore = 1000;

// The library's built-in normalization tables, which a model keeps a copy of (the one its
// normalizer_spec.name picked at training), by the XXH64 of that copy. The word-by-word path relies
// on what these tables do; a table that is none of them, whatever the name says, may rewrite across
// a space, so its models take the library's path for every text.
struct BuiltinTable {
  uint64_t fingerprint;
  bool keeps_ascii;  // leaves printable ASCII as it is (no case folding)
};
constexpr BuiltinTable kBuiltinTables[] = {
    {0xd30d0cb0c90cf877ULL, true},  // nmt_nfkc, the default
    {0x0fc6cf213e7bf9c3ULL, true},  // nfkc
    {0x5ce97b35ad9eb5f6ULL, false},  // nmt_nfkc_cf
    {0xb84883798014d5feULL, false},  // nfkc_cf
};

// The built-in table CHARSMAP is, or null. An empty one is "identity": no table, text as it is.
const BuiltinTable* builtin_table(std::string_view charsmap) {
  static constexpr BuiltinTable kIdentity = {0, true};
  if (charsmap.empty()) return &kIdentity;
  const uint64_t h = xxh64(charsmap.data(), charsmap.size());
  for (const BuiltinTable& t : kBuiltinTables)
    if (t.fingerprint == h) return &t;
  return nullptr;
}

// A status of the library as one line. Its checks put their source position and condition first
// ("./src/x.cc(12) [cond] text"): dropped where a text follows, since the text says it better.
std::string status_line(const sentencepiece::util::Status& status) {
  std::string m = status.message();
  const size_t open = m.find(") [");
  if (open != std::string::npos && m.find(' ') > open) {
    size_t close = open + 2, depth = 0;
    for (; close < m.size(); ++close) {
      depth += m[close] == '[';
      depth -= m[close] == ']';
      if (depth == 0) break;
    }
    const std::string condition = m.substr(open + 3, close - open - 3);
    m = close + 2 < m.size() ? m.substr(close + 2) : "check failed: " + condition;
  }
  for (char& c : m)
    if (c == '\n' || c == '\r') c = ' ';
  while (!m.empty() && m.back() == ' ') m.pop_back();
  return m;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : path_(model_path),
      sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()),
      cache_owner_(WordCache::new_owner_id()) {
  const MappedFile file(model_path);
  const std::string_view bytes = file.text();
  const SentencePieceModel model = read_sentencepiece_model(bytes, model_path);
  {
    const QuietStderr quiet;  // a failing self-test logs its samples
    sentencepiece::util::Status status;
    try {
      status = sp_->LoadFromSerializedProto(bytes);
    } catch (const std::exception& e) {  // its trie builder throws on what the checks above missed
      input_error("{}: not a SentencePiece model: {}", model_path, e.what());
    }
    if (!status.ok()) input_error("{}: not a SentencePiece model: {}", model_path, status_line(status));
  }
  fingerprint_ = xxh64(bytes.data(), bytes.size());

  // Encoding space-separated words one at a time gives the same ids as encoding the whole text when
  // (a) runs of spaces collapse and every word gets the same "\u2581" prefix, (b) the normalizer
  // never rewrites across a space (the built-in tables; no custom ones), (c) no piece holds
  // "\u2581" anywhere but at its start, so no piece can span two words, (d) a word never starts
  // with an unknown piece, which the library would merge with an unknown piece ending the word
  // before: "\u2581" is a piece, and the model does not take whole words as pieces, and (e) for
  // unigram models, no score so large that the library's float sums over the whole text lose the
  // differences that decide each word's segmentation. Then each distinct word is encoded once and
  // cached. Other models take the library's path for every text.
  const SentencePieceModel::Normalizer& n = model.normalizer;
  const BuiltinTable* table = builtin_table(n.charsmap);
  by_word_ = n.add_dummy_prefix && n.remove_extra_whitespaces && n.escape_whitespaces && !model.whitespace_as_suffix &&
             table != nullptr && model.model_type != SentencePieceModel::kWord;
  bool has_space = false;
  for (const SentencePieceModel::Piece& piece : model.pieces) {
    if (piece.text.find(kSentencePieceSpace, 1) != std::string_view::npos) by_word_ = false;
    if (piece.type != SentencePieceModel::kNormal) continue;
    has_space |= piece.text == kSentencePieceSpace;
    if (model.model_type == SentencePieceModel::kUnigram && std::abs(piece.score) > kMaxUnigramScore) by_word_ = false;
  }
  by_word_ &= has_space;
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
  if (by_word_ && table->keeps_ascii && model.model_type == SentencePieceModel::kBpe)
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
  // The checks of read_sentencepiece_model leave the library's encoder no failure known to them;
  // one left is still the model's, not meg's.
  if (!status.ok()) input_error("{}: the model cannot encode a text: {}", path_, status_line(status));
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
  if (!status.ok()) input_error("{}: the model cannot decode these tokens: {}", path_, status_line(status));
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
  if (options.vocab_size <= 0) input_error("--vocab-size {}: must be positive", options.vocab_size);
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
  sentencepiece::util::Status status;
  {
    const QuietStderr quiet;  // the trainer logs its options before it reads --minloglevel
    status = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  }
  if (!status.ok()) input_error("{}: training failed: {}", output, status_line(status));

  ByteWriter out(output);
  out.write(model.data(), model.size());
  out.commit();
}

}  // namespace meg
