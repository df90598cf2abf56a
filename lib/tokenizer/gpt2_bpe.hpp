// GPT-2 byte-level BPE (vocab.json + merges.txt), matching GPT-2's reference encoder exactly:
// the same pre-tokenisation (contractions, letters, numbers, other symbols, whitespace, over all of
// Unicode), the same byte-to-unicode mapping and the same merge order.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace meg {

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  Gpt2BpeTokenizer(const std::string& vocab_json, const std::string& merges_txt);
  ~Gpt2BpeTokenizer() override;

  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override;
  int32_t eod_id() const override;  // <|endoftext|>
  std::string describe() const override;
  uint64_t fingerprint() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Appends to PIECES the pieces that GPT-2's pre-tokenizer splits TEXT into (what encode() gives
// BPE), for checking and timing other splitters against it.
void gpt2_pretokenize(std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace meg
