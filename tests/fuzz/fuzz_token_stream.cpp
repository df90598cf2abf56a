// A token stream (meg-tokenize's output, meg-index's input), read to its end as meg-index reads it.
#include <vector>

#include "data/token_stream.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = meg::fuzz::write_file("input.tok", {data, size});
  return meg::fuzz::refuse_only_with_input_error([&] {
    meg::TokenStreamReader reader(path);
    std::vector<int32_t> tokens;
    while (reader.next(tokens)) {
    }
  });
}
