// The tokenizing pipeline: order, bad documents, decoding; SentencePiece through the interface,
// word by word and with its native BPE path, against the library.
#include <algorithm>
#include <random>
#include <set>
#include <tuple>

#include "catch.hpp"
#include "core/error.hpp"
#include "tokenizer/sentencepiece_tokenizer.hpp"
#include "data/tokenize.hpp"
#include "spm_proto.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {
const std::string kData = MEG_TEST_DATA;
const std::string kFixture = kData + "/megatron/fortunes_fixture.jsonl";

std::vector<std::vector<int32_t>> tokenize_to_documents(const TokenizeOptions& options, const Tokenizer& tok,
                                                        const std::vector<std::string>& inputs, TempDir& dir) {
  const std::string path = dir.path("out.tok");
  {
    ByteWriter out(path);
    TokenStreamWriter w(out, TokenStreamHeader::for_vocab(tok.vocab_size(), tok.eod_id(), tok.fingerprint()));
    tokenize_inputs(inputs, tok, options, w);
    w.finish();
    out.commit();
  }
  TokenStreamReader r(path);
  std::vector<std::vector<int32_t>> docs;
  std::vector<int32_t> d;
  while (r.next(d)) docs.push_back(d);
  return docs;
}

std::vector<std::string> fixture_documents() {
  std::vector<std::string> docs;
  RecordReader reader(kFixture, DocumentFormat{});
  RecordBatch batch;
  std::string text, message;
  while (reader.next_batch(batch, 1 << 20))
    for (size_t i = 0; i < batch.records.size(); ++i)
      if (extract_document(batch, i, DocumentFormat{}, text, message) == RecordProblem::kNone) docs.push_back(text);
  return docs;
}

std::vector<std::string> words_of(const std::vector<std::string>& docs) {
  std::vector<std::string> words;
  for (const auto& doc : docs) {
    size_t start = 0;
    while (start < doc.size()) {
      const size_t end = std::min(doc.find_first_of(" \t\r\n", start), doc.size());
      if (end > start) words.push_back(doc.substr(start, end - start));
      start = end + 1;
    }
  }
  return words;
}

// A BPE model with a larger vocabulary than Megatron's, and byte pieces in it, trained once.
const std::string& trained_bpe_model() {
  static TempDir dir;
  static const std::string path = [] {
    SentencePieceTrainOptions bpe;
    bpe.vocab_size = 4000;
    bpe.character_coverage = 1.0;
    bpe.extra = "--byte_fallback=true";
    train_sentencepiece(fixture_documents(), bpe, dir.path("bpe4000.model"));
    return dir.path("bpe4000.model");
  }();
  return path;
}

// Checks the native BPE path against the library on each word; returns the words it declined.
std::set<std::string> check_native_bpe(const SentencePieceTokenizer& spm, const std::vector<std::string>& words) {
  std::set<std::string> declined, wrong;
  for (const auto& word : words) {
    std::vector<int32_t> native, library;
    spm.encode_whole(word, library);
    if (!spm.encode_word_bpe(word, native)) {
      if (!native.empty()) wrong.insert(word);
      declined.insert(word);
    } else if (native != library) {
      wrong.insert(word);
    }
  }
  CHECK(wrong == std::set<std::string>{});
  return declined;
}

}  // namespace

TEST_CASE("Output order does not depend on workers or batch size", "[tokenize]") {
  TempDir dir;
  const SentencePieceTokenizer spm(kData + "/megatron/fortunes_spm.model");
  TokenizeOptions one;
  one.append_eod = true;
  const auto expected = tokenize_to_documents(one, spm, {kFixture}, dir);
  REQUIRE(expected.size() == 605);
  CHECK(expected[0].back() == spm.eod_id());
  for (unsigned workers : {2u, 5u}) {
    TokenizeOptions many = one;
    many.workers = workers;
    many.batch_bytes = 300;  // hundreds of batches in flight
    CHECK(tokenize_to_documents(many, spm, {kFixture, kFixture}, dir).size() == 1210);
    CHECK(tokenize_to_documents(many, spm, {kFixture}, dir) == expected);
  }
}

TEST_CASE("The first bad document in input order is the one reported", "[tokenize]") {
  TempDir dir;
  const SentencePieceTokenizer spm(kData + "/megatron/fortunes_spm.model");
  std::string text;
  for (int i = 0; i < 300; ++i) text += "{\"text\": \"document number " + std::to_string(i) + "\"}\n";
  text += "{\"text\": 1}\n{\"nope\": 2}\n";
  write_file(dir.path("bad.jsonl"), text);
  TokenizeOptions options;
  options.workers = 4;
  options.batch_bytes = 64;
  CHECK_THROWS_WITH(tokenize_to_documents(options, spm, {dir.path("bad.jsonl")}, dir),
                    ContainsSubstring("bad.jsonl:301: \"text\" is a number"));
  options.skip_bad = true;
  CHECK(tokenize_to_documents(options, spm, {dir.path("bad.jsonl")}, dir).size() == 300);
}

TEST_CASE("SentencePiece encodes and decodes through the interface", "[tokenize]") {
  const SentencePieceTokenizer spm(kData + "/megatron/fortunes_spm.model");
  CHECK(spm.vocab_size() == 2000);
  CHECK(spm.eod_id() == 2);
  std::vector<int32_t> ids;
  spm.encode("The quick brown fox.", ids);
  CHECK_FALSE(ids.empty());
  CHECK(spm.decode(ids) == "The quick brown fox.");
  const std::vector<int32_t> bad{5, 2000};
  CHECK_THROWS_WITH(spm.decode(bad), ContainsSubstring("token 2000 at position 1"));
  CHECK_THROWS_WITH(SentencePieceTokenizer(kFixture), ContainsSubstring("not a SentencePiece model"));
}

TEST_CASE("SentencePiece word-by-word encoding equals the library's whole-text encoding", "[tokenize]") {
  TempDir dir;
  const char* stress =
      "  leading spaces\tand tabs\n\nand  blank   lines  \u3000ideographic\u3000space, zero\u200bwidth, "
      "e\u0301 combining, \uff21\uff22 fullwidth, \u2460 circled, ｶﾀｶﾅ halfwidth, 😀👩‍👩‍👧 emoji, \u00a0nbsp, "
      "\r\ncrlf, trailing   ";
  // The Megatron reference model (BPE, runs of spaces folded), a larger BPE model, a unigram model
  // and a BPE model with a user-defined piece trained on the same text (meg's defaults: spaces
  // kept); the BPE models but the last take the native path on cache misses. Unigram models take
  // the library's path: where two segmentations of a word tie, the text before the word decides.
  std::vector<std::string> docs = fixture_documents();
  for (const char* edge : {stress, " ", "  ", "x ", " x", "x  ", "  x  y   z ", "\t x\n  \n", "1000 $1000 a1000"})
    docs.push_back(edge);
  SentencePieceTrainOptions unigram;
  unigram.vocab_size = 800;
  unigram.model_type = "unigram";
  train_sentencepiece(docs, unigram, dir.path("unigram.model"));
  SentencePieceTrainOptions user_defined;
  user_defined.vocab_size = 800;
  user_defined.extra = "--user_defined_symbols=quick";
  train_sentencepiece(docs, user_defined, dir.path("user.model"));

  const std::string megatron = kData + "/megatron/fortunes_spm.model";
  for (const std::string& model : {megatron, trained_bpe_model(), dir.path("unigram.model"), dir.path("user.model")}) {
    const SentencePieceTokenizer spm(model);
    REQUIRE(spm.encodes_by_word() == (model != dir.path("unigram.model")));
    CHECK(spm.has_native_bpe() == (model == megatron || model == trained_bpe_model()));
    for (int pass = 0; pass < 2; ++pass) {  // the second pass answers from the cache
      for (const auto& doc : docs) {
        std::vector<int32_t> by_word, whole;
        spm.encode(doc, by_word);
        spm.encode_whole(doc, whole);
        REQUIRE(by_word == whole);
      }
    }
  }
}

TEST_CASE("SentencePiece native BPE equals the library on every word it takes", "[tokenize]") {
  std::vector<std::string> words = words_of(fixture_documents());
  const std::vector<std::string> tricky = {
      "--", "---", "...", "....", "!!!", "?!?", ":-)", "^_^", "'s", "n't", "don't", "U.S.A.", "e.g.,", "(see",
      "below).", "[1]", "{}", "<s>", "</s>", "<unk>", "<0x41>", "0", "7", "42", "1999", "3.14159", "1,000,000",
      "$100", "100%", "#1", "2+2=4", "aaaaaaaaaaaa", "eeeeeeeee", "the", "The", "THE", "tHE", "thethethe",
      "http://example.com/a/b?x=1&y=2", "snake_case", "CamelCaseWord", "~/.bashrc", "a~b", "`code`", "a@b",
      "x|y", std::string(64, '!'), std::string(200, 'a'), "antidisestablishmentarianism"};
  words.insert(words.end(), tricky.begin(), tricky.end());
  for (char c = 0x21; c <= 0x7e; ++c) words.emplace_back(1, c);

  const SentencePieceTokenizer megatron(kData + "/megatron/fortunes_spm.model");
  const SentencePieceTokenizer trained(trained_bpe_model());
  for (const SentencePieceTokenizer* spm : {&megatron, &trained}) {
    REQUIRE(spm->has_native_bpe());
    const std::set<std::string> declined = check_native_bpe(*spm, words);
    // Declined: words beyond printable ASCII, and those with a character that has no piece.
    std::string no_piece;
    for (char c = 0x21; c <= 0x7e; ++c)
      if (declined.contains(std::string(1, c))) no_piece += c;
    for (const auto& word : words) {
      const bool ascii = std::all_of(word.begin(), word.end(), [](char c) { return c >= 0x21 && c <= 0x7e; });
      INFO(word);
      CHECK(declined.contains(word) == (!ascii || word.find_first_of(no_piece) != std::string::npos));
    }
  }
  // The Megatron model has no piece for '@' or '|': the library gives <unk> there.
  std::vector<int32_t> ids;
  CHECK_FALSE(megatron.encode_word_bpe("a@b", ids));
  CHECK(ids.empty());
}

TEST_CASE("SentencePiece native BPE equals the library on random words", "[tokenize]") {
  // Uniformly random characters, and splices of the fixture's words, which merge deeper.
  std::vector<std::string> ascii_words;
  for (const auto& w : words_of(fixture_documents()))
    if (std::all_of(w.begin(), w.end(), [](char c) { return c >= 0x21 && c <= 0x7e; })) ascii_words.push_back(w);
  std::mt19937 rng(7);
  std::vector<std::string> words;
  for (int i = 0; i < 20000; ++i) {
    const size_t length = 1 + rng() % 30;
    std::string w;
    while (w.size() < length) {
      if (i % 2 == 0) {
        w += static_cast<char>(0x21 + rng() % 94);
      } else {
        const std::string& from = ascii_words[rng() % ascii_words.size()];
        const size_t at = rng() % from.size();
        w += from.substr(at, 1 + rng() % (from.size() - at));
      }
    }
    words.push_back(w.substr(0, length));
  }
  for (const std::string& model : {kData + "/megatron/fortunes_spm.model", trained_bpe_model()}) {
    const SentencePieceTokenizer spm(model);
    REQUIRE(spm.has_native_bpe());
    CHECK(check_native_bpe(spm, words).size() < words.size() / 2);
  }
}

TEST_CASE("SentencePiece native BPE breaks ties leftmost and leaves unused pieces to the library", "[tokenize]") {
  // Pieces of equal scores that overlap ("ab", "bc", "ca"), and an UNUSED piece ("cd") that the
  // library splits back unless it merges on into "cda".
  enum { kNormal = 1, kUnknown = 2, kControl = 3, kUnused = 5 };
  std::string pieces = proto_piece("<unk>", 0, kUnknown) + proto_piece("<s>", 0, kControl) +
                       proto_piece("</s>", 0, kControl);
  for (const auto& [text, score, type] : std::vector<std::tuple<std::string, float, int>>{
           {"ab", -1, kNormal}, {"bc", -1, kNormal}, {"ca", -1, kNormal}, {"bb", -1, kNormal},
           {"\u2581a", -1, kNormal}, {"\u2581ab", -1.5, kNormal}, {"abc", -2, kNormal}, {"cd", 0, kUnused},
           {"cda", -3, kNormal}, {"\u2581", -9, kNormal}, {"a", -9, kNormal}, {"b", -9, kNormal},
           {"c", -9, kNormal}, {"d", -9, kNormal}})
    pieces += proto_piece(text, score, type);
  TempDir dir;
  write_file(dir.path("ties.model"), pieces + proto_bytes(2, proto_varint(3 << 3) + proto_varint(2)) +
                                         proto_bytes(3, proto_bytes(1, "identity")));
  const SentencePieceTokenizer spm(dir.path("ties.model"));
  REQUIRE(spm.has_native_bpe());

  std::mt19937 rng(11);
  std::vector<std::string> words = {"cd", "cda"};
  for (int i = 0; i < 3000; ++i) {
    std::string w(1 + rng() % 12, 'a');
    for (char& c : w) c = static_cast<char>('a' + rng() % 4);
    words.push_back(w);
  }
  const std::set<std::string> declined = check_native_bpe(spm, words);
  CHECK(declined.contains("cd"));
  CHECK_FALSE(declined.contains("cda"));
  CHECK(declined.size() < words.size() / 2);
}
