#include "tokenizer/sentencepiece_hf_json.hpp"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "core/utf8.hpp"

namespace meg {

namespace {

using Model = SentencePieceModel;
using json = nlohmann::ordered_json;

// Why tokenizers cannot encode as MODEL does, "" when it can.
std::string not_exact(const Model& model) {
  if (model.model_type != Model::kBpe) return model.model_type == Model::kUnigram ? "a unigram model" : "not a BPE model";
  const Model::Normalizer& n = model.normalizer;
  if (!n.charsmap.empty()) return fmt::format("its normalization table ({})", n.name.empty() ? "custom" : n.name);
  if (n.remove_extra_whitespaces) return "it folds runs of spaces (remove_extra_whitespaces)";
  if (!n.escape_whitespaces) return "it keeps spaces unescaped (escape_whitespaces false)";
  if (model.whitespace_as_suffix) return "it puts spaces after words (treat_whitespace_as_suffix)";
  std::unordered_map<float, int32_t> by_score;  // multi-character NORMAL pieces by score
  for (size_t id = 0; id < model.pieces.size(); ++id) {
    const Model::Piece& p = model.pieces[id];
    if (p.type == Model::kUnused) return fmt::format("piece {} is unused (split again after merging)", id);
    size_t len = 0;
    next_code_point(reinterpret_cast<const uint8_t*>(p.text.data()), p.text.size(), 0, &len);
    if (p.type != Model::kNormal || len == p.text.size()) continue;
    const auto [at, fresh] = by_score.emplace(p.score, int32_t(id));
    if (!fresh) return fmt::format("pieces {} and {} share the score {}", at->second, id, p.score);
  }
  return "";
}

// Every (left, right, rank key) that joins two NORMAL pieces into a third, best first.
json merges_of(const Model& model, const std::unordered_map<std::string_view, int32_t>& ids) {
  struct Merge {
    float score;
    int32_t id;
    size_t cut;
  };
  std::vector<Merge> merges;
  const auto normal = [&](std::string_view text) {
    const auto it = ids.find(text);
    return it != ids.end() && model.pieces[size_t(it->second)].type == Model::kNormal;
  };
  for (size_t id = 0; id < model.pieces.size(); ++id) {
    const Model::Piece& p = model.pieces[id];
    if (p.type != Model::kNormal) continue;
    const auto* s = reinterpret_cast<const uint8_t*>(p.text.data());
    size_t len = 0;
    next_code_point(s, p.text.size(), 0, &len);
    for (size_t at = len; at < p.text.size(); at += len) {
      if (normal(p.text.substr(0, at)) && normal(p.text.substr(at))) merges.push_back({p.score, int32_t(id), at});
      next_code_point(s, p.text.size(), at, &len);
    }
  }
  std::sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.id != b.id ? a.id < b.id : a.cut < b.cut;
  });
  json out = json::array();
  for (const Merge& m : merges) {
    const std::string_view text = model.pieces[size_t(m.id)].text;
    out.push_back(json::array({text.substr(0, m.cut), text.substr(m.cut)}));
  }
  return out;
}

}  // namespace

SentencePieceHfJson sentencepiece_hf_json(const SentencePieceModel& model) {
  SentencePieceHfJson out;
  out.not_exact = not_exact(model);
  if (!out.not_exact.empty()) return out;

  std::unordered_map<std::string_view, int32_t> ids;
  json vocab = json::object();
  json added = json::array();
  std::string unk;
  for (size_t id = 0; id < model.pieces.size(); ++id) {
    const Model::Piece& p = model.pieces[id];
    ids.emplace(p.text, int32_t(id));
    vocab[std::string(p.text)] = id;
    if (p.type == Model::kUnknown) unk = p.text;
    if (p.type == Model::kUserDefined) {
      added.push_back({{"id", id}, {"content", p.text}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", false}});
    }
  }
  // SentencePiece escapes the spaces of the whole text and puts the dummy prefix before it; so does
  // a normalizer (Prepend, Replace) where there are no user-defined pieces. With them, tokenizers
  // normalizes each text between them on its own, and would put a prefix after each: there the
  // Metaspace pre-tokenizer puts it only before the first, but not where that begins with a space.
  const bool prefix = model.normalizer.add_dummy_prefix;
  const json escape = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSentencePieceSpace}};
  json normalizer = nullptr, pre_tokenizer = nullptr;
  if (added.empty()) {
    normalizer = prefix ? json{{"type", "Sequence"},
                               {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", kSentencePieceSpace}},
                                                            escape})}}
                        : escape;
  } else {
    pre_tokenizer = {{"type", "Metaspace"},
                     {"replacement", kSentencePieceSpace},
                     {"prepend_scheme", prefix ? "first" : "never"},
                     {"split", false}};
    if (prefix)
      out.caveat = "a text that begins with a space or a user-defined piece, where SentencePiece's dummy prefix "
                   "is one more \u2581";
  }

  json decoders = json::array({
      {{"type", "Replace"}, {"pattern", {{"String", kSentencePieceSpace}}}, {"content", " "}},
      {{"type", "ByteFallback"}},
      {{"type", "Fuse"}},
  });
  if (prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});

  json bpe = {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", unk.empty() ? json(nullptr) : json(unk)},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"fuse_unk", true},
              {"byte_fallback", model.byte_fallback},
              {"ignore_merges", false},
              {"vocab", std::move(vocab)},
              {"merges", merges_of(model, ids)}};
  out.json = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", std::move(added)},
              {"normalizer", std::move(normalizer)},
              {"pre_tokenizer", std::move(pre_tokenizer)},
              {"post_processor", nullptr},
              {"decoder", {{"type", "Sequence"}, {"decoders", std::move(decoders)}}},
              {"model", std::move(bpe)}};
  return out;
}

}  // namespace meg
