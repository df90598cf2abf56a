#include "tokenizer/hf_bpe_train.hpp"

#include <algorithm>
#include <array>
#include <numeric>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/thread_pool.hpp"
#include "tokenizer/bpe_trainer.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/hf_added_tokens.hpp"
#include "tokenizer/hf_pre_tokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace meg {
namespace {

using ordered_json = nlohmann::ordered_json;

// The Split regexes, in the Oniguruma syntax of tokenizer.json. Llama 3's keeps line breaks apart
// from other whitespace and numbers in runs of at most three digits; GPT-2's is the original.
constexpr const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt2Split = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Special {
  std::string content;
  bool special;
};

// The added tokens in id order, checked: each must decode to itself through the ByteLevel decoder,
// which maps a token spelled wholly in the byte-level alphabet to the bytes it stands for.
std::vector<Special> added_tokens_of(const HfBpeTrainOptions& options) {
  std::vector<Special> specials{{kHfBpeEod, true}};
  std::set<std::string> seen{kHfBpeEod};
  const auto add = [&](const std::vector<std::string>& symbols, const char* option, bool special) {
    for (const std::string& s : symbols) {
      if (s.empty()) input_error("{}: an empty symbol", option);
      if (!valid_utf8(s)) input_error("{}: a symbol is not valid UTF-8", option);
      if (!seen.insert(s).second) input_error("{}: {:?} is an added token already", option, s);
      if (std::string bytes; append_byte_level_bytes(s, bytes)) {
        if (bytes != s)
          input_error("{}: {:?} is spelled in the byte-level alphabet, so it would decode to other text", option, s);
        if (s.size() == 1) input_error("{}: {:?} is a single byte, a token already", option, s);
      }
      specials.push_back({s, special});
    }
  };
  add(options.control_symbols, "--control-symbols", true);
  add(options.user_defined_symbols, "--user-symbols", false);
  return specials;
}

ordered_json pre_tokenizer_json(const std::string& name) {
  if (name != "llama3" && name != "gpt2") input_error("--pre-tokenizer must be llama3 or gpt2, not '{}'", name);
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", name == "llama3" ? kLlama3Split : kGpt2Split}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
}

ordered_json byte_level_json() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
}

using WordCounts = std::unordered_map<std::string, uint64_t>;

// The pieces of DOCUMENTS as encoding cuts them (added tokens out, then the pre-tokenizer), each
// with its count, in byte order; counted on THREADS threads.
std::vector<std::pair<std::string, uint64_t>> count_words(const std::vector<std::string>& documents,
                                                          const AddedTokens& added, const HfPreTokenizer& pre,
                                                          unsigned threads) {
  // One chunk a thread, so that at most one table of counts a thread is alive.
  const size_t chunks = std::min<size_t>(documents.size(), std::max(threads, 1u));
  const auto count_chunk = [&](size_t chunk) {
    WordCounts counts;
    PreTokens in, out;
    for (size_t d = documents.size() * chunk / chunks; d < documents.size() * (chunk + 1) / chunks; ++d) {
      const std::string& doc = documents[d];
      added.split(doc, false, [&](std::string_view part, int32_t id) {
        if (id >= 0 || part.empty()) return;
        in.clear();
        in.add(part, part.data() == doc.data());
        pre.apply(in, out);
        for (const auto& p : out.pieces) ++counts[std::string(out.view(p))];
      });
    }
    return counts;
  };
  WordCounts total;
  {
    ThreadPool pool(std::max(threads, 1u));
    std::vector<std::future<WordCounts>> parts;
    for (size_t c = 0; c < chunks; ++c) parts.push_back(pool.submit([&, c] { return count_chunk(c); }));
    for (auto& part : parts)
      for (auto& [word, count] : part.get()) total[word] += count;
  }
  std::vector<std::pair<std::string, uint64_t>> words(std::make_move_iterator(total.begin()),
                                                      std::make_move_iterator(total.end()));
  std::sort(words.begin(), words.end());
  return words;
}

}  // namespace

HfBpeTrainSummary train_hf_bpe(const std::vector<std::string>& documents, const HfBpeTrainOptions& options,
                               const std::string& output) {
  const std::vector<Special> specials = added_tokens_of(options);
  const size_t reserved = 256 + specials.size();
  if (options.vocab_size < 0 || size_t(options.vocab_size) < reserved)
    input_error("--vocab-size {}: must be at least {}, for the 256 bytes and {} added token{}", options.vocab_size,
                reserved, specials.size(), specials.size() == 1 ? "" : "s");

  ordered_json added = ordered_json::array();
  for (size_t id = 0; id < specials.size(); ++id)
    added.push_back({{"id", id},
                     {"content", specials[id].content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", specials[id].special}});
  const ordered_json pre_json = pre_tokenizer_json(options.pre_tokenizer);

  // Cut the text with the very components the file describes, as meg's reader builds them.
  const auto pre = HfPreTokenizer::from_json(nlohmann::json::parse(pre_json.dump()), "pre_tokenizer");
  pre->leave_bytes();
  const AddedTokens cutter(
      nlohmann::json::parse(added.dump()), "added_tokens", [](const std::string& s) { return s; },
      [](const std::string&) { return std::optional<int32_t>(); });
  const auto words = count_words(documents, cutter, *pre, options.threads);
  if (words.empty()) input_error("no text to train on");

  // A token spelled as an added token would take its key in the vocabulary: never made.
  std::unordered_set<std::string> taken;
  for (const Special& s : specials) taken.insert(s.content);
  const BpeTraining bpe = train_bpe(words, size_t(options.vocab_size) - specials.size(),
                                    [&](std::string_view token) { return !taken.contains(byte_level_spelling(token)); });

  // Ids: the added tokens, the bytes in GPT-2's order (by their characters), the merges' tokens.
  const auto chars = byte_level_chars();
  std::array<int32_t, 256> by_char;
  std::iota(by_char.begin(), by_char.end(), 0);
  std::sort(by_char.begin(), by_char.end(), [&](int32_t x, int32_t y) { return chars[x] < chars[y]; });
  std::vector<int32_t> id_of(bpe.tokens.size());
  for (int32_t rank = 0; rank < 256; ++rank) id_of[by_char[rank]] = int32_t(specials.size()) + rank;
  for (size_t t = 256; t < bpe.tokens.size(); ++t) id_of[t] = int32_t(specials.size() + t);

  std::vector<std::string> spelled(specials.size() + bpe.tokens.size());
  for (size_t id = 0; id < specials.size(); ++id) spelled[id] = specials[id].content;
  for (size_t t = 0; t < bpe.tokens.size(); ++t) spelled[id_of[t]] = byte_level_spelling(bpe.tokens[t]);
  ordered_json vocab = ordered_json::object();
  for (size_t id = 0; id < spelled.size(); ++id) vocab[spelled[id]] = id;
  ordered_json merges = ordered_json::array();
  for (const auto& [left, right] : bpe.merges)
    merges.push_back({byte_level_spelling(bpe.tokens[left]), byte_level_spelling(bpe.tokens[right])});

  const ordered_json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", std::move(added)},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_json},
      {"post_processor", byte_level_json()},
      {"decoder", byte_level_json()},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", std::move(vocab)},
        {"merges", std::move(merges)}}},
  };
  write_json_file(output, tokenizer);
  return {words.size(), bpe.merges.size(), spelled.size()};
}

}  // namespace meg
