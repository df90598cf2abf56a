// Byte-level BPE training: the merges of a hand-checked corpus, ties, the same merges as counting
// every pair afresh before each merge, and the tokenizer.json it writes read back by meg.
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "catch.hpp"
#include "core/error.hpp"
#include "tokenizer/bpe_trainer.hpp"
#include "tokenizer/hf_bpe_train.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {

using Words = std::vector<std::pair<std::string, uint64_t>>;
using Merges = std::vector<std::pair<std::string, std::string>>;

Merges merges_of(const BpeTraining& t) {
  Merges out;
  for (const auto& [a, b] : t.merges) out.emplace_back(t.tokens[a], t.tokens[b]);
  return out;
}

// The definition, slowly: count every pair of every word, merge the most frequent (ties to the
// smaller left token, then right, as bytes) everywhere, repeat.
Merges naive_merges(const Words& words, size_t max_tokens) {
  std::vector<std::vector<std::string>> split;
  std::set<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.insert(std::string(1, char(b)));
  for (const auto& [w, n] : words) {
    split.emplace_back();
    for (const char c : w) split.back().emplace_back(1, c);
  }
  Merges merges;
  while (vocab.size() < max_tokens) {
    std::map<std::pair<std::string, std::string>, uint64_t> counts;
    for (size_t i = 0; i < split.size(); ++i)
      for (size_t k = 0; k + 1 < split[i].size(); ++k) counts[{split[i][k], split[i][k + 1]}] += words[i].second;
    const std::pair<std::string, std::string>* best = nullptr;
    uint64_t best_count = 0;
    for (const auto& [pair, count] : counts)  // map order: the smaller pair first among equals
      if (count > best_count) best = &pair, best_count = count;
    if (best == nullptr) break;
    const auto [a, b] = *best;
    merges.emplace_back(a, b);
    vocab.insert(a + b);
    for (auto& s : split) {
      std::vector<std::string> out;
      for (size_t k = 0; k < s.size(); ++k) {
        if (k + 1 < s.size() && s[k] == a && s[k + 1] == b) out.push_back(a + b), ++k;
        else out.push_back(s[k]);
      }
      s = std::move(out);
    }
  }
  return merges;
}

}  // namespace

TEST_CASE("BPE training: the classic corpus merges ug, un, hug, ...", "[bpe_trainer]") {
  const Words words = {{"bun", 4}, {"hug", 10}, {"hugs", 5}, {"pug", 5}, {"pun", 12}};
  const BpeTraining t = train_bpe(words, 256 + 100);
  // ug 20, un 16, hug 15, pun 12; then hug+s and p+ug tie at 5: "hug" < "p"; bun 4; no pair left.
  CHECK(merges_of(t) == Merges{{"u", "g"}, {"u", "n"}, {"h", "ug"}, {"p", "un"}, {"hug", "s"}, {"p", "ug"},
                               {"b", "un"}});
  REQUIRE(t.tokens.size() == 256 + 7);
  CHECK(t.tokens[256] == "ug");
  CHECK(t.tokens[262] == "bun");
  CHECK(train_bpe(words, 256 + 3).tokens.size() == 256 + 3);  // stops when full
  CHECK(merges_of(train_bpe(words, 256 + 3)) == Merges{{"u", "g"}, {"u", "n"}, {"h", "ug"}});
}

TEST_CASE("BPE training: ties by bytes, unsigned; runs of one byte; refused tokens", "[bpe_trainer]") {
  CHECK(merges_of(train_bpe({{"\xff\x01", 1}, {"zz", 1}}, 257)) == Merges{{"z", "z"}});
  // "aaaa" merges as aa aa (left first), "aaa" as aa a.
  CHECK(merges_of(train_bpe({{"aaa", 2}, {"aaaa", 1}}, 300)) == Merges{{"a", "a"}, {"aa", "a"}, {"aa", "aa"}});
  const Words words = {{"ug", 10}, {"un", 3}};
  CHECK(merges_of(train_bpe(words, 257, [](std::string_view t) { return t != "ug"; })) == Merges{{"u", "n"}});
}

TEST_CASE("BPE training: the merges of counting every pair afresh", "[bpe_trainer]") {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    std::map<std::string, uint64_t> counts;  // words over a small alphabet, so pairs repeat and tie
    for (int i = 0; i < 60; ++i) {
      std::string w;
      for (int n = 1 + rng() % 7; n > 0; --n) w += "abcd\xc3\xa9"[rng() % 6];
      counts[w] += 1 + rng() % 5;
    }
    const Words words(counts.begin(), counts.end());
    INFO("round " << round);
    CHECK(merges_of(train_bpe(words, 256 + 40)) == naive_merges(words, 256 + 40));
  }
}

TEST_CASE("BPE training: a tokenizer.json that meg reads and that gives text back", "[bpe_trainer]") {
  TempDir dir;
  const std::string path = dir.path("tokenizer.json");
  std::vector<std::string> docs;
  for (int i = 0; i < 30; ++i)
    docs.push_back("The quick brown fox jumps over the lazy dog " + std::to_string(i * 137) +
                   ".\n  Indented <|im_start|>line\twith tabs\r\n");
  HfBpeTrainOptions options;
  options.vocab_size = 300;
  options.user_defined_symbols = {"<|im_start|>"};
  options.control_symbols = {"<mask>"};
  options.threads = 3;
  train_hf_bpe(docs, options, path);
  const HfTokenizer tok(path);
  CHECK(tok.vocab_size() == 300);
  CHECK(tok.eod_id() == 0);
  CHECK(tok.token_text(1) == "<mask>");
  CHECK(tok.token_text(2) == "<|im_start|>");
  for (const std::string& text : {docs[0], std::string("unseen: \xf0\x9f\x98\x80 \xe4\xb8\xad\xe6\x96\x87 \x01 <mask>"),
                                 std::string("x<|im_start|>y")}) {
    std::vector<int32_t> ids;
    tok.encode(text, ids);
    CHECK(tok.decode(ids) == text);
  }
  std::vector<int32_t> ids;
  tok.encode("a<|im_start|>b", ids);
  CHECK(ids.size() == 3);
  CHECK(ids[1] == 2);

  // The same documents, on one thread: the same file.
  const std::string again = dir.path("again.json");
  options.threads = 1;
  train_hf_bpe(docs, options, again);
  CHECK(read_file(again) == read_file(path));
}

TEST_CASE("BPE training: bad options write nothing", "[bpe_trainer]") {
  TempDir dir;
  const std::string path = dir.path("tokenizer.json");
  const std::vector<std::string> docs = {"some text"};
  HfBpeTrainOptions options;
  options.vocab_size = 257;
  options.control_symbols = {"<mask>"};
  REQUIRE_THROWS_WITH(train_hf_bpe(docs, options, path),
                      ContainsSubstring("--vocab-size 257: must be at least 258, for the 256 bytes and 2 added tokens"));
  options.control_symbols = {};
  options.vocab_size = 300;
  options.user_defined_symbols = {"<|endoftext|>"};
  REQUIRE_THROWS_WITH(train_hf_bpe(docs, options, path), ContainsSubstring("is an added token already"));
  options.user_defined_symbols = {"\xc3\xa9t\xc3\xa9"};
  REQUIRE_THROWS_WITH(train_hf_bpe(docs, options, path), ContainsSubstring("byte-level alphabet"));
  options.user_defined_symbols = {"x"};
  REQUIRE_THROWS_WITH(train_hf_bpe(docs, options, path), ContainsSubstring("a single byte"));
  options.user_defined_symbols = {};
  REQUIRE_THROWS_WITH(train_hf_bpe({}, options, path), ContainsSubstring("no text to train on"));
  CHECK(std::filesystem::is_empty(std::filesystem::path(path).parent_path()));
}
