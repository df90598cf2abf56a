#include "core/json_file.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "core/byte_stream.hpp"

namespace meg {
namespace {

// nlohmann's DOM builder, but its errors are kept with their byte position instead of thrown: the
// parser reports number overflow (out_of_range.406) here too, and a thrown exception would carry
// no position. With unique_keys it also stops at a repeated key.
template <typename Json>
class PlacedSax : public nlohmann::detail::json_sax_dom_parser<Json> {
  using Base = nlohmann::detail::json_sax_dom_parser<Json>;

 public:
  PlacedSax(Json& out, bool unique_keys) : Base(out, /*allow_exceptions=*/false), unique_keys_(unique_keys) {}

  bool start_object(std::size_t n) {
    if (unique_keys_) keys_.emplace_back();
    return Base::start_object(n);
  }
  bool end_object() {
    if (unique_keys_) keys_.pop_back();
    return Base::end_object();
  }
  bool key(typename Json::string_t& k) {
    if (unique_keys_ && !keys_.back().insert(k).second) {
      duplicate = k;
      return false;
    }
    return Base::key(k);
  }

  // BYTE counts the characters the lexer has read, TOKEN is the token it stopped in.
  template <typename Exception>
  bool parse_error(std::size_t byte, const std::string& token, const Exception& e) {
    error_byte = byte;
    error_token = token;
    error_id = e.id;
    error_what = e.what();
    return false;
  }

  std::optional<std::string> duplicate;
  std::size_t error_byte = 0;
  std::string error_token, error_what;
  int error_id = 0;

 private:
  bool unique_keys_;
  std::vector<std::set<typename Json::string_t>> keys_;
};

// At most LIMIT bytes of S, cut at a UTF-8 character boundary: nlohmann quotes the whole token it
// stopped in, which may be a string of megabytes.
std::string shortened(std::string s, size_t limit = 200) {
  if (s.size() <= limit) return s;
  while (limit > 0 && (static_cast<unsigned char>(s[limit]) & 0xC0) == 0x80) --limit;
  return s.substr(0, limit) + "...";
}

// nlohmann's message without its "[json.exception.parse_error.101] parse error at line 1,
// column 5: " prefix: the position is given our way.
std::string reason(std::string what) {
  if (const auto p = what.find("] "); what.rfind("[json.exception", 0) == 0 && p != std::string::npos)
    what.erase(0, p + 2);
  if (what.rfind("parse error", 0) == 0)
    if (const auto p = what.find(": "); p != std::string::npos) what.erase(0, p + 2);
  return shortened(what);
}

// "FILE:LINE:COLUMN" of byte AT (from 0) of TEXT, or "FILE: byte N" for text inside a binary file.
std::string place(std::string_view text, size_t at, const JsonSource& source) {
  at = std::min(at, text.size());
  if (source.offset) return fmt::format("{}: byte {}", source.file, *source.offset + at);
  const std::string_view before = text.substr(0, at);
  const auto lines = static_cast<uint64_t>(std::count(before.begin(), before.end(), '\n'));
  const size_t line_start = lines == 0 ? 0 : before.rfind('\n') + 1;
  return fmt::format("{}:{}:{}", source.file, source.line + lines, at - line_start + 1);
}

}  // namespace

template <typename Json>
std::string try_parse_json(std::string_view text, const JsonSource& source, Json& out) {
  PlacedSax<Json> sax(out, source.unique_keys);
  if (Json::sax_parse(text.data(), text.data() + text.size(), &sax)) return {};
  if (sax.duplicate)
    return fmt::format("{}: key {} appears twice in one object", source.file,
                       Json(*sax.duplicate).dump(-1, ' ', false, Json::error_handler_t::replace));
  if (sax.error_id == 406) {
    // The lexer has read the number, whose last character is byte error_byte (from 1).
    const size_t start = sax.error_byte - std::min(sax.error_byte, sax.error_token.size());
    return fmt::format("{}: number {} is out of range", place(text, start, source), shortened(sax.error_token));
  }
  // The lexer stopped at byte error_byte (from 1): the character that is wrong.
  return fmt::format("{}: not valid JSON: {}", place(text, sax.error_byte - (sax.error_byte > 0), source),
                     reason(sax.error_what));
}

template <typename Json>
Json parse_json(std::string_view text, const JsonSource& source) {
  Json j;
  if (std::string problem = try_parse_json(text, source, j); !problem.empty()) throw InputError(problem);
  return j;
}

template <typename Json>
Json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) system_error(path, "cannot open");
  std::stringstream s;
  s << in.rdbuf();
  if (in.bad()) system_error(path, "cannot read");
  return parse_json<Json>(s.str(), JsonSource{path});
}

template std::string try_parse_json(std::string_view, const JsonSource&, nlohmann::json&);
template std::string try_parse_json(std::string_view, const JsonSource&, nlohmann::ordered_json&);
template nlohmann::json parse_json<nlohmann::json>(std::string_view, const JsonSource&);
template nlohmann::ordered_json parse_json<nlohmann::ordered_json>(std::string_view, const JsonSource&);
template nlohmann::json read_json_file<nlohmann::json>(const std::string&);
template nlohmann::ordered_json read_json_file<nlohmann::ordered_json>(const std::string&);

void write_json_file(const std::string& path, const nlohmann::ordered_json& json) {
  const std::string text = json.dump(2) + "\n";
  ByteWriter out(path);
  out.write(text.data(), text.size());
  out.commit();
}

std::string parse_json_record(std::string_view raw, const std::string& file, uint64_t line, nlohmann::json& out) {
  if (std::string problem = try_parse_json(raw, JsonSource{file, line}, out); !problem.empty()) return problem;
  if (!out.is_object()) return fmt::format("{}:{}: expected a JSON object, found {}", file, line, out.type_name());
  return {};
}

}  // namespace meg
