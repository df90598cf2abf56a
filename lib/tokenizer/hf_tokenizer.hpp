// Hugging Face tokenizer.json, read natively: the files Llama 3, Qwen2/3, Mistral, GPT-NeoX and
// BERT ship. Encoding follows tokenizers' pipeline exactly (tokenizers/src/tokenizer/mod.rs):
//
//   1. added tokens with "normalized": false are cut out of the raw text (hf_added_tokens.hpp);
//   2. each text between them is normalized (hf_normalizer.hpp), and the normalized added tokens
//      are cut out of it;
//   3. each remaining text is pre-tokenized into pieces (hf_pre_tokenizer.hpp);
//   4. the model turns each piece into ids (hf_model.hpp).
// encode() gives the ids without the post-processor's special tokens (add_special_tokens=False);
// special_prefix()/special_suffix() are what the post-processor puts around one sequence
// (TemplateProcessing's "single", BertProcessing, RobertaProcessing). decode() is tokenizers'
// decode with skip_special_tokens=False (hf_decoder.hpp).
//
// The end-of-document token is the "eos_token" of a tokenizer_config.json beside the file, else
// the first of <|endoftext|>, <|end_of_text|>, </s>, <eos>, <|im_end|>, [SEP] among the added
// tokens. Truncation and padding settings are ignored: meg encodes whole documents. Anything
// the reader does not support is refused at load with one line naming it and where it is.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/tokenizer.hpp"

namespace meg {

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(const std::string& path);
  ~HfTokenizer() override;

  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override;
  int32_t eod_id() const override;
  std::string describe() const override;
  uint64_t fingerprint() const override;
  std::span<const int32_t> special_prefix() const override;
  std::span<const int32_t> special_suffix() const override;
  std::string token_text(int32_t id) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meg
