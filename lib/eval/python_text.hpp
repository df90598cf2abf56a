// Python's str semantics where lm-evaluation-harness's task code depends on them, on UTF-8 text
// (valid UTF-8, as every string parsed from JSON is): len() counts code points, whitespace is
// str.isspace()'s (and re's \s), strip(), lstrip() and rstrip() drop it, re.split(r"\s+", s) counts words.
// The scores meg-eval reports equal lm-eval's only when these agree with Python's to the byte.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace meg::py {

bool is_space(char32_t c);  // str.isspace() of a one-character string

size_t length(std::string_view s);            // len(s): code points
std::string_view lstrip(std::string_view s);  // s.lstrip()
std::string_view rstrip(std::string_view s);  // s.rstrip()
std::string_view strip(std::string_view s);   // s.strip()
size_t count_words(std::string_view s);       // len(re.split(r"\s+", s))

// s.split(sep) for a one-character separator: every piece, empty ones included.
std::vector<std::string_view> split(std::string_view s, char sep);
// s.replace(from, to): every non-overlapping occurrence, left to right (FROM not empty).
std::string replace(std::string_view s, std::string_view from, std::string_view to);
// s.capitalize() for ASCII letters: the first upper-cased, the others lower-cased; other
// characters are kept as they are (Python would also change the case of non-ASCII letters).
std::string capitalize_ascii(std::string_view s);

}  // namespace meg::py
