// Training a byte-level BPE written as a Hugging Face tokenizer.json of the GPT-2 / Llama 3
// family, which Hugging Face's tokenizers and meg (tokenizer/hf_tokenizer.hpp) both read:
//
//   added_tokens   <|endoftext|> (the end-of-document token, special), the control symbols
//                  (special) and the user symbols (not special): ids 0, 1, ... in that order, as
//                  HF's BpeTrainer puts its special tokens first; all matched in the raw text
//   pre_tokenizer  Sequence [Split (a regex, behavior Isolated), ByteLevel(add_prefix_space
//                  false, use_regex false)]
//   post_processor ByteLevel (trim_offsets false: it adds no tokens)
//   decoder        ByteLevel
//   model          BPE over the 256 bytes (each spelled as its character of GPT-2's byte-level
//                  alphabet, byte_level.hpp, in GPT-2's order) and the tokens the merges make
//
// Training is HF's: the documents are cut at the added tokens and pre-tokenized as encoding cuts
// them, the distinct pieces are counted, and tokenizer/bpe_trainer.hpp learns the merges. Every
// byte is a token, so any text encodes, and decodes back to itself; nothing is normalized.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace meg {

struct HfBpeTrainOptions {
  int vocab_size = 8000;  // the 256 bytes and the added tokens included
  std::string pre_tokenizer = "llama3";  // the Split regex: llama3 (Llama 3's) or gpt2 (GPT-2's)
  std::vector<std::string> user_defined_symbols;  // added tokens, special false: text encodes to them
  std::vector<std::string> control_symbols;       // added tokens, special true
  unsigned threads = 1;  // for counting the pieces
};

// The end-of-document token every trained tokenizer has (id 0).
inline constexpr const char* kHfBpeEod = "<|endoftext|>";

// What training found: the distinct pieces counted, the merges learned, the tokens in the file
// (fewer than asked when the text ran out of pairs).
struct HfBpeTrainSummary {
  size_t pieces = 0, merges = 0, vocab_size = 0;
};

// Trains on DOCUMENTS and writes the tokenizer.json to OUTPUT atomically; bad options and empty
// input are an InputError, and nothing is written.
HfBpeTrainSummary train_hf_bpe(const std::vector<std::string>& documents, const HfBpeTrainOptions& options,
                  const std::string& output);

}  // namespace meg
