#include "tokenizer/sentencepiece_tokenizer.hpp"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <unordered_map>

#include "core/byte_stream.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/mapped_file.hpp"
#include "core/quiet_stderr.hpp"
#include "core/utf8.hpp"
#include "tokenizer/sentencepiece_bpe.hpp"
#include "tokenizer/sentencepiece_model.hpp"
#include "tokenizer/word_cache.hpp"

namespace meg {

namespace {

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
  // (a) every word gets the same "\u2581" prefix: runs of spaces collapse, or (where the model
  // keeps them) each word takes the run of spaces before it, the library's dummy prefix standing
  // for the run's first space, (b) the normalizer never rewrites across a space (the built-in
  // tables; no custom ones), (c) no piece holds "\u2581" anywhere but at its start, so no piece
  // can span two words (a piece of nothing but "\u2581", which a model that keeps runs of spaces
  // may have, covers part of a word's run), (d) a word never starts with an unknown piece, which
  // the library would merge with an unknown piece ending the word before: "\u2581" is a piece,
  // and the model does not take whole words as pieces, and (e) the model is BPE, whose merges in
  // one word do not depend on the others. (A unigram model's best segmentation of a word can: where
  // two segmentations tie, as "1 0 00" and "1 00 0" do, the library's float sums over the text
  // before the word decide.) Then each distinct word is encoded once and cached. Other models take
  // the library's path for every text.
  const SentencePieceModel::Normalizer& n = model.normalizer;
  const BuiltinTable* table = builtin_table(n.charsmap);
  collapses_spaces_ = n.remove_extra_whitespaces;
  by_word_ = n.add_dummy_prefix && n.escape_whitespaces && !model.whitespace_as_suffix && table != nullptr &&
             model.model_type == SentencePieceModel::kBpe;
  const auto only_spaces = [](std::string_view text) {
    for (; text.starts_with(kSentencePieceSpace); text.remove_prefix(kSentencePieceSpace.size())) {}
    return text.empty();
  };
  for (const SentencePieceModel::Piece& piece : model.pieces) {
    if (piece.text.find(kSentencePieceSpace, 1) != std::string_view::npos &&
        (collapses_spaces_ || !only_spaces(piece.text)))
      by_word_ = false;
    if (piece.type != SentencePieceModel::kNormal) continue;
    if (piece.text == kSentencePieceSpace) space_id_ = static_cast<int32_t>(&piece - model.pieces.data());
  }
  by_word_ &= space_id_ >= 0;
  // Words end at spaces, and, where runs of spaces collapse, at tabs and line breaks where the
  // normalizer turns them into spaces (NFKC tables do; "identity" does not): probed here, since
  // the tables live in the model.
  separator_[' '] = true;
  const auto ids_of = [&](std::string_view t) {
    std::vector<int32_t> ids;
    encode_whole(t, ids);
    return ids;
  };
  for (const char c : {'\t', '\n', '\r'}) {
    const std::string sep(1, c);
    separator_[static_cast<uint8_t>(c)] = by_word_ && collapses_spaces_ &&
                                          ids_of("hello" + sep + "world") == ids_of("hello world") &&
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

void SentencePieceTokenizer::encode_cached(std::string_view word, WordCache& cache, std::vector<int32_t>& out) const {
  // One word per library call: its encoder grows faster than linearly with the text, so batching
  // misses together costs more than it saves.
  cache.encode(word, out, [&](std::vector<int32_t>& ids) {
    if (!encode_word_bpe(word, ids)) encode_whole(word, ids);
  });
}

void SentencePieceTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (!by_word_) return encode_whole(text, out);
  WordCache& cache = WordCache::for_thread(cache_owner_);
  size_t pos = 0;
  if (collapses_spaces_) {
    while (pos < text.size()) {
      size_t end = pos;
      while (end < text.size() && !separator_[static_cast<uint8_t>(text[end])]) ++end;
      if (end > pos) encode_cached(text.substr(pos, end - pos), cache, out);
      pos = end + 1;
    }
    return;
  }
  // A word and the spaces before it; past the first, the dummy prefix stands for the first space.
  while (pos < text.size()) {
    size_t end = pos;
    while (end < text.size() && text[end] == ' ') ++end;
    while (end < text.size() && text[end] != ' ') ++end;
    const size_t from = pos == 0 ? 0 : pos + 1;
    if (from == end) {
      out.push_back(space_id_);  // a single space ending the text, "\u2581" alone
    } else {
      encode_cached(text.substr(from, end - from), cache, out);
    }
    pos = end;
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

std::string SentencePieceTokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= vocab_size()) input_error("token {} is outside the vocabulary of {}", id, vocab_size());
  return sp_->IdToPiece(id);
}

int32_t SentencePieceTokenizer::unk_id() const { return sp_->unk_id(); }

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

namespace {

// The built-in normalization rules of the library (normalization_rule_name).
constexpr std::string_view kNormalizationRules[] = {"identity", "nfkc", "nmt_nfkc", "nfkc_cf", "nmt_nfkc_cf"};

std::string joined_symbols(const std::vector<std::string>& symbols, std::string_view option) {
  std::string out;
  for (const std::string& symbol : symbols) {
    if (symbol.empty()) input_error("{}: an empty symbol", option);
    out += (out.empty() ? "" : ",") + symbol;
  }
  return out;
}

}  // namespace

void train_sentencepiece(const std::vector<std::string>& documents, const SentencePieceTrainOptions& options,
                         const std::string& output) {
  if (options.vocab_size <= 0) input_error("--vocab-size {}: must be positive", options.vocab_size);
  if (options.model_type != "bpe" && options.model_type != "unigram")
    input_error("--model-type must be bpe or unigram, not '{}'", options.model_type);
  if (std::find(std::begin(kNormalizationRules), std::end(kNormalizationRules), options.normalization_rule_name) ==
      std::end(kNormalizationRules))
    input_error("--normalization-rule-name must be identity, nfkc, nmt_nfkc, nfkc_cf or nmt_nfkc_cf, not '{}'",
                options.normalization_rule_name);
  // A BPE model's text is cut into characters first; the library fails on a text holding a
  // character that is a CONTROL piece (and meg refuses such a model, sentencepiece_model.hpp).
  for (const std::string& symbol : options.control_symbols) {
    size_t len = 0;
    next_code_point(reinterpret_cast<const uint8_t*>(symbol.data()), symbol.size(), 0, &len);
    if (options.model_type == "bpe" && !symbol.empty() && len == symbol.size())
      input_error("--control-symbols: {:?} is a single character, which a BPE model cannot have as a control symbol",
                  symbol);
  }
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

  // Given as a map, not as a command line, so that a symbol may hold a space or a line break.
  const auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  std::unordered_map<std::string, std::string> args = {
      {"vocab_size", std::to_string(options.vocab_size)},
      {"model_type", options.model_type},
      {"character_coverage", fmt::format("{}", options.character_coverage)},
      {"num_threads", std::to_string(options.threads)},
      {"minloglevel", "2"},
      {"max_sentence_length", "16384"},
      {"byte_fallback", flag(options.byte_fallback)},
      {"remove_extra_whitespaces", flag(options.remove_extra_whitespaces)},
      {"normalization_rule_name", options.normalization_rule_name},
      {"allow_whitespace_only_pieces", flag(options.allow_whitespace_only_pieces)},
      {"split_digits", flag(options.split_digits)},
      {"user_defined_symbols", joined_symbols(options.user_defined_symbols, "--user-symbols")},
      {"control_symbols", joined_symbols(options.control_symbols, "--control-symbols")},
      {"unk_id", std::to_string(options.unk_id)},
      {"bos_id", std::to_string(options.bos_id)},
      {"eos_id", std::to_string(options.eos_id)},
      {"pad_id", std::to_string(options.pad_id)},
  };
  if (options.max_sentences > 0) {
    args["input_sentence_size"] = std::to_string(options.max_sentences);
    args["shuffle_input_sentence"] = "true";
  }
  for (size_t start = 0; start < options.extra.size();) {  // "--key=value --key2=value2"
    size_t end = options.extra.find(' ', start);
    if (end == std::string::npos) end = options.extra.size();
    const std::string_view item = std::string_view(options.extra).substr(start, end - start);
    if (const size_t eq = item.find('='); item.starts_with("--") && eq != std::string_view::npos)
      args[std::string(item.substr(2, eq - 2))] = std::string(item.substr(eq + 1));
    start = end + 1;
  }

  sentencepiece::SetRandomGeneratorSeed(options.seed);  // sampling of --max-sentences lines
  VectorIterator it(lines);
  std::string model;
  sentencepiece::util::Status status;
  {
    const QuietStderr quiet;  // the trainer logs its options before it reads --minloglevel
    status = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  }
  if (!status.ok()) input_error("{}: training failed: {}", output, status_line(status));
  read_sentencepiece_model(model, output);  // what meg would refuse to load is not written

  ByteWriter out(output);
  out.write(model.data(), model.size());
  out.commit();
}

}  // namespace meg
