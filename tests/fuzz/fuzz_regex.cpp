// A regex pattern compiled and matched over a text: the input is the pattern, a NUL byte and the
// text (no NUL: the pattern alone, over a fixed text of several scripts). Compiling may refuse the
// pattern and matching may give up on a backtracking budget, both only with InputError.
#include <cstring>
#include <string_view>

#include "fuzz_input.hpp"
#include "tokenizer/regex.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view pattern = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos
                                    ? "The quick brown fox's 1234 fois:\r\n\t\xC2\xAB\xC3\xA7" "a\xC2\xBB \xE2\x80\x94 "
                                      "\xCE\xA9\xCE\xBC\xCE\xAD\xCE\xB3\xCE\xB1   \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80!\n"
                                    : input.substr(nul + 1);
  return meg::fuzz::refuse_only_with_input_error([&] {
    const meg::Regex re(pattern);
    size_t last = 0;
    re.for_each_match(text, [&](size_t begin, size_t end) {
      if (begin < last || end < begin || end > text.size()) std::abort();  // out of order or bounds
      last = end;
    });
  });
}
