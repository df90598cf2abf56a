// The tokenizer files of an exported Hugging Face model directory, so that AutoTokenizer opens it
// with no extra work and encodes as meg did:
//
//   the tokenizer itself          tokenizer.json (a Hugging Face tokenizer), tokenizer.model
//                                 (SentencePiece), or vocab.json and merges.txt (GPT-2)
//   tokenizer_config.json         its class, bos/eos/unk, add_bos_token/add_eos_token false (meg
//                                 adds no special token a tokenizer.json's post-processor does
//                                 not), model_max_length; a tokenizer.json's own
//                                 tokenizer_config.json beside it is copied instead
//   special_tokens_map.json       bos/eos/unk
//
// and the special ids config.json and generation_config.json name. Without a tokenizer it writes
// none of them, says so in one line, and names no special ids: a GPT2Config's default 50256 would
// lie about a vocabulary of 4096.
#pragma once

#include <string>
#include <vector>

#include "convert/hf_config.hpp"
#include "model/config.hpp"

namespace meg {

// Writes the files of TOKENIZER (with MERGES for GPT-2; both "" when there is none) into DIR,
// appending their names to FILES; returns the special ids. InputError for a tokenizer that does
// not load or has more tokens than CONFIG's vocabulary.
HfTokenIds write_hf_tokenizer_files(const ModelConfig& config, const std::string& tokenizer, const std::string& merges,
                                    const std::string& dir, std::vector<std::string>& files);

}  // namespace meg
