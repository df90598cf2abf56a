// The chunk database: chunking round trip (the chunks of a document, concatenated, are the
// document and its padding), the chunk table, document ranges, training chunks, and inputs.
#include <filesystem>

#include "catch.hpp"
#include "data/blend.hpp"
#include "retro/chunk_db.hpp"
#include "retro/inputs.hpp"
#include "retro/query_stage.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {

const std::string kSpm = std::string(MEG_TEST_DATA) + "/megatron/fortunes_spm";

// Documents of 0 to 40 tokens (an empty one, some exactly a chunk or two long).
std::vector<std::vector<int32_t>> documents(int count, int salt) {
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < count; ++d) docs.push_back(random_tokens(size_t((d * 7 + salt) % 41), 1000, uint32_t(d + salt)));
  return docs;
}

void write_dataset(const std::string& prefix, const std::vector<std::vector<int32_t>>& docs) {
  IndexedDatasetWriter w(prefix, TokenDtype::kUint16);
  for (const auto& d : docs) w.add_document(d);
  w.finish();
}

}  // namespace

TEST_CASE("retro: chunks of every document concatenate back to it, padded", "[retro]") {
  TempDir dir;
  const auto docs_a = documents(30, 1), docs_b = documents(12, 5);
  write_dataset(dir.path("a"), docs_a);
  write_dataset(dir.path("b"), docs_b);
  const IndexedDataset a(dir.path("a")), b(dir.path("b"));
  constexpr uint32_t kLength = 8;
  constexpr int32_t kPad = 999;
  std::filesystem::create_directories(dir.path("db"));
  const ChunkDbStats stats = build_chunk_db({&a, &b}, kLength, kPad, dir.path("db"), 77);
  const ChunkDb db(dir.path("db"));
  CHECK(db.size() == stats.chunks);
  CHECK(db.chunk_length() == kLength);
  CHECK(db.fingerprint() == 77);
  CHECK(stats.documents == a.num_sequences() + b.num_sequences());

  // Walk the chunks: each document, in order, every chunk full but the last.
  std::vector<int32_t> tokens(kLength);
  uint32_t length = 0;
  uint64_t chunk = 0, expected_tokens = 0;
  const std::vector<const std::vector<std::vector<int32_t>>*> inputs = {&docs_a, &docs_b};
  for (size_t k = 0; k < inputs.size(); ++k) {
    size_t sequence = 0;
    for (const auto& doc : *inputs[k]) {
      if (doc.empty()) continue;  // no sequence in the .idx, no chunk
      expected_tokens += doc.size();
      std::vector<int32_t> joined;
      const uint64_t first = chunk;
      for (size_t begin = 0; begin < doc.size(); begin += kLength, ++chunk) {
        const ChunkInfo c = db.info(chunk);
        CHECK(c.input == int64_t(k));
        CHECK(c.document == int64_t(sequence));
        CHECK(c.begin == int64_t(begin));
        CHECK(c.end == int64_t(std::min(doc.size(), begin + kLength)));
        CHECK(db.document_chunks(chunk).begin == int64_t(first));
        db.read(chunk, 1, tokens.data(), &length);
        CHECK(length == c.end - c.begin);
        joined.insert(joined.end(), tokens.begin(), tokens.end());
      }
      for (uint64_t c = first; c < chunk; ++c) CHECK(db.document_chunks(c).end == int64_t(chunk));
      // Looked up by document, as the query stage leaves a sample's documents out.
      const IdRange by_document = db.document_chunks(int64_t(k), int64_t(sequence));
      CHECK((by_document.begin == int64_t(first) && by_document.end == int64_t(chunk)));
      std::vector<int32_t> padded = doc;
      padded.resize((doc.size() + kLength - 1) / kLength * kLength, kPad);
      CHECK(joined == padded);
      ++sequence;
    }
  }
  CHECK(chunk == db.size());
  const IdRange past_the_end = db.document_chunks(1, int64_t(b.num_sequences()));
  CHECK((past_the_end.begin == int64_t(db.size()) && past_the_end.end == int64_t(db.size())));
  CHECK(stats.tokens == expected_tokens);

  // The train documents pick their chunks, input by input.
  const std::vector<int64_t> rows = training_chunks(db, {{2, 5}, {0, 1}});
  REQUIRE_FALSE(rows.empty());
  for (int64_t r : rows) {
    const ChunkInfo c = db.info(uint64_t(r));
    CHECK((c.input == 0 ? c.document >= 2 && c.document < 5 : c.document == 0));
  }
  CHECK(std::is_sorted(rows.begin(), rows.end()));

  CHECK_THAT(input_error_of([&] { build_chunk_db({&a}, kLength, 70000, dir.path("db"), 0); }),
             ContainsSubstring("--pad-id 70000: not a token of the inputs' dtype uint16"));
}

TEST_CASE("retro: a damaged chunk table is refused", "[retro]") {
  TempDir dir;
  write_dataset(dir.path("a"), documents(10, 3));
  const IndexedDataset a(dir.path("a"));
  std::filesystem::create_directories(dir.path("db"));
  build_chunk_db({&a}, 4, 0, dir.path("db"), 1);
  // Rewrite the table with one chunk moved into the wrong document.
  std::vector<int64_t> table;
  {
    const MatrixFile m(dir.path("db/chunks.mat"), MatrixDtype::kI64);
    table.assign(m.data<int64_t>().begin(), m.data<int64_t>().end());
  }
  table[4 * 3 + 1] += 5;
  write_matrix<int64_t>(dir.path("db/chunks.mat"), table.size() / 4, 4, table, 1);
  CHECK_THAT(input_error_of([&] { ChunkDb db(dir.path("db")); }), ContainsSubstring("row 3 "));
}

TEST_CASE("retro: inputs are prefixes split as meg-blend splits them, or a blend's", "[retro]") {
  const RetroInputs in = open_inputs({kSpm}, "");
  REQUIRE(in.datasets.size() == 1);
  const auto expected = split_ranges(parse_split("969,30,1"), in.datasets[0].num_sequences())[0];
  CHECK(in.train[0].begin == expected.begin);
  CHECK(in.train[0].end == expected.end);
  CHECK(open_inputs({kSpm}, "1,1,0").train[0].end ==
        split_ranges(parse_split("1,1,0"), in.datasets[0].num_sequences())[0].end);

  TempDir dir;
  BlendOptions o;
  o.seq_length = 32;
  o.samples[0] = 100;
  o.split = "80,20,0";
  build_blend({{1.0, kSpm}}, o, dir.path("x.blend"));
  const RetroInputs blended = open_inputs({dir.path("x.blend")}, "");
  CHECK(blended.train[0].end == split_ranges(parse_split("80,20,0"), in.datasets[0].num_sequences())[0].end);
  CHECK_THAT(input_error_of([&] { open_inputs({dir.path("x.blend")}, "1,0,0"); }),
             ContainsSubstring("is a blend, which has its own split"));

  // An empty input; inputs of different dtypes.
  write_dataset(dir.path("empty"), {{}});
  CHECK_THAT(input_error_of([&] { open_inputs({kSpm, dir.path("empty")}, ""); }),
             ContainsSubstring("no tokens (an empty input)"));
  IndexedDatasetWriter w(dir.path("wide"), TokenDtype::kInt32);
  w.add_document(std::vector<int32_t>{1, 2, 3});
  w.finish();
  CHECK_THAT(input_error_of([&] { open_inputs({kSpm, dir.path("wide")}, ""); }),
             ContainsSubstring("the inputs come from different tokenizers"));
  write_file(dir.path("text"), "hello");
  CHECK_THAT(input_error_of([&] { open_inputs({dir.path("text")}, ""); }),
             ContainsSubstring("neither a blend file nor an indexed dataset prefix"));
}
