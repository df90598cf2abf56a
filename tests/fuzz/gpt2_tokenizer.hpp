// The GPT-2 tokenizer of tests/data/gpt2, loaded once per fuzz process, for targets whose reader
// tokenizes what it reads (prompts, eval tasks).
#pragma once

#include <memory>

#include "tokenizer/tokenizer.hpp"

namespace meg::fuzz {

inline const Tokenizer& gpt2_tokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer =
      load_tokenizer(MEG_TEST_DATA "/gpt2/vocab.json", MEG_TEST_DATA "/gpt2/merges.txt");
  return *tokenizer;
}

}  // namespace meg::fuzz
