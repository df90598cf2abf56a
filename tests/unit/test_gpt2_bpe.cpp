// GPT-2 byte-level BPE: the same ids as the reference encoder on varied text and as Megatron-LM's
// datasets, round trips, bad vocabulary files, and encoding from many threads at once.
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "tokenizer/gpt2_bpe.hpp"
#include "data/indexed_dataset.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {
const std::string kData = MEG_TEST_DATA;
const std::string kVocab = kData + "/gpt2/vocab.json";
const std::string kMerges = kData + "/gpt2/merges.txt";

const Gpt2BpeTokenizer& gpt2() {
  static const Gpt2BpeTokenizer tokenizer(kVocab, kMerges);
  return tokenizer;
}

std::vector<int32_t> encode(const Tokenizer& t, std::string_view text) {
  std::vector<int32_t> ids;
  t.encode(text, ids);
  return ids;
}

struct Sample {
  std::string text;
  std::vector<int32_t> ids;
};

// tests/data/gpt2/parity.jsonl: texts with the ids of the reference encoder (scripts/gen-gpt2-parity.js).
const std::vector<Sample>& parity_samples() {
  static const std::vector<Sample> samples = [] {
    std::vector<Sample> out;
    std::ifstream in(kData + "/gpt2/parity.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      out.push_back({j.at("text").get<std::string>(), j.at("ids").get<std::vector<int32_t>>()});
    }
    return out;
  }();
  return samples;
}

}  // namespace

TEST_CASE("GPT-2 vocabulary, end of document and identity", "[gpt2]") {
  const auto& t = gpt2();
  CHECK(t.vocab_size() == 50257);
  CHECK(t.eod_id() == 50256);
  CHECK(t.describe() == "GPT-2 BPE, vocab 50257 (vocab.json)");
  Hasher h;
  h.update(read_file(kVocab));
  h.update(read_file(kMerges));
  CHECK(t.fingerprint() == h.digest());
  CHECK(load_tokenizer(kVocab, kMerges)->describe() == t.describe());
}

TEST_CASE("GPT-2 known encodings", "[gpt2]") {
  const auto& t = gpt2();
  CHECK(encode(t, "Hello world") == std::vector<int32_t>{15496, 995});
  CHECK(encode(t, "").empty());
  // Special tokens in the text are text, as in the reference.
  CHECK(encode(t, "<|endoftext|>") == std::vector<int32_t>{27, 91, 437, 1659, 5239, 91, 29});
  CHECK(encode(t, "I'll've been there") == std::vector<int32_t>{40, 1183, 1053, 587, 612});
  CHECK(encode(t, "  two spaces\n\nand\ttab") == std::vector<int32_t>{220, 734, 9029, 198, 198, 392, 197, 8658});
  CHECK(encode(t, "東京 😀") == std::vector<int32_t>{30266, 109, 12859, 105, 30325, 222});
  std::vector<int32_t> out{7};  // encode() appends
  t.encode("Hello world", out);
  CHECK(out == std::vector<int32_t>{7, 15496, 995});
}

TEST_CASE("GPT-2 whitespace is Unicode White_Space, as in GPT-2's encoder.py", "[gpt2]") {
  // U+0085 is whitespace there (a run of its own before a word), U+FEFF is not (it joins the
  // punctuation-like run " \ufeff"); JavaScript's \s, in the npm port, has it the other way round.
  const auto& t = gpt2();
  const auto concat = [&](std::initializer_list<const char*> parts) {
    std::vector<int32_t> ids;
    for (const char* p : parts) t.encode(p, ids);
    return ids;
  };
  CHECK(encode(t, "a \u0085b") == concat({"a", " ", "\u0085", "b"}));
  CHECK(encode(t, "x \ufeffy") == concat({"x", " \ufeff", "y"}));
}

TEST_CASE("GPT-2 BPE gives the reference encoder's ids on every parity text", "[gpt2]") {
  const auto& samples = parity_samples();
  REQUIRE(samples.size() > 500);
  size_t mismatches = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto ids = encode(gpt2(), samples[i].text);
    if (ids != samples[i].ids && ++mismatches <= 5) {
      INFO("parity.jsonl line " << i + 1 << ": " << nlohmann::json(samples[i].text).dump());
      CHECK(ids == samples[i].ids);
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("GPT-2 decode inverts encode", "[gpt2]") {
  const auto& t = gpt2();
  for (const auto& s : parity_samples()) {
    CHECK(t.decode(encode(t, s.text)) == s.text);
    CHECK(t.decode(s.ids) == s.text);
  }
  // Bytes that are not UTF-8 still go through, one byte-level token at a time.
  const std::string bad = "caf\xc3 \xff\xfe ok \xe6\x9d";
  CHECK(t.decode(encode(t, bad)) == bad);

  const std::vector<int32_t> out_of_range{15496, 50257};
  CHECK_THAT(input_error_of([&] { t.decode(out_of_range); }), ContainsSubstring("token 50257 at position 1"));
  const std::vector<int32_t> negative{-1};
  CHECK_THAT(input_error_of([&] { t.decode(negative); }), ContainsSubstring("token -1 at position 0"));
}

TEST_CASE("GPT-2 BPE gives Megatron-LM's ids on the fortunes fixture", "[gpt2]") {
  // fortunes_gpt2.bin/.idx: Megatron's preprocess_data.py with GPT2BPETokenizer and --append-eod.
  const IndexedDataset megatron(kData + "/megatron/fortunes_gpt2");
  std::ifstream in(kData + "/megatron/fortunes_fixture.jsonl");
  size_t doc = 0;
  for (std::string line; std::getline(in, line); ++doc) {
    REQUIRE(doc < megatron.num_documents());
    auto ids = encode(gpt2(), nlohmann::json::parse(line).at("text").get<std::string>());
    ids.push_back(50256);
    INFO("document " << doc);
    CHECK(ids == megatron.document(doc).to_vector());
  }
  CHECK(doc == 605);
  CHECK(doc == megatron.num_documents());
}

TEST_CASE("GPT-2 encodes the same from many threads at once", "[gpt2]") {
  const Gpt2BpeTokenizer t(kVocab, kMerges);  // fresh: every thread starts with a cold cache
  const auto& samples = parity_samples();
  std::vector<size_t> wrong(4);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < wrong.size(); ++k) {
    threads.emplace_back([&, k] {
      for (int round = 0; round < 3; ++round)
        for (size_t i = 0; i < samples.size(); ++i) {
          const auto& s = samples[(i * (k + 1) + round) % samples.size()];  // a different order per thread
          if (encode(t, s.text) != s.ids) ++wrong[k];
        }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(wrong == std::vector<size_t>(4, 0));
}

TEST_CASE("GPT-2 bad vocabulary and merges files are input errors", "[gpt2]") {
  TempDir dir;
  const std::string vocab = dir.path("vocab.json"), merges = dir.path("merges.txt");
  const auto error = [&](const std::string& vocab_text, const std::string& merges_text) {
    write_file(vocab, vocab_text);
    write_file(merges, merges_text);
    return input_error_of([&] { Gpt2BpeTokenizer(vocab, merges); });
  };
  const std::string good_vocab = read_file(kVocab), good_merges = read_file(kMerges);
  write_file(vocab, good_vocab);  // the copies themselves load: what fails below is the edit
  write_file(merges, good_merges);
  REQUIRE_NOTHROW(Gpt2BpeTokenizer(vocab, merges));

  CHECK_THAT(input_error_of([&] { Gpt2BpeTokenizer(dir.path("none.json"), kMerges); }),
             ContainsSubstring("none.json"));
  CHECK_THAT(input_error_of([&] { Gpt2BpeTokenizer(kVocab, dir.path("none.txt")); }), ContainsSubstring("none.txt"));
  CHECK_THAT(error("{\"a\": 0,\n\"b\": 1,\n", good_merges),
             ContainsSubstring("vocab.json:3:1: not valid JSON") && ContainsSubstring("unexpected end of input"));
  CHECK_THAT(error("[1, 2]", good_merges), ContainsSubstring("vocab.json: expected a JSON object"));
  CHECK_THAT(error("{\"a\": \"zero\"}", good_merges), ContainsSubstring("token \"a\" has id \"zero\""));
  CHECK_THAT(error("{\"a\": 1}", good_merges), ContainsSubstring("token \"a\" has id 1; ids must run from 0 to 0"));

  auto v = nlohmann::json::parse(good_vocab);
  v.erase("<|endoftext|>");
  CHECK_THAT(error(v.dump(), good_merges), ContainsSubstring("vocab.json: no <|endoftext|> token"));
  v = nlohmann::json::parse(good_vocab);
  v["Ġt"] = 0;  // now two tokens share id 0 and none has 262
  CHECK_THAT(error(v.dump(), good_merges), ContainsSubstring("vocab.json: two tokens have id 0"));
  v = nlohmann::json::parse(good_vocab);
  v["renamed \xe2\x98\x83"] = v["Ċ"];  // no token left for byte '\n' (written "Ċ")
  v.erase("Ċ");
  CHECK_THAT(error(v.dump(), good_merges), ContainsSubstring("no token for byte 0x0a"));

  CHECK_THAT(error(good_vocab, "#version: 0.2\nĠ t\nĠt\n"),
             ContainsSubstring("merges.txt:3: expected two tokens separated by one space, got 'Ġt'"));
  CHECK_THAT(error(good_vocab, "#version: 0.2\nĠ t h\n"), ContainsSubstring("merges.txt:2: expected two tokens"));
  CHECK_THAT(error(good_vocab, "#version: 0.2\nĠ t\n\xe2\x98\x83 x\n"),
             ContainsSubstring("merges.txt:3: token '\xe2\x98\x83' is not in ") && ContainsSubstring("vocab.json"));
  // Every merge makes a token of the vocabulary.
  CHECK_THAT(error(good_vocab, "#version: 0.2\nz q\n"), ContainsSubstring("merges.txt:2: token 'zq' is not in"));
}
