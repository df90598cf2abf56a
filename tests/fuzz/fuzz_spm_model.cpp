// A SentencePiece model (meg-tokenize --tokenizer spm.model) loaded, then used on a fixed text
// of several scripts: encoded and decoded again.
#include <vector>

#include "tokenizer/tokenizer.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = meg::fuzz::write_file("input.model", {data, size});
  return meg::fuzz::refuse_only_with_input_error([&] {
    const auto tokenizer = meg::load_tokenizer(path);
    std::vector<int32_t> ids;
    tokenizer->encode("The quick brown fox, 1234 fois: «ça» — Ωμέγα 東京 \xF0\x9F\x98\x80!\n\ttabs", ids);
    tokenizer->decode(ids);
  });
}
