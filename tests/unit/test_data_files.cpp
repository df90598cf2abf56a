// Token streams, indexed datasets and document reading, on small files written here.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "catch.hpp"
#include "core/error.hpp"
#include "data/dataset_tools.hpp"
#include "data/document_reader.hpp"
#include "data/indexed_dataset.hpp"
#include "data/token_stream.hpp"
#include "tokenizer/tokenizer.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {
std::vector<std::vector<int32_t>> sample_documents(int32_t vocab) {
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < 50; ++d) {
    std::vector<int32_t> doc;
    for (int t = 0; t < (d * 7) % 23 + 1; ++t) doc.push_back((d * 131 + t * 17) % vocab);
    docs.push_back(doc);
  }
  return docs;
}

void write_stream(const std::string& path, const std::vector<std::vector<int32_t>>& docs, uint32_t vocab) {
  ByteWriter out(path);
  TokenStreamWriter w(out, TokenStreamHeader::for_vocab(vocab, 0, 1234));
  for (const auto& d : docs) w.write_document(d);
  w.finish();
  out.commit();
}
}  // namespace

TEST_CASE("Token streams round-trip at both token widths", "[data]") {
  TempDir dir;
  for (uint32_t vocab : {50257u, 200000u}) {
    const auto docs = sample_documents(static_cast<int32_t>(vocab));
    write_stream(dir.path("s"), docs, vocab);
    TokenStreamReader r(dir.path("s"));
    CHECK(r.header().token_bytes == (vocab <= 65536 ? 2 : 4));
    std::vector<int32_t> doc;
    size_t i = 0;
    while (r.next(doc)) CHECK(doc == docs.at(i++));
    CHECK(i == docs.size());
  }
}

TEST_CASE("Token stream readers refuse what is not whole", "[data]") {
  TempDir dir;
  const auto docs = sample_documents(1000);
  write_stream(dir.path("s"), docs, 1000);
  const std::string whole = read_file(dir.path("s"));
  std::vector<int32_t> doc;
  auto drain = [&](const std::string& bytes) {
    write_file(dir.path("bad"), bytes);
    TokenStreamReader r(dir.path("bad"));
    while (r.next(doc)) {
    }
  };
  CHECK_NOTHROW(drain(whole));
  CHECK_NOTHROW(drain(whole + whole));  // concatenated streams are one stream
  CHECK_THROWS_WITH(drain(whole.substr(0, whole.size() - 1)), ContainsSubstring("truncated"));
  CHECK_THROWS_WITH(drain(whole.substr(0, whole.size() - 20)), ContainsSubstring("truncated"));
  std::string bad_count = whole;
  bad_count[bad_count.size() - 16] ^= 1;  // trailer's document count
  CHECK_THROWS_WITH(drain(bad_count), ContainsSubstring("trailer counts"));
  std::string out_of_vocab = whole;
  out_of_vocab[32 + 4] = char(0xff), out_of_vocab[32 + 5] = char(0xff);  // first token of document 0
  CHECK_THROWS_WITH(drain(out_of_vocab), ContainsSubstring("offset 36: token 65535 is outside the vocabulary"));
}

TEST_CASE("A document length the stream cannot hold fails at its end, not in an allocation", "[data]") {
  TempDir dir;
  write_stream(dir.path("s"), sample_documents(1000), 1000);
  // The header of a valid stream, then a document that says 0xFFFFFFF0 tokens and holds five.
  std::string big = read_file(dir.path("s")).substr(0, 32) + std::string("\xf0\xff\xff\xff", 4);
  for (int i = 0; i < 5; ++i) big += std::string("\x01\x00", 2);
  std::vector<int32_t> doc;
  auto drain = [&](const std::string& path) {
    TokenStreamReader r(path);
    while (r.next(doc)) {
    }
  };
  write_file(dir.path("big.tok"), big);
  CHECK_THROWS_WITH(drain(dir.path("big.tok")), ContainsSubstring("offset 32: token stream ends inside a document"));
  {
    ByteWriter z(dir.path("big.tok.zst"), 3);  // compressed: the reader cannot know the size up front
    z.write(big.data(), big.size());
    z.commit();
  }
  CHECK_THROWS_WITH(drain(dir.path("big.tok.zst")), ContainsSubstring("offset 32: token stream ends inside a document"));
}

TEST_CASE("Counted reads from streams of unknown size grow as the bytes arrive", "[data]") {
  TempDir dir;
  std::vector<uint8_t> data(3 * 1024 * 1024 + 17);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 2654435761u >> 24);
  {
    ByteWriter z(dir.path("d.zst"), 1);
    z.write(data.data(), data.size());
    z.commit();
  }
  ByteReader in(dir.path("d.zst"));
  std::vector<uint8_t> buf;
  REQUIRE(in.read_counted(buf, data.size() - 5));
  CHECK(std::equal(buf.begin(), buf.end(), data.begin()));
  CHECK_FALSE(in.read_counted(buf, 6));  // five bytes are left
  CHECK(buf.size() == 5);
}

TEST_CASE("Indexed datasets round-trip, empty documents included", "[data]") {
  TempDir dir;
  auto docs = sample_documents(60000);
  docs.insert(docs.begin() + 3, std::vector<int32_t>{});  // Megatron: a document with no sequence
  for (TokenDtype dtype : {TokenDtype::kUint16, TokenDtype::kInt32}) {
    IndexedDatasetWriter w(dir.path("d"), dtype);
    for (const auto& d : docs) w.add_document(d);
    w.finish();
    IndexedDataset ds(dir.path("d"));
    REQUIRE(ds.num_documents() == docs.size());
    CHECK(ds.num_sequences() == docs.size() - 1);
    CHECK(ds.dtype() == dtype);
    for (size_t i = 0; i < docs.size(); ++i) {
      CHECK(ds.document(i).to_vector() == docs[i]);
      CHECK(ds.document_length(i) == docs[i].size());
    }
    CHECK_NOTHROW(ds.verify(60000));
    CHECK_THROWS_AS(ds.verify(100), InputError);
  }
}

TEST_CASE("Opening an indexed dataset checks its structure; verify() checks its tokens", "[data]") {
  TempDir dir;
  {
    IndexedDatasetWriter w(dir.path("d"), TokenDtype::kInt32);
    w.add_document(std::vector<int32_t>{1, 2, 3});
    w.add_document(std::vector<int32_t>{4, -5});
    w.finish();
  }
  const std::string idx = read_file(dir.path("d.idx"));
  CHECK_NOTHROW(IndexedDataset(dir.path("d")));
  CHECK_THROWS_WITH(IndexedDataset(dir.path("d")).verify(), ContainsSubstring("d.bin: offset 16: negative token -5"));
  // S = 2 sequences: lengths at 34, pointers at 42, document indices at 58.
  const auto refused = [&](size_t offset, int64_t value, size_t bytes, const std::string& message) {
    std::string bad = idx;
    std::memcpy(bad.data() + offset, &value, bytes);
    write_file(dir.path("d.idx"), bad);
    CHECK_THROWS_WITH(IndexedDataset(dir.path("d")), ContainsSubstring("d.idx: offset " + message));
  };
  refused(34, -1, 4, "34: sequence 0: negative length -1");
  refused(34, 4, 4, "50: sequence 1 starts at byte 12 but sequence 0 ends at byte 16");
  refused(42, 4, 8, "42: sequence 0 starts at byte 4, not 0");
  refused(58, 1, 8, "58: document index 0 is 1, not 0");
  refused(66, 3, 8, "66: document index 1 is 3, past the sequence count 2");
  refused(66, -1, 8, "66: document index 1 is -1, below the one before it (0)");
  refused(74, 1, 8, "74: the last document index is 1 but there are 2 sequences");
  std::string floats = idx;
  floats[17] = char(TokenDtype::kFloat32);
  write_file(dir.path("d.idx"), floats);
  CHECK_THROWS_WITH(IndexedDataset(dir.path("d")).verify(), ContainsSubstring("float32 tokens are not token ids"));
}

TEST_CASE("Writing a dataset removes the temporaries dead writers of it left, only those", "[data]") {
  TempDir dir;
  char host[256] = {};
  REQUIRE(::gethostname(host, sizeof(host) - 1) == 0);
  const pid_t child = ::fork();  // a process that is surely gone: it exited and was reaped
  if (child == 0) ::_exit(0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  const std::string dead = dir.path(fmt::format(".d.bin.tmp.{}.{}", host, child));
  const std::string alive = dir.path(fmt::format(".d.idx.tmp.{}.{}", host, ::getppid()));
  const std::string elsewhere = dir.path(fmt::format(".d.bin.tmp.{}x.{}", host, child));
  const std::string other_output = dir.path(fmt::format(".e.bin.tmp.{}.{}", host, child));
  for (const auto& f : {dead, alive, elsewhere, other_output}) write_file(f, "left behind");
  IndexedDatasetWriter w(dir.path("d"), TokenDtype::kUint16);
  w.add_document(std::vector<int32_t>{1, 2});
  w.finish();
  CHECK_FALSE(std::filesystem::exists(dead));
  CHECK(std::filesystem::exists(alive));
  CHECK(std::filesystem::exists(elsewhere));
  CHECK(std::filesystem::exists(other_output));
}

TEST_CASE("Merging datasets equals indexing their streams together", "[data]") {
  TempDir dir;
  const auto docs = sample_documents(5000);
  write_stream(dir.path("s"), docs, 5000);
  index_streams({dir.path("s")}, dir.path("one"));
  index_streams({dir.path("s"), dir.path("s")}, dir.path("two_streams"));
  merge_datasets({dir.path("one"), dir.path("one")}, dir.path("merged"));
  CHECK(read_file(dir.path("merged.bin")) == read_file(dir.path("two_streams.bin")));
  CHECK(read_file(dir.path("merged.idx")) == read_file(dir.path("two_streams.idx")));
  CHECK(dtype_for_vocab(65499) == TokenDtype::kUint16);
  CHECK(dtype_for_vocab(65500) == TokenDtype::kInt32);
}

TEST_CASE("UTF-8 validation finds the first bad byte", "[data]") {
  size_t at = 0;
  CHECK(valid_utf8("plain ascii, long enough for the fast path"));
  CHECK(valid_utf8("Ünïcödé 東京 😀"));
  CHECK_FALSE(valid_utf8("abc\xff", &at));
  CHECK(at == 3);
  CHECK_FALSE(valid_utf8("0123456789\xc3", &at));  // cut short
  CHECK(at == 10);
  CHECK_FALSE(valid_utf8("\xc0\xaf", &at));  // overlong '/'
  CHECK_FALSE(valid_utf8("\xed\xa0\x80", &at));  // a surrogate
  CHECK_FALSE(valid_utf8("\xf4\x90\x80\x80", &at));  // past U+10FFFF
}

TEST_CASE("Records keep their line numbers across batch edges", "[data]") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 500; ++i) text += "line " + std::to_string(i) + (i % 7 == 0 ? "\n\n" : "\n");
  write_file(dir.path("t.txt"), text);

  for (size_t batch_bytes : {1, 10, 100, 1 << 20}) {
    // One document per line (blank lines are empty documents).
    DocumentFormat by_line{false, "text", std::nullopt};
    RecordReader lines(dir.path("t.txt"), by_line);
    RecordBatch b;
    std::vector<std::pair<std::string, uint64_t>> seen;
    while (lines.next_batch(b, batch_bytes))
      for (const auto& r : b.records) seen.emplace_back(b.data.substr(r.begin, r.end - r.begin), r.line);
    REQUIRE(seen.size() == 500 + 72);
    CHECK(seen[0] == std::make_pair(std::string("line 0"), uint64_t(0)));
    CHECK(seen[1] == std::make_pair(std::string(""), uint64_t(1)));
    CHECK(seen.back().second == 571);

    // Blank-line separated paragraphs.
    DocumentFormat paras{false, "text", std::string()};
    RecordReader blocks(dir.path("t.txt"), paras);
    std::vector<std::pair<std::string, uint64_t>> got;
    while (blocks.next_batch(b, batch_bytes))
      for (const auto& r : b.records) got.emplace_back(b.data.substr(r.begin, r.end - r.begin), r.line);
    REQUIRE(got.size() == 73);
    CHECK(got[0] == std::make_pair(std::string("line 0"), uint64_t(0)));
    CHECK(got[1] == std::make_pair(std::string("line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7"), uint64_t(2)));
  }
}

TEST_CASE("--info's unigram entropy is that of the token frequencies", "[data]") {
  TempDir dir;
  IndexedDatasetWriter w(dir.path("e"), TokenDtype::kUint16);
  w.add_document(std::vector<int32_t>{0, 1, 2, 3});
  w.add_document(std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3});
  w.finish();
  const IndexedDataset d(dir.path("e"));
  CHECK(std::abs(describe_dataset(d, true)["unigram_entropy_nats"].get<double>() - std::log(4.0)) < 1e-12);
  CHECK_FALSE(describe_dataset(d).contains("unigram_entropy_nats"));
}
