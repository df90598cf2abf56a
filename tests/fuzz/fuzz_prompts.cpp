// A prompt file (meg-generate --prompts, JSONL) read as meg-generate reads it: every prompt with its
// settings, checked and tokenized, before any is answered.
#include "fuzz_input.hpp"
#include "gpt2_tokenizer.hpp"
#include "infer/prompts.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = meg::fuzz::write_file("prompts.jsonl", {data, size});
  const meg::Tokenizer& tokenizer = meg::fuzz::gpt2_tokenizer();
  return meg::fuzz::refuse_only_with_input_error(
      [&] { meg::read_prompt_file(path, meg::PromptSettings{}, tokenizer, /*max_length=*/256); });
}
