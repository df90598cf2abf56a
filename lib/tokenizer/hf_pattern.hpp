// The pattern of a tokenizer.json Split pre-tokenizer or Replace normalizer/decoder: a literal
// ({"String": "..."}) or a regex ({"Regex": "..."}, evaluated as Oniguruma does by regex.hpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/regex.hpp"

namespace meg {

class HfPattern {
 public:
  // J as tokenizer.json spells a pattern; WHERE names it in errors (an unsupported regex
  // construct is refused, naming it).
  HfPattern(const nlohmann::json& j, const std::string& where);

  // The successive matches in TEXT, [begin, end) byte offsets, leftmost first and without
  // overlaps: find_iter's. A literal matches where it occurs; an empty literal never does.
  void matches(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  // TEXT with each match replaced by CONTENT.
  std::string replace(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::optional<Regex> regex_;
};

// TEXT with each occurrence of FROM (not empty), left to right, replaced by TO.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace meg
