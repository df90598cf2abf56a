#include "tokenizer/hf_tokenizer.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/json_file.hpp"
#include "core/mapped_file.hpp"
#include "tokenizer/hf_added_tokens.hpp"
#include "tokenizer/hf_decoder.hpp"
#include "tokenizer/hf_model.hpp"
#include "tokenizer/hf_normalizer.hpp"
#include "tokenizer/hf_pre_tokenizer.hpp"

namespace meg {

namespace fs = std::filesystem;

namespace {

// The ids the post-processor J puts before and after one sequence.
void post_processor_ids(const nlohmann::json& j, const std::string& where, std::vector<int32_t>& prefix,
                        std::vector<int32_t>& suffix) {
  if (j.is_null()) return;
  const std::string type = json_get<std::string>(j, "type", where);
  if (type == "Sequence") {
    const auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) input_error("{}: a Sequence needs its \"processors\" array", where);
    for (size_t i = 0; i < it->size(); ++i) {
      std::vector<int32_t> p, s;
      post_processor_ids((*it)[i], fmt::format("{}.processors[{}]", where, i), p, s);
      prefix.insert(prefix.begin(), p.begin(), p.end());  // a later processor wraps the earlier's output
      suffix.insert(suffix.end(), s.begin(), s.end());
    }
    return;
  }
  if (type == "ByteLevel") return;  // offsets only
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    const auto id_of = [&](const char* key) {
      const auto it = j.find(key);
      if (it == j.end() || !it->is_array() || it->size() != 2)
        input_error("{}: \"{}\" must be [token, id]", where, key);
      return json_as<int32_t>((*it)[1], fmt::format("{}: {}[1]", where, key));
    };
    prefix.push_back(id_of("cls"));
    suffix.push_back(id_of("sep"));
    return;
  }
  if (type == "TemplateProcessing") {
    const auto single = j.find("single");
    const auto specials = j.find("special_tokens");
    if (single == j.end() || !single->is_array()) input_error("{}: \"single\" must be an array", where);
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const auto& piece = (*single)[i];
      const std::string at = fmt::format("{}.single[{}]", where, i);
      if (piece.contains("Sequence")) {
        const std::string id = json_get<std::string>(piece["Sequence"], "id", at);
        if (id != "A" || seen_sequence) input_error("{}: a single-sequence template holds sequence A once", at);
        seen_sequence = true;
        continue;
      }
      if (!piece.contains("SpecialToken")) input_error("{}: expected a Sequence or a SpecialToken", at);
      const std::string name = json_get<std::string>(piece["SpecialToken"], "id", at);
      if (specials == j.end() || !specials->is_object() || !specials->contains(name))
        input_error("{}: special token {} is not in \"special_tokens\"", at, nlohmann::json(name).dump());
      const auto& token = (*specials)[name];
      const auto ids = token.is_object() ? token.find("ids") : token.end();
      if (ids == token.end() || !ids->is_array())
        input_error("{}: special_tokens {}: \"ids\" must be an array", where, nlohmann::json(name).dump());
      for (const auto& id : *ids)
        (seen_sequence ? suffix : prefix).push_back(json_as<int32_t>(id, fmt::format("{}: special_tokens ids", where)));
    }
    if (!seen_sequence) input_error("{}.single: the template has no sequence $A", where);
    return;
  }
  input_error("{}: post-processor type \"{}\" is not supported (supported: TemplateProcessing, BertProcessing, "
              "RobertaProcessing, ByteLevel, Sequence)",
              where, type);
}

// The eos_token of the tokenizer_config.json beside PATH, "" when there is none.
std::string configured_eos(const std::string& path) {
  const fs::path config = fs::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (!fs::is_regular_file(config, ec)) return "";
  const auto j = read_json_file(config.string());
  const auto it = j.is_object() ? j.find("eos_token") : j.end();
  if (it == j.end() || it->is_null()) return "";
  if (it->is_object()) return json_get<std::string>(*it, "content", config.string() + ": eos_token");
  return json_as<std::string>(*it, config.string() + ": eos_token");
}

}  // namespace

struct HfTokenizer::Impl {
  std::string path;
  std::unique_ptr<HfNormalizer> normalizer;
  std::unique_ptr<HfPreTokenizer> pre_tokenizer;
  std::unique_ptr<HfModel> model;
  std::unique_ptr<HfDecoder> decoder;
  std::unique_ptr<AddedTokens> added;
  std::vector<std::string> tokens;  // by id: the model's, with the added tokens over them
  std::vector<int32_t> prefix, suffix;
  int32_t eod = -1;
  std::string eod_problem;  // why there is none
  bool byte_input = false;
  uint64_t fingerprint = 0;

  // Pre-tokenizes TEXT (normalized, between added tokens) and appends its ids.
  void encode_piece(std::string_view text, bool first, std::vector<int32_t>& out) const {
    thread_local PreTokens in, pieces;
    in.clear();
    in.add(text, first);
    const PreTokens* result = &in;
    if (pre_tokenizer) {
      pre_tokenizer->apply(in, pieces);
      result = &pieces;
    }
    for (const auto& p : result->pieces) model->tokenize(result->view(p), out);
  }
};

HfTokenizer::HfTokenizer(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& t = *impl_;
  t.path = path;
  const MappedFile file(path);
  const auto j = parse_json(file.text(), JsonSource{path});
  if (!j.is_object() || !j.contains("model"))
    input_error("{}: not a tokenizer.json (no \"model\"); a GPT-2 vocab.json needs its merges file too "
                "(--merges merges.txt)",
                path);
  const auto part = [&](const char* key) { return j.contains(key) ? j[key] : nlohmann::json(); };
  t.normalizer = HfNormalizer::from_json(part("normalizer"), path + ": normalizer");
  t.pre_tokenizer = HfPreTokenizer::from_json(part("pre_tokenizer"), path + ": pre_tokenizer");
  t.model = HfModel::from_json(j["model"], path + ": model");
  t.decoder = HfDecoder::from_json(part("decoder"), path + ": decoder");
  post_processor_ids(part("post_processor"), path + ": post_processor", t.prefix, t.suffix);
  if (t.pre_tokenizer && t.pre_tokenizer->ends_with_byte_level() && t.model->byte_input(path + ": model")) {
    t.pre_tokenizer->leave_bytes();
    t.byte_input = true;
  }
  const HfNormalizer* normalizer = t.normalizer.get();
  const HfModel* model = t.model.get();
  t.added = std::make_unique<AddedTokens>(
      part("added_tokens"), path + ": added_tokens",
      [normalizer](const std::string& s) {
        std::string n = s;
        if (normalizer) normalizer->apply(n);
        return n;
      },
      [model](const std::string& s) { return model->id_of(s); });

  t.tokens = t.model->tokens();
  for (const AddedToken& a : t.added->tokens()) {
    if (size_t(a.id) >= t.tokens.size()) t.tokens.resize(size_t(a.id) + 1);
    t.tokens[a.id] = a.content;
  }
  if (t.tokens.empty()) input_error("{}: the vocabulary is empty", path);
  for (const auto& ids : {t.prefix, t.suffix})
    for (const int32_t id : ids)
      if (id < 0 || size_t(id) >= t.tokens.size())
        input_error("{}: post_processor: token id {} is outside the vocabulary of {}", path, id, t.tokens.size());

  // The end of a document.
  const auto find = [&](const std::string& content) -> int32_t {
    for (const AddedToken& a : t.added->tokens())
      if (a.content == content) return a.id;
    return t.model->id_of(content).value_or(-1);
  };
  if (const std::string eos = configured_eos(path); !eos.empty()) {
    t.eod = find(eos);
    if (t.eod < 0)
      input_error("{}: eos_token {} of tokenizer_config.json is not a token",
                  (fs::path(path).parent_path() / "tokenizer_config.json").string(), nlohmann::json(eos).dump());
  } else {
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>", "[SEP]"}) {
      bool special = false;
      for (const AddedToken& a : t.added->tokens()) special = special || (a.content == name && a.special);
      if (special && (t.eod = find(name)) >= 0) break;
    }
    if (t.eod < 0)
      t.eod_problem = fmt::format("{}: no end-of-document token: no tokenizer_config.json with an eos_token beside "
                                  "it, and none of <|endoftext|>, <|end_of_text|>, </s>, <eos>, <|im_end|>, [SEP] "
                                  "among its special tokens",
                                  path);
  }
  Hasher h;
  h.update(file.text());
  h.update(std::to_string(t.eod));
  t.fingerprint = h.digest();
}

HfTokenizer::~HfTokenizer() = default;

void HfTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  const Impl& t = *impl_;
  t.added->split(text, false, [&](std::string_view part, int32_t id) {
    if (id >= 0) {
      out.push_back(id);
      return;
    }
    const bool part_first = part.data() == text.data();
    std::string normalized;  // a copy only where there is a normalizer
    std::string_view norm = part;
    if (t.normalizer) {
      normalized.assign(part);
      t.normalizer->apply(normalized);
      norm = normalized;
    }
    t.added->split(norm, true, [&](std::string_view sub, int32_t id2) {
      if (id2 >= 0) out.push_back(id2);
      else t.encode_piece(sub, part_first && sub.data() == norm.data(), out);
    });
  });
}

std::string HfTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& t = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || size_t(ids[i]) >= t.tokens.size() || t.tokens[ids[i]].empty())
      input_error("token {} at position {} is outside the vocabulary of {}", ids[i], i, t.tokens.size());
    tokens.push_back(t.tokens[ids[i]]);
  }
  if (!t.decoder) {
    std::string text;
    for (size_t k = 0; k < tokens.size(); ++k) text += (k ? " " : "") + tokens[k];
    return text;
  }
  t.decoder->apply(tokens);
  std::string text;
  for (const auto& s : tokens) text += s;
  return text;
}

int32_t HfTokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }

int32_t HfTokenizer::eod_id() const {
  if (impl_->eod < 0) throw InputError(impl_->eod_problem);
  return impl_->eod;
}

std::string HfTokenizer::describe() const {
  return fmt::format("Hugging Face tokenizer.json{}, vocab {} ({})", impl_->byte_input ? " (byte-level BPE)" : "",
                     vocab_size(), fs::path(impl_->path).filename().string());
}

uint64_t HfTokenizer::fingerprint() const { return impl_->fingerprint; }

std::span<const int32_t> HfTokenizer::special_prefix() const { return impl_->prefix; }
std::span<const int32_t> HfTokenizer::special_suffix() const { return impl_->suffix; }

std::string HfTokenizer::token_text(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->tokens.size() || impl_->tokens[id].empty())
    input_error("token {} is outside the vocabulary of {}", id, impl_->tokens.size());
  return impl_->tokens[id];
}

}  // namespace meg
