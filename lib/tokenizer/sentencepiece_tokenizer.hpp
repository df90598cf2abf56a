// SentencePiece models (BPE or unigram) through the SentencePiece library, and their training.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace meg {

class SentencePieceBpe;
class WordCache;

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model_path);
  ~SentencePieceTokenizer() override;

  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override;
  int32_t eod_id() const override;  // the model's eos id, as Megatron's SentencePiece tokenizer
  std::string describe() const override;
  std::string token_text(int32_t id) const override;
  int32_t unk_id() const override;
  uint64_t fingerprint() const override { return fingerprint_; }
  // Whether encode() goes word by word through a cache (see the constructor for when it may), and
  // the library's own whole-text path, which it must always agree with.
  bool encodes_by_word() const { return by_word_; }
  void encode_whole(std::string_view text, std::vector<int32_t>& out) const;
  // Whether cache misses of BPE models try the native segmentation first (tokenizer/sentencepiece_bpe.hpp),
  // and, for checking, that path on one word: false, appending nothing, where it leaves the word to
  // the library.
  bool has_native_bpe() const { return bpe_ != nullptr; }
  bool encode_word_bpe(std::string_view word, std::vector<int32_t>& out) const;

 private:
  void encode_cached(std::string_view word, WordCache& cache, std::vector<int32_t>& out) const;

  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  uint64_t fingerprint_ = 0;
  uint64_t cache_owner_;  // this tokenizer's per-thread word caches
  bool by_word_ = false;  // whether the model allows word-by-word encoding (see the constructor)
  bool collapses_spaces_ = true;  // the model folds runs of spaces (remove_extra_whitespaces)
  int32_t space_id_ = -1;  // the NORMAL piece "\u2581"
  std::array<bool, 256> separator_{};  // bytes that end a word, where runs of spaces collapse
  std::unique_ptr<SentencePieceBpe> bpe_;  // null unless the constructor found it exact for the model
};

// What --train passes to SentencePiece's trainer. The defaults marked "text" differ from the
// library's so that decode(encode(text)) == text: the library's own defaults (in parentheses)
// fold runs of spaces and drop leading and trailing ones, rewrite compatibility characters
// (NFKC) and turn tabs and line breaks into spaces (nmt_nfkc), and give characters it has not
// kept the unknown piece. Byte fallback also carries the line breaks: documents are fed line by
// line, so "\n" is no character of the vocabulary and encodes as the piece <0x0A>, as in Llama's
// tokenizer.
struct SentencePieceTrainOptions {
  int vocab_size = 8000;
  std::string model_type = "bpe";  // bpe | unigram
  double character_coverage = 0.9995;
  int threads = 1;
  uint64_t max_sentences = 0;  // 0: use every document
  uint32_t seed = 0;
  bool byte_fallback = true;  // text (false)
  bool remove_extra_whitespaces = false;  // text (true)
  std::string normalization_rule_name = "identity";  // text (nmt_nfkc)
  bool allow_whitespace_only_pieces = true;  // text (false): runs of spaces, as code indents, as pieces
  bool split_digits = false;
  std::vector<std::string> user_defined_symbols;  // always whole pieces, wherever they are in the text
  std::vector<std::string> control_symbols;  // ids that no text encodes to (for markers added later)
  int unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  std::string extra;  // more trainer flags, "--key=value --key2=value2"
};

// Trains on DOCUMENTS and writes the model to OUTPUT (atomically) and its vocabulary beside it.
void train_sentencepiece(const std::vector<std::string>& documents, const SentencePieceTrainOptions& options,
                         const std::string& output);

}  // namespace meg
