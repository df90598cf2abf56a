// The tokenizer interface: text to ids and back. Three kinds stand behind it:
//   - SentencePiece models (.model), checked and read by meg, encoded through the SentencePiece
//     library (tokenizer/sentencepiece_tokenizer.hpp);
//   - GPT-2 byte-level BPE (vocab.json + merges.txt), our own implementation (tokenizer/gpt2_bpe.hpp);
//   - Hugging Face tokenizer.json, our own implementation (tokenizer/hf_tokenizer.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meg {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of TEXT (valid UTF-8) to OUT. Safe to call from many threads at once.
  virtual void encode(std::string_view text, std::vector<int32_t>& out) const = 0;
  // The text of IDS; ids outside the vocabulary are an InputError.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t eod_id() const = 0;  // appended to each document by --append-eod
  virtual std::string describe() const = 0;  // one line for logs: kind, vocabulary, file
  // Identifies the vocabulary (a hash of the model files) so later stages can refuse a mismatch.
  virtual uint64_t fingerprint() const = 0;
  // The ids the tokenizer's own rules put around one sequence (a tokenizer.json post-processor's:
  // Llama 3's <|begin_of_text|> before it, BERT's [CLS] before and [SEP] after); none by default.
  virtual std::span<const int32_t> special_prefix() const { return {}; }
  virtual std::span<const int32_t> special_suffix() const { return {}; }
  // The vocabulary's own spelling of token ID (a SentencePiece piece such as "</s>", which
  // decodes to nothing); by default its text.
  virtual std::string token_text(int32_t id) const { return decode(std::span<const int32_t>(&id, 1)); }
  // The id of the unknown token, -1 when there is none.
  virtual int32_t unk_id() const { return -1; }
};

// The tokenizer files a model directory DIR holds, as paths under DIR: its tokenizer.json, else its
// tokenizer.model, else its vocab.json with merges.txt; both "" when it holds none of them.
struct TokenizerPaths {
  std::string tokenizer, merges;
};
TokenizerPaths tokenizer_files_in(const std::string& dir);

// Loads PATH: a SentencePiece .model, a GPT-2 vocab.json when MERGES names its merges.txt, any
// other .json as a Hugging Face tokenizer.json, or a directory holding one of them (tokenizer.json
// first, then tokenizer.model, then vocab.json with merges.txt), as a model directory does.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, const std::string& merges = "");

// Checks that TEXT is well-formed UTF-8; on failure returns false and the byte offset of the
// first bad sequence in *bad_offset.
bool valid_utf8(std::string_view text, size_t* bad_offset = nullptr);

}  // namespace meg
