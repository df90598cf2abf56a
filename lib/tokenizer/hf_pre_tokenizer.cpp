#include "tokenizer/hf_pre_tokenizer.hpp"

#include <algorithm>
#include <functional>

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/utf8.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/char_props.hpp"
#include "tokenizer/gpt2_bpe.hpp"
#include "tokenizer/hf_pattern.hpp"
#include "tokenizer/hf_sequence.hpp"

namespace meg {

void PreTokens::add(std::string_view bytes, bool first) {
  pieces.push_back({static_cast<uint32_t>(text.size()), static_cast<uint32_t>(bytes.size()), first});
  text += bytes;
}

namespace {

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

Behavior parse_behavior(const nlohmann::json& j, const std::string& where) {
  const std::string b = json_get<std::string>(j, "behavior", where);
  if (b == "Removed") return Behavior::removed;
  if (b == "Isolated") return Behavior::isolated;
  if (b == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (b == "MergedWithNext") return Behavior::merged_with_next;
  if (b == "Contiguous") return Behavior::contiguous;
  input_error("{}: behavior \"{}\" is none of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous",
              where, b);
}

// A stretch of a piece: matched by the pattern, or between matches.
struct Stretch {
  size_t begin, end;
  bool match;
};

// The stretches of a piece of SIZE bytes with MATCHES (ordered, not overlapping): every byte in
// one, matches (empty ones too) and the text between them, as tokenizers' find_matches.
void stretches_of(size_t size, const std::vector<std::pair<size_t, size_t>>& matches, std::vector<Stretch>& out) {
  out.clear();
  if (size == 0) {
    out.push_back({0, 0, false});
    return;
  }
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    if (prev != begin) out.push_back({prev, begin, false});
    out.push_back({begin, end, true});
    prev = end;
  }
  if (prev != size) out.push_back({prev, size, false});
}

// Cuts piece P by STRETCHES as BEHAVIOR says, into OUT, whose text is P's: tokenizers'
// NormalizedString::split.
void cut(const PreTokens::Piece& p, std::vector<Stretch>& stretches, Behavior behavior, PreTokens& out) {
  struct Part {
    size_t begin, end;
    bool drop;
  };
  thread_local std::vector<Part> parts;
  parts.clear();
  bool previous_match = false;
  switch (behavior) {
    case Behavior::isolated:
      for (const auto& s : stretches) parts.push_back({s.begin, s.end, false});
      break;
    case Behavior::removed:
      for (const auto& s : stretches) parts.push_back({s.begin, s.end, s.match});
      break;
    case Behavior::contiguous:
      for (const auto& s : stretches) {
        if (s.match == previous_match && !parts.empty()) parts.back().end = s.end;
        else parts.push_back({s.begin, s.end, false});
        previous_match = s.match;
      }
      break;
    case Behavior::merged_with_previous:
      for (const auto& s : stretches) {
        if (s.match && !previous_match && !parts.empty()) parts.back().end = s.end;
        else parts.push_back({s.begin, s.end, false});
        previous_match = s.match;
      }
      break;
    case Behavior::merged_with_next:
      for (size_t k = stretches.size(); k-- > 0;) {
        const Stretch& s = stretches[k];
        if (s.match && !previous_match && !parts.empty()) parts.back().begin = s.begin;
        else parts.push_back({s.begin, s.end, false});
        previous_match = s.match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
  }
  for (const Part& part : parts)
    if (!part.drop && part.end > part.begin)
      out.pieces.push_back({p.begin + static_cast<uint32_t>(part.begin), static_cast<uint32_t>(part.end - part.begin),
                            p.first && part.begin == 0});
}

// Each character for which PREDICATE holds is a match of its own (tokenizers' Pattern for a
// char predicate).
void char_matches(std::string_view piece, bool (*predicate)(uint32_t), std::vector<std::pair<size_t, size_t>>& out) {
  out.clear();
  const auto* s = reinterpret_cast<const uint8_t*>(piece.data());
  for (size_t i = 0, len; i < piece.size(); i += len)
    if (predicate(next_code_point(s, piece.size(), i, &len))) out.emplace_back(i, i + len);
}

// A pre-tokenizer that cuts each piece at the matches of a rule, by a behavior. It only cuts, so
// its pieces are spans of the text it was given.
class Cutter : public HfPreTokenizer {
 public:
  using Matcher = std::function<void(std::string_view, std::vector<std::pair<size_t, size_t>>&)>;
  Cutter(Matcher matcher, Behavior behavior, bool invert = false)
      : matcher_(std::move(matcher)), behavior_(behavior), invert_(invert) {}

  void apply(const PreTokens& in, PreTokens& out) const override {
    out.pieces.clear();
    out.text = in.text;
    thread_local std::vector<std::pair<size_t, size_t>> matches;
    thread_local std::vector<Stretch> stretches;
    for (const auto& p : in.pieces) {
      const std::string_view piece = in.view(p);
      matcher_(piece, matches);
      stretches_of(piece.size(), matches, stretches);
      if (invert_)
        for (auto& s : stretches) s.match = !s.match;
      cut(p, stretches, behavior_, out);
    }
  }

 private:
  Matcher matcher_;
  Behavior behavior_;
  bool invert_;
};

Cutter::Matcher chars_where(bool (*predicate)(uint32_t)) {
  return [predicate](std::string_view piece, std::vector<std::pair<size_t, size_t>>& out) {
    char_matches(piece, predicate, out);
  };
}

class Sequence final : public HfPreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<HfPreTokenizer>> steps) : steps_(std::move(steps)) {}
  void apply(const PreTokens& in, PreTokens& out) const override {
    if (steps_.empty()) {
      out = in;
      return;
    }
    PreTokens scratch[2];  // not thread_local: a Sequence may hold another
    const PreTokens* from = &in;
    for (size_t k = 0; k < steps_.size(); ++k) {
      PreTokens& to = k + 1 == steps_.size() ? out : scratch[k % 2];
      steps_[k]->apply(*from, to);
      from = &to;
    }
  }
  bool ends_with_byte_level() const override { return !steps_.empty() && steps_.back()->ends_with_byte_level(); }
  void leave_bytes() override { steps_.back()->leave_bytes(); }

 private:
  std::vector<std::unique_ptr<HfPreTokenizer>> steps_;
};

class ByteLevel final : public HfPreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {
    const auto chars = byte_level_chars();
    for (int b = 0; b < 256; ++b) {
      char_of_[b].clear();
      append_utf8(char_of_[b], chars[b]);
    }
  }

  void apply(const PreTokens& in, PreTokens& out) const override {
    out.clear();
    thread_local std::string spaced;
    for (const auto& p : in.pieces) {
      std::string_view piece = in.view(p);
      if (add_prefix_space_ && !piece.starts_with(' ')) {
        spaced.assign(" ").append(piece);
        piece = spaced;
      }
      if (!use_regex_) {
        emit(piece, p.first, out);
        continue;
      }
      thread_local std::vector<std::string_view> words;
      words.clear();
      gpt2_pretokenize(piece, words);
      for (const std::string_view word : words) emit(word, p.first && word.data() == piece.data(), out);
    }
  }
  bool ends_with_byte_level() const override { return true; }
  void leave_bytes() override { map_ = false; }

 private:
  void emit(std::string_view word, bool first, PreTokens& out) const {
    if (!map_) {
      out.add(word, first);
      return;
    }
    const auto begin = static_cast<uint32_t>(out.text.size());
    for (const char c : word) out.text += char_of_[static_cast<uint8_t>(c)];
    out.pieces.push_back({begin, static_cast<uint32_t>(out.text.size() - begin), first});
  }

  bool add_prefix_space_, use_regex_;
  bool map_ = true;
  std::string char_of_[256];  // each byte's character in UTF-8
};

class Metaspace final : public HfPreTokenizer {
 public:
  enum class Prepend { always, first, never };
  Metaspace(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}

  void apply(const PreTokens& in, PreTokens& out) const override {
    out.clear();
    thread_local std::string replaced;
    for (const auto& p : in.pieces) {
      const std::string_view piece = in.view(p);
      replaced.clear();
      const bool prepend = (prepend_ == Prepend::always || (prepend_ == Prepend::first && p.first)) &&
                           !piece.starts_with(' ') && !piece.starts_with(replacement_);
      if (prepend) replaced += replacement_;
      for (const char c : piece) {
        if (c == ' ') replaced += replacement_;
        else replaced += c;
      }
      if (!split_) {
        out.add(replaced, p.first);
        continue;
      }
      // Each replacement character starts a piece (MergedWithNext).
      size_t start = 0;
      for (size_t at = replaced.find(replacement_, 1); at != std::string::npos;
           at = replaced.find(replacement_, at + replacement_.size())) {
        out.add(std::string_view(replaced).substr(start, at - start), p.first && start == 0);
        start = at;
      }
      if (start < replaced.size()) out.add(std::string_view(replaced).substr(start), p.first && start == 0);
    }
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

// BertPreTokenizer in one pass: WhitespaceSplit, then each punctuation character a piece of its
// own (what a Sequence of the two would do, without the second pass and copy).
class BertPreTokenizer final : public HfPreTokenizer {
 public:
  BertPreTokenizer() {
    for (uint32_t c = 0; c < 128; ++c) ascii_kind_[c] = kind_of(c);
  }

  void apply(const PreTokens& in, PreTokens& out) const override {
    out.pieces.clear();
    out.text = in.text;
    for (const auto& p : in.pieces) {
      const auto* s = reinterpret_cast<const uint8_t*>(in.text.data()) + p.begin;
      const auto emit = [&](size_t begin, size_t end) {
        out.pieces.push_back({p.begin + static_cast<uint32_t>(begin), static_cast<uint32_t>(end - begin),
                              p.first && begin == 0});
      };
      size_t word = kNone;  // where the run of other characters began
      for (size_t i = 0, len = 1; i < p.size; i += len) {
        Kind kind;
        if (s[i] < 0x80) len = 1, kind = ascii_kind_[s[i]];
        else kind = kind_of(next_code_point(s, p.size, i, &len));
        if (kind == Kind::other) {
          if (word == kNone) word = i;
          continue;
        }
        if (word != kNone) emit(word, i), word = kNone;
        if (kind == Kind::punctuation) emit(i, i + len);
      }
      if (word != kNone) emit(word, p.size);
    }
  }

 private:
  enum class Kind : uint8_t { space, punctuation, other };
  static constexpr size_t kNone = ~size_t(0);
  static Kind kind_of(uint32_t c) {
    return is_white_space(c) ? Kind::space : is_bert_punctuation(c) ? Kind::punctuation : Kind::other;
  }
  Kind ascii_kind_[128];
};

// Runs of word characters (\w: alphabetic, marks, decimal digits, connector punctuation) and runs
// of other non-space characters, which is what `\w+|[^\w\s]+` matches.
void word_runs(std::string_view piece, std::vector<std::pair<size_t, size_t>>& out) {
  out.clear();
  const auto* s = reinterpret_cast<const uint8_t*>(piece.data());
  int run = 0;  // 0 none, 1 word, 2 other
  for (size_t i = 0, len; i < piece.size(); i += len) {
    const uint32_t c = next_code_point(s, piece.size(), i, &len);
    const int kind = is_white_space(c) ? 0 : is_word_char(c) ? 1 : 2;
    if (kind != 0 && kind == run) out.back().second = i + len;
    else if (kind != 0) out.emplace_back(i, i + len);
    run = kind;
  }
}

std::unique_ptr<HfPreTokenizer> metaspace_from_json(const nlohmann::json& j, const std::string& where) {
  const std::string replacement = json_get<std::string>(j, "replacement", where, "\u2581");
  size_t len = 0;
  if (replacement.empty() ||
      (next_code_point(reinterpret_cast<const uint8_t*>(replacement.data()), replacement.size(), 0, &len), len) !=
          replacement.size())
    input_error("{}: replacement must be one character, not {}", where, nlohmann::json(replacement).dump());
  Metaspace::Prepend prepend = Metaspace::Prepend::always;
  if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
    const std::string scheme = json_get<std::string>(j, "prepend_scheme", where);
    if (scheme == "always") prepend = Metaspace::Prepend::always;
    else if (scheme == "first") prepend = Metaspace::Prepend::first;
    else if (scheme == "never") prepend = Metaspace::Prepend::never;
    else input_error("{}: prepend_scheme \"{}\" is none of always, first, never", where, scheme);
  } else if (!json_get<bool>(j, "add_prefix_space", where, true)) {  // the older files' spelling
    prepend = Metaspace::Prepend::never;
  }
  return std::make_unique<Metaspace>(replacement, prepend, json_get<bool>(j, "split", where, true));
}

}  // namespace

std::unique_ptr<HfPreTokenizer> HfPreTokenizer::from_json(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = json_get<std::string>(j, "type", where);
  if (type == "Sequence") return std::make_unique<Sequence>(hf_sequence_steps<HfPreTokenizer>(j, "pretokenizers", where));
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(json_get<bool>(j, "add_prefix_space", where, true),
                                       json_get<bool>(j, "use_regex", where, true));
  if (type == "Split") {
    if (!j.contains("pattern")) input_error("{}: Split needs a \"pattern\"", where);
    auto pattern = std::make_shared<HfPattern>(j["pattern"], where + ".pattern");
    return std::make_unique<Cutter>(
        [pattern](std::string_view piece, std::vector<std::pair<size_t, size_t>>& out) { pattern->matches(piece, out); },
        parse_behavior(j, where), json_get<bool>(j, "invert", where, false));
  }
  if (type == "Metaspace") return metaspace_from_json(j, where);
  if (type == "Whitespace") return std::make_unique<Cutter>(word_runs, Behavior::removed, true);
  if (type == "WhitespaceSplit") return std::make_unique<Cutter>(chars_where(is_white_space), Behavior::removed);
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "Punctuation") {
    const Behavior behavior = j.contains("behavior") ? parse_behavior(j, where) : Behavior::isolated;
    return std::make_unique<Cutter>(chars_where(is_bert_punctuation), behavior);
  }
  if (type == "Digits")
    return std::make_unique<Cutter>(chars_where(is_numeric), json_get<bool>(j, "individual_digits", where, false)
                                                                  ? Behavior::isolated
                                                                  : Behavior::contiguous);
  if (type == "CharDelimiterSplit") {
    const std::string d = json_get<std::string>(j, "delimiter", where);
    size_t len = 0;
    if (d.empty() || (next_code_point(reinterpret_cast<const uint8_t*>(d.data()), d.size(), 0, &len), len) != d.size())
      input_error("{}: delimiter must be one character, not {}", where, nlohmann::json(d).dump());
    return std::make_unique<Cutter>(
        [d](std::string_view piece, std::vector<std::pair<size_t, size_t>>& out) {
          out.clear();
          for (size_t at = piece.find(d); at != std::string_view::npos; at = piece.find(d, at + d.size()))
            out.emplace_back(at, at + d.size());
        },
        Behavior::removed);
  }
  input_error("{}: pre-tokenizer type \"{}\" is not supported (supported: Sequence, ByteLevel, Split, Metaspace, "
              "Whitespace, WhitespaceSplit, BertPreTokenizer, Punctuation, Digits, CharDelimiterSplit)",
              where, type);
}

}  // namespace meg
