#include "tokenizer/hf_decoder.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/utf8.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/hf_pattern.hpp"
#include "tokenizer/hf_sequence.hpp"
#include "tokenizer/tokenizer.hpp"

namespace meg {

namespace {

// The code points of TEXT (valid UTF-8).
std::vector<uint32_t> code_points(std::string_view text) {
  std::vector<uint32_t> out;
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0, len; i < text.size(); i += len) out.push_back(next_code_point(s, text.size(), i, &len));
  return out;
}

// One character given in a decoder's field.
uint32_t one_char(const nlohmann::json& j, const std::string& key, const std::string& where, const char* fallback) {
  const std::string text = json_get<std::string>(j, key, where, fallback);
  const auto cps = code_points(text);
  if (cps.size() != 1) input_error("{}: {} must be one character, not {}", where, key, nlohmann::json(text).dump());
  return cps[0];
}

class Sequence final : public HfDecoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<HfDecoder>> steps) : steps_(std::move(steps)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps_) s->apply(tokens);
  }

 private:
  std::vector<std::unique_ptr<HfDecoder>> steps_;
};

class ByteLevel final : public HfDecoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens)
      if (!append_byte_level_bytes(t, bytes)) bytes += t;
    tokens.assign(1, to_valid_utf8(bytes));
  }
};

class Metaspace final : public HfDecoder {
 public:
  Metaspace(uint32_t replacement, bool drop_first) : replacement_(replacement), drop_first_(drop_first) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string out;
      for (const uint32_t c : code_points(tokens[k])) {
        if (c != replacement_) append_utf8(out, c);
        else if (k != 0 || !drop_first_) out += ' ';
      }
      tokens[k] = std::move(out);
    }
  }

 private:
  uint32_t replacement_;
  bool drop_first_;
};

class Replace final : public HfDecoder {
 public:
  Replace(HfPattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = pattern_.replace(t, content_);
  }

 private:
  HfPattern pattern_;
  std::string content_;
};

class ByteFallback final : public HfDecoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string run;  // bytes of consecutive <0xNN> tokens
    size_t run_tokens = 0;
    const auto flush = [&] {
      if (run_tokens == 0) return;
      if (valid_utf8(run)) out.push_back(run);
      else
        for (size_t k = 0; k < run_tokens; ++k) out.emplace_back("\xEF\xBF\xBD");
      run.clear(), run_tokens = 0;
    };
    for (std::string& t : tokens) {
      if (const int byte = byte_token(t); byte >= 0) {
        run += static_cast<char>(byte), ++run_tokens;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }

 private:
  // The byte of a token "<0xNN>", -1 for any other token.
  static int byte_token(const std::string& t) {
    if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
    int v = 0;
    for (const char c : t.substr(3, 2)) {
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }
};

class Fuse final : public HfDecoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class Strip final : public HfDecoder {
 public:
  Strip(uint32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      const auto cps = code_points(t);
      size_t begin = 0, end = cps.size();
      while (begin < std::min(start_, cps.size()) && cps[begin] == content_) ++begin;
      for (size_t k = 0; k < stop_ && end > begin && cps[end - 1] == content_; ++k) --end;
      std::string out;
      for (size_t i = begin; i < end; ++i) append_utf8(out, cps[i]);
      t = std::move(out);
    }
  }

 private:
  uint32_t content_;
  size_t start_, stop_;
};

// tokenizers' cleanup(): the space before punctuation and in English contractions.
std::string cleanup(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},       {" ?", "?"},      {" !", "!"},     {" ,", ","},     {" ' ", "'"},    {" n't", "n't"},
      {" 'm", "'m"},     {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) s = replace_all(s, from, to);
  return s;
}

class WordPiece final : public HfDecoder {
 public:
  WordPiece(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string& t = tokens[k];
      if (k != 0) t = t.starts_with(prefix_) ? t.substr(prefix_.size()) : " " + t;
      if (cleanup_) t = cleanup(std::move(t));
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class BpeDecoder final : public HfDecoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void apply(std::vector<std::string>& tokens) const override {
    if (suffix_.empty()) return;
    for (size_t k = 0; k < tokens.size(); ++k) tokens[k] = replace_all(tokens[k], suffix_, k + 1 == tokens.size() ? "" : " ");
  }

 private:
  std::string suffix_;
};

}  // namespace

std::unique_ptr<HfDecoder> HfDecoder::from_json(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = json_get<std::string>(j, "type", where);
  if (type == "Sequence") return std::make_unique<Sequence>(hf_sequence_steps<HfDecoder>(j, "decoders", where));
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Metaspace") {
    bool drop_first = json_get<bool>(j, "add_prefix_space", where, true);  // the older files' spelling
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      const std::string scheme = json_get<std::string>(j, "prepend_scheme", where);
      if (scheme != "always" && scheme != "first" && scheme != "never")
        input_error("{}: prepend_scheme \"{}\" is none of always, first, never", where, scheme);
      drop_first = scheme != "never";
    }
    return std::make_unique<Metaspace>(one_char(j, "replacement", where, "\u2581"), drop_first);
  }
  if (type == "Replace") {
    if (!j.contains("pattern")) input_error("{}: Replace needs a \"pattern\"", where);
    return std::make_unique<Replace>(HfPattern(j["pattern"], where + ".pattern"), json_get<std::string>(j, "content", where));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip")
    return std::make_unique<Strip>(one_char(j, "content", where, " "), json_get<size_t>(j, "start", where, 0),
                                   json_get<size_t>(j, "stop", where, 0));
  if (type == "WordPiece")
    return std::make_unique<WordPiece>(json_get<std::string>(j, "prefix", where, "##"),
                                       json_get<bool>(j, "cleanup", where, true));
  if (type == "BPEDecoder") return std::make_unique<BpeDecoder>(json_get<std::string>(j, "suffix", where, "</w>"));
  input_error("{}: decoder type \"{}\" is not supported (supported: Sequence, ByteLevel, Metaspace, Replace, "
              "ByteFallback, Fuse, Strip, WordPiece, BPEDecoder)",
              where, type);
}

}  // namespace meg
