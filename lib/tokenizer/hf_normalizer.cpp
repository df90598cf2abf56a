#include "tokenizer/hf_normalizer.hpp"

#include <vector>

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/utf8.hpp"
#include "tokenizer/char_props.hpp"
#include "tokenizer/hf_pattern.hpp"
#include "tokenizer/hf_sequence.hpp"
#include "tokenizer/unicode_normalization.hpp"

namespace meg {

namespace {

// Calls F(code point) for each character of TEXT (valid UTF-8).
template <typename F>
void for_each_char(std::string_view text, F&& f) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0, len; i < text.size(); i += len) f(next_code_point(s, text.size(), i, &len));
}

// TEXT without the characters for which DROP is true.
template <typename Drop>
void filter_chars(std::string& text, Drop&& drop) {
  std::string out;
  out.reserve(text.size());
  for_each_char(text, [&](uint32_t c) {
    if (!drop(c)) append_utf8(out, c);
  });
  text = std::move(out);
}

class Sequence final : public HfNormalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<HfNormalizer>> steps) : steps_(std::move(steps)) {}
  void apply(std::string& text) const override {
    for (const auto& s : steps_) s->apply(text);
  }

 private:
  std::vector<std::unique_ptr<HfNormalizer>> steps_;
};

class UnicodeForm final : public HfNormalizer {
 public:
  explicit UnicodeForm(NormalizationForm form) : form_(form) {}
  void apply(std::string& text) const override { text = normalize(text, form_); }

 private:
  NormalizationForm form_;
};

class Lowercase final : public HfNormalizer {
 public:
  void apply(std::string& text) const override { text = lowercase(text); }
};

class Strip final : public HfNormalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void apply(std::string& text) const override {
    const auto* s = reinterpret_cast<const uint8_t*>(text.data());
    size_t begin = 0, end = text.size();
    if (left_) {
      for (size_t len; begin < end && is_white_space(next_code_point(s, end, begin, &len));) begin += len;
    }
    if (right_) {
      size_t last = begin;  // the end of the last non-space character
      for (size_t i = begin, len; i < end; i += len)
        if (!is_white_space(next_code_point(s, end, i, &len))) last = i + len;
      end = last;
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class StripAccents final : public HfNormalizer {
 public:
  void apply(std::string& text) const override { filter_chars(text, is_nonspacing_mark); }
};

class Replace final : public HfNormalizer {
 public:
  Replace(HfPattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void apply(std::string& text) const override { text = pattern_.replace(text, content_); }

 private:
  HfPattern pattern_;
  std::string content_;
};

class Prepend final : public HfNormalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void apply(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

// BERT's ideographs: the CJK Unified Ideographs blocks and their compatibility forms.
bool is_chinese_char(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

class Bert final : public HfNormalizer {
 public:
  Bert(bool clean_text, bool chinese_chars, bool strip_accents, bool lowercase)
      : clean_text_(clean_text), chinese_chars_(chinese_chars), strip_accents_(strip_accents), lowercase_(lowercase) {
    for (int c = 0; c < 128; ++c) {
      std::string one(1, static_cast<char>(c));
      normalize_text(one);
      ascii_[c] = one.empty() ? -1 : static_cast<int16_t>(one[0]);  // each becomes one ASCII character or none
    }
  }

  // ASCII characters go through a table of what the steps make of each; the text between the
  // ones that stay goes through the steps together. That is the same: every step but NFD works
  // character by character, and NFD never reaches across an ASCII character (a starter that
  // does not decompose).
  void apply(std::string& text) const override {
    const auto* s = reinterpret_cast<const uint8_t*>(text.data());
    const size_t n = text.size();
    std::string out;
    out.reserve(n);
    thread_local std::string between;
    between.clear();
    for (size_t i = 0; i < n;) {
      size_t end = i;
      if (s[i] >= 0x80) {
        while (end < n && s[end] >= 0x80) ++end;
        between.append(text, i, end - i);
        i = end;
        continue;
      }
      while (end < n && s[end] < 0x80) ++end;
      while (i < end && ascii_[s[i]] < 0) ++i;  // characters that go leave what is between whole
      if (i == end) continue;
      if (!between.empty()) {
        normalize_text(between);
        out += between;
        between.clear();
      }
      size_t at = out.size();
      out.resize(at + (end - i));
      for (; i < end; ++i)
        if (const int16_t c = ascii_[s[i]]; c >= 0) out[at++] = static_cast<char>(c);
      out.resize(at);
    }
    if (!between.empty()) {
      normalize_text(between);
      out += between;
    }
    text = std::move(out);
  }

 private:
  void normalize_text(std::string& text) const {
    if (clean_text_ || chinese_chars_) {
      std::string out;
      out.reserve(text.size());
      for_each_char(text, [&](uint32_t c) {
        // A control character goes even where it is whitespace (U+000B, U+000C); tab and the
        // line ends are not controls to BERT.
        const bool control = c != '\t' && c != '\n' && c != '\r' && is_other(c);
        if (clean_text_ && (c == 0 || c == 0xFFFD || control)) return;
        if (clean_text_ && (c == '\t' || c == '\n' || c == '\r' || is_white_space(c))) c = ' ';
        if (chinese_chars_ && is_chinese_char(c)) {
          out += ' ';
          append_utf8(out, c);
          out += ' ';
        } else {
          append_utf8(out, c);
        }
      });
      text = std::move(out);
    }
    if (strip_accents_) {
      text = normalize(text, NormalizationForm::kNFD);
      filter_chars(text, is_nonspacing_mark);
    }
    if (lowercase_) text = lowercase(text);
  }

  bool clean_text_, chinese_chars_, strip_accents_, lowercase_;
  int16_t ascii_[128];  // what becomes of each ASCII character: one character, or -1 for none
};

}  // namespace

std::unique_ptr<HfNormalizer> HfNormalizer::from_json(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = json_get<std::string>(j, "type", where);
  if (type == "Sequence") return std::make_unique<Sequence>(hf_sequence_steps<HfNormalizer>(j, "normalizers", where));
  if (type == "NFC") return std::make_unique<UnicodeForm>(NormalizationForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeForm>(NormalizationForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(NormalizationForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(NormalizationForm::kNFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip")
    return std::make_unique<Strip>(json_get<bool>(j, "strip_left", where, true),
                                   json_get<bool>(j, "strip_right", where, true));
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Replace") {
    if (!j.contains("pattern")) input_error("{}: Replace needs a \"pattern\"", where);
    return std::make_unique<Replace>(HfPattern(j["pattern"], where + ".pattern"), json_get<std::string>(j, "content", where));
  }
  if (type == "Prepend") return std::make_unique<Prepend>(json_get<std::string>(j, "prepend", where));
  if (type == "BertNormalizer") {
    const bool lower = json_get<bool>(j, "lowercase", where, true);
    const auto strip = j.find("strip_accents");
    const bool strip_accents = strip == j.end() || strip->is_null() ? lower : json_as<bool>(*strip, where + ": strip_accents");
    return std::make_unique<Bert>(json_get<bool>(j, "clean_text", where, true),
                                  json_get<bool>(j, "handle_chinese_chars", where, true), strip_accents, lower);
  }
  input_error("{}: normalizer type \"{}\" is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, "
              "Strip, StripAccents, Replace, Prepend, BertNormalizer)",
              where, type);
}

}  // namespace meg
