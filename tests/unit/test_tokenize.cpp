// The tokenizing pipeline: order, bad documents, decoding; SentencePiece through the interface.
#include "catch.hpp"
#include "core/error.hpp"
#include "data/sentencepiece_tokenizer.hpp"
#include "data/tokenize.hpp"
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
  const std::string stress =
      "  leading spaces\tand tabs\n\nand  blank   lines  \u3000ideographic\u3000space, zero\u200bwidth, "
      "e\u0301 combining, \uff21\uff22 fullwidth, \u2460 circled, ｶﾀｶﾅ halfwidth, 😀👩‍👩‍👧 emoji, \u00a0nbsp, "
      "\r\ncrlf, trailing   ";
  // The Megatron reference model (BPE), and a unigram model trained here on the same text.
  std::vector<std::string> docs;
  {
    RecordReader reader(kFixture, DocumentFormat{});
    RecordBatch batch;
    std::string text, message;
    while (reader.next_batch(batch, 1 << 20))
      for (size_t i = 0; i < batch.records.size(); ++i)
        if (extract_document(batch, i, DocumentFormat{}, text, message) == RecordProblem::kNone) docs.push_back(text);
  }
  docs.push_back(stress);
  SentencePieceTrainOptions unigram;
  unigram.vocab_size = 800;
  unigram.model_type = "unigram";
  train_sentencepiece(docs, unigram, dir.path("unigram.model"));

  for (const std::string& model : {kData + "/megatron/fortunes_spm.model", dir.path("unigram.model")}) {
    const SentencePieceTokenizer spm(model);
    REQUIRE(spm.encodes_by_word());
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
