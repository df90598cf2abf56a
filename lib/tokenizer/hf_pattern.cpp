#include "tokenizer/hf_pattern.hpp"

#include "core/error.hpp"
#include "core/json_file.hpp"

namespace meg {

HfPattern::HfPattern(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || j.size() != 1 || !(j.contains("String") || j.contains("Regex")))
    input_error("{}: a pattern is {{\"String\": ...}} or {{\"Regex\": ...}}, not {}", where, j.dump());
  if (j.contains("String")) {
    literal_ = json_get<std::string>(j, "String", where);
  } else {
    const std::string pattern = json_get<std::string>(j, "Regex", where);
    try {
      regex_.emplace(pattern);
    } catch (const InputError& e) {
      input_error("{}: regex {}: {}", where, nlohmann::json(pattern).dump(), e.what());
    }
  }
}

void HfPattern::matches(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
  if (regex_) {
    regex_->for_each_match(text, [&](size_t begin, size_t end) { out.emplace_back(begin, end); });
    return;
  }
  if (literal_.empty()) return;
  for (size_t at = text.find(literal_); at != std::string_view::npos; at = text.find(literal_, at + literal_.size()))
    out.emplace_back(at, at + literal_.size());
}

std::string HfPattern::replace(std::string_view text, std::string_view content) const {
  thread_local std::vector<std::pair<size_t, size_t>> found;
  matches(text, found);
  std::string out;
  size_t done = 0;
  for (const auto& [begin, end] : found) {
    out.append(text.substr(done, begin - done)).append(content);
    done = end;
  }
  return out.append(text.substr(done));
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  size_t done = 0;
  for (size_t at = text.find(from); at != std::string_view::npos; at = text.find(from, at + from.size())) {
    out.append(text.substr(done, at - done)).append(to);
    done = at + from.size();
  }
  return out.append(text.substr(done));
}

}  // namespace meg
