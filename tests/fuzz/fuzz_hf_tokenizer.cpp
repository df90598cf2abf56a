// A Hugging Face tokenizer.json read as every tool reads --tokenizer: loaded, then, when it loads,
// used to encode varied texts (those of tests/data/hf-tokenizers/texts.jsonl) and to decode what
// it gave. Seeds: the tokenizer.json of each family there, and small hand-made ones.
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_input.hpp"
#include "tokenizer/hf_tokenizer.hpp"

namespace {
std::vector<std::string> texts;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::ifstream in(MEG_TEST_DATA "/hf-tokenizers/texts.jsonl");
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) texts.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = meg::fuzz::write_file("tokenizer.json", {data, size});
  return meg::fuzz::refuse_only_with_input_error([&] {
    const meg::HfTokenizer tokenizer(path);
    for (const std::string& text : texts) {
      std::vector<int32_t> ids;
      tokenizer.encode(text, ids);
      tokenizer.decode(ids);
    }
  });
}
