// Hugging Face tokenizer.json: the ids of HF tokenizers for each family's file on varied text
// (tests/data/hf-tokenizers, made by scripts/make-tokenizer-fixtures.js), decoding, the pieces of
// the pipeline on small hand-made files, and bad files refused in one line naming the place.
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "core/error.hpp"
#include "test_util.hpp"
#include "core/utf8.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;
using nlohmann::json;

namespace {

const std::string kFixtures = std::string(MEG_TEST_DATA) + "/hf-tokenizers";
const char* const kFamilies[] = {"gpt2", "llama3", "qwen2", "neox", "tekken", "spm", "metaspace", "wordpiece"};

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

std::vector<int32_t> encode(const Tokenizer& t, std::string_view text) {
  std::vector<int32_t> ids;
  t.encode(text, ids);
  return ids;
}

// A byte-level BPE tokenizer.json over a vocabulary of the bytes, "ab", "abc", and the added
// tokens, with the given pieces replaced.
json small_tokenizer() {
  // The byte-level alphabet: byte B is token B.
  json vocab = json::object();
  const auto chars = byte_level_chars();
  for (int b = 0; b < 256; ++b) {
    std::string c;
    append_utf8(c, chars[b]);
    vocab[c] = b;
  }
  int id = 256;
  vocab["ab"] = id++;
  vocab["abc"] = id++;
  vocab["\u0120a"] = id++;
  json j;
  j["version"] = "1.0";
  j["added_tokens"] = json::array({{{"id", id}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                                   {{"id", id + 1}, {"content", "</s>"}, {"special", true}, {"normalized", false}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {id}}, {"tokens", {"<s>"}}}}}}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b", "ab c", "\u0120 a"})}};
  return j;
}

std::string write_tokenizer(const TempDir& dir, const json& j) {
  const std::string path = dir.path("tokenizer.json");
  write_file(path, j.dump());
  return path;
}

std::string load_error(const json& j) {
  TempDir dir;
  const std::string path = write_tokenizer(dir, j);
  try {
    HfTokenizer t(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(loaded)";
}

}  // namespace

TEST_CASE("tokenizer.json: the ids of Hugging Face tokenizers for every family", "[hf_tokenizer]") {
  const auto texts = read_jsonl(kFixtures + "/texts.jsonl");
  REQUIRE(texts.size() >= 40);
  for (const char* family : kFamilies) {
    INFO(family);
    const auto tokenizer = load_tokenizer(kFixtures + "/" + family + "/tokenizer.json");
    const auto expected = read_jsonl(kFixtures + "/" + family + "/expected.jsonl");
    REQUIRE(expected.size() == texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string text = texts[i]["text"];
      INFO("text " << i << ": " << text);
      const auto ids = encode(*tokenizer, text);
      CHECK(ids == expected[i]["ids"].get<std::vector<int32_t>>());
      std::vector<int32_t> with(tokenizer->special_prefix().begin(), tokenizer->special_prefix().end());
      with.insert(with.end(), ids.begin(), ids.end());
      with.insert(with.end(), tokenizer->special_suffix().begin(), tokenizer->special_suffix().end());
      CHECK(with == expected[i]["ids_special"].get<std::vector<int32_t>>());
      CHECK(tokenizer->decode(expected[i]["ids"].get<std::vector<int32_t>>()) == expected[i]["decoded"].get<std::string>());
    }
  }
}

TEST_CASE("tokenizer.json: encoding from many threads gives the same ids", "[hf_tokenizer]") {
  const auto texts = read_jsonl(kFixtures + "/texts.jsonl");
  const auto tokenizer = load_tokenizer(kFixtures + "/llama3/tokenizer.json");
  std::vector<std::vector<int32_t>> one;
  for (const auto& t : texts) one.push_back(encode(*tokenizer, t["text"].get<std::string>()));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      for (int round = 0; round < 20; ++round)
        for (size_t i = 0; i < texts.size(); ++i)
          if (encode(*tokenizer, texts[i]["text"].get<std::string>()) != one[i]) ++wrong;
    });
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
}

TEST_CASE("tokenizer.json: merges, added tokens, the template and decoding", "[hf_tokenizer]") {
  TempDir dir;
  json j = small_tokenizer();
  HfTokenizer t(write_tokenizer(dir, j));
  const int32_t ab = j["model"]["vocab"]["ab"], abc = j["model"]["vocab"]["abc"], sp_a = j["model"]["vocab"]["\u0120a"];
  const int32_t bos = j["added_tokens"][0]["id"], eos = j["added_tokens"][1]["id"];
  CHECK(encode(t, "abc") == std::vector<int32_t>{abc});
  CHECK(encode(t, "ab ab") == std::vector<int32_t>{ab, 32, ab});  // (a b) ranks before (Ġ a)
  CHECK(encode(t, " a") == std::vector<int32_t>{sp_a});
  CHECK(encode(t, "<s>abc</s>") == std::vector<int32_t>{bos, abc, eos});
  CHECK(t.special_prefix().size() == 1);
  CHECK(t.special_prefix()[0] == bos);
  CHECK(t.special_suffix().empty());
  CHECK(t.eod_id() == eos);  // </s>, a special token
  CHECK(t.vocab_size() == eos + 1);
  CHECK(t.decode(encode(t, "ab abc! <s>x")) == "ab abc! <s>x");
  CHECK_THROWS_WITH(t.decode(std::vector<int32_t>{eos + 1}), ContainsSubstring("outside the vocabulary"));

  // lstrip and rstrip take the spaces around a token; single_word keeps it out of words.
  j["added_tokens"][0]["lstrip"] = true;
  j["added_tokens"][0]["rstrip"] = true;
  j["added_tokens"][1]["single_word"] = true;
  HfTokenizer u(write_tokenizer(dir, j));
  CHECK(encode(u, "a  <s>  b") == std::vector<int32_t>{j["model"]["vocab"]["a"], bos, j["model"]["vocab"]["b"]});
  CHECK(encode(u, "a</s>") != std::vector<int32_t>{j["model"]["vocab"]["a"], eos});
  CHECK(encode(u, "a </s> b") == std::vector<int32_t>{'a', 32, eos, 32, 'b'});  // spaces around it: a single word
}

TEST_CASE("tokenizer.json: byte fallback, unknown characters and Metaspace", "[hf_tokenizer]") {
  TempDir dir;
  json vocab = {{"<unk>", 0}, {"\u2581", 1}, {"a", 2}, {"b", 3}, {"\u2581a", 4}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 5 + b;
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({json::array({"\u2581", "a"})})},
                {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true}};
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}},
                                            {{"type", "ByteFallback"}},
                                            {{"type", "Fuse"}}})}};
  HfTokenizer t(write_tokenizer(dir, j));
  // "é" is two bytes the vocabulary has as <0xC3> <0xA9>.
  CHECK(encode(t, "a é") == std::vector<int32_t>{4, 1, 5 + 0xC3, 5 + 0xA9});
  CHECK(t.decode(encode(t, "a é b")) == "a é b");
  CHECK(t.decode(std::vector<int32_t>{5 + 0xC3}) == "\xEF\xBF\xBD");  // a byte alone is not UTF-8
  // Without byte fallback an unknown character is <unk>, and a run of them one with fuse_unk.
  j["model"]["byte_fallback"] = false;
  HfTokenizer u(write_tokenizer(dir, j));
  CHECK(encode(u, "aéé") == std::vector<int32_t>{4, 0});
}

// Whole texts merged word by word (cut before each run of U+2581) give the ids of whole-text
// merging, and where a token holds U+2581 inside, the cut is not made.
TEST_CASE("tokenizer.json: merging whole texts word by word", "[hf_tokenizer]") {
  TempDir dir;
  const std::string s = "\u2581";
  json vocab = {{"<unk>", 0}, {s, 1}, {"a", 2}, {"b", 3}, {s + "a", 4}, {s + s, 5}, {s + s + "a", 6}, {"a" + s, 7}};
  json j;
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", s}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"unk_token", "<unk>"},
                {"merges", json::array({json::array({s, "a"}), json::array({s, s}), json::array({s + s, "a"})})}};
  const std::string text = " a  a   ab a";
  HfTokenizer cut(write_tokenizer(dir, j));
  CHECK(encode(cut, text) == std::vector<int32_t>{4, 1, 4, 5, 4, 3, 4});
  // With "a\u2581" a token (its merge first), "a" + " " merges across the cut.
  j["model"]["merges"].insert(j["model"]["merges"].begin(), json::array({"a", s}));
  HfTokenizer whole(write_tokenizer(dir, j));
  CHECK(encode(whole, text) == std::vector<int32_t>{1, 7, 1, 7, 1, 4, 3, 4});
}

TEST_CASE("tokenizer.json: normalizers and pre-tokenizers of the other families", "[hf_tokenizer]") {
  TempDir dir;
  json j;
  j["model"] = {{"type", "WordLevel"}, {"vocab", {{"[UNK]", 0}, {"hello", 1}, {"!", 2}, {"cafe", 3}, {"1", 4}, {"2", 5}}},
                {"unk_token", "[UNK]"}};
  j["normalizer"] = {{"type", "BertNormalizer"}, {"lowercase", true}};
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({{{"type", "BertPreTokenizer"}},
                                                       {{"type", "Digits"}, {"individual_digits", true}}})}};
  HfTokenizer t(write_tokenizer(dir, j));
  CHECK(encode(t, "HELLO!\tCafé 12") == std::vector<int32_t>{1, 2, 3, 4, 5});
  // A Split with a regex, and Replace.
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "x"}}}, {"content", "hello"}};
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}};
  HfTokenizer u(write_tokenizer(dir, j));
  CHECK(encode(u, "x  ! cafe") == std::vector<int32_t>{1, 2, 3});
}

TEST_CASE("tokenizer.json: BertNormalizer, ASCII by table and the rest as a whole", "[hf_tokenizer]") {
  TempDir dir;
  json j;
  j["model"] = {{"type", "WordLevel"},
                {"vocab", {{"[UNK]", 0}, {"aeb", 1}, {"\u4e2d", 2}, {"\u00e9\u03c3x", 3}, {"\u00c9\u03a3x", 4}}},
                {"unk_token", "[UNK]"}};
  j["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  // Controls go, marks go with the accents stripped, CJK characters get spaces around them.
  j["normalizer"] = {{"type", "BertNormalizer"}, {"lowercase", true}};
  HfTokenizer t(write_tokenizer(dir, j));
  CHECK(encode(t, "A\x01" "e\u0301\u0316\x7f" "B\u4e2d") == std::vector<int32_t>{1, 2});
  // Without stripping: what surrounds a dropped control is lowercased as one text.
  j["normalizer"] = {{"type", "BertNormalizer"}, {"lowercase", true}, {"strip_accents", false}};
  HfTokenizer u(write_tokenizer(dir, j));
  CHECK(encode(u, "\u00c9\x01\u03a3X") == std::vector<int32_t>{3});
  j["normalizer"] = {{"type", "BertNormalizer"}, {"lowercase", false}, {"clean_text", true}};
  HfTokenizer v(write_tokenizer(dir, j));
  CHECK(encode(v, std::string("\x0b\u00c9\u03a3x\tA\x00" "E\u0301" "B", 13)) == std::vector<int32_t>{4, 0});
}

TEST_CASE("tokenizer.json: WordPiece, whole words and their subwords", "[hf_tokenizer]") {
  TempDir dir;
  json j;
  j["model"] = {{"type", "WordPiece"},
                {"vocab", {{"[UNK]", 0}, {"un", 1}, {"##aff", 2}, {"##able", 3}, {"unaffable", 4}, {"a", 5}}},
                {"unk_token", "[UNK]"},
                {"max_input_chars_per_word", 9}};
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  HfTokenizer t(write_tokenizer(dir, j));
  CHECK(encode(t, "unaffable unaff,a unx") == std::vector<int32_t>{4, 1, 2, 0, 5, 0});
  // A word over max_input_chars_per_word is unknown even where it is a token.
  j["model"]["max_input_chars_per_word"] = 8;
  HfTokenizer u(write_tokenizer(dir, j));
  CHECK(encode(u, "unaffable un") == std::vector<int32_t>{0, 1});
}

TEST_CASE("tokenizer.json: what meg does not read is refused, naming it", "[hf_tokenizer]") {
  json j = small_tokenizer();
  json bad = j;
  bad["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  CHECK_THAT(load_error(bad), ContainsSubstring("tokenizer.json: normalizer: normalizer type \"Precompiled\" is not supported"));
  bad = j;
  bad["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(?<=a)b"}}}, {"behavior", "Isolated"}};
  CHECK_THAT(load_error(bad), ContainsSubstring("tokenizer.json: pre_tokenizer.pattern: regex"));
  bad = j;
  bad["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({{{"type", "UnicodeScripts"}}})}};
  CHECK_THAT(load_error(bad), ContainsSubstring("pre_tokenizer.pretokenizers[0]: pre-tokenizer type \"UnicodeScripts\""));
  // A template's special token without "ids" (found by fuzzing: read through a missing key before).
  bad = j;
  bad["post_processor"]["special_tokens"]["<s>"].erase("ids");
  CHECK_THAT(load_error(bad), ContainsSubstring("special_tokens \"<s>\": \"ids\" must be an array"));
  bad = j;
  bad["model"]["type"] = "Unigram";
  CHECK_THAT(load_error(bad), ContainsSubstring("the Unigram model is not supported"));
  bad = j;
  bad["model"]["dropout"] = 0.1;
  CHECK_THAT(load_error(bad), ContainsSubstring("dropout"));
  bad = j;
  bad["model"]["merges"].push_back("a zz");
  CHECK_THAT(load_error(bad), ContainsSubstring("model: merges[3]: token \"zz\" is not in the vocabulary"));
  bad = j;
  bad["model"]["vocab"]["dup"] = 0;
  CHECK_THAT(load_error(bad), ContainsSubstring("vocab id 0 is given twice"));
  bad = j;
  bad["post_processor"] = {{"type", "Frobnicate"}};
  CHECK_THAT(load_error(bad), ContainsSubstring("post-processor type \"Frobnicate\" is not supported"));
  bad = j;
  bad["decoder"] = {{"type", "CTC"}};
  CHECK_THAT(load_error(bad), ContainsSubstring("decoder: decoder type \"CTC\" is not supported"));
  bad = j;
  bad.erase("model");
  CHECK_THAT(load_error(bad), ContainsSubstring("not a tokenizer.json (no \"model\")"));
  CHECK_THAT(load_error(json::array()), ContainsSubstring("not a tokenizer.json"));
  TempDir dir;
  write_file(dir.path("tokenizer.json"), "{\"model\": ");
  CHECK_THROWS_WITH(HfTokenizer(dir.path("tokenizer.json")), ContainsSubstring("tokenizer.json:1:"));
}
