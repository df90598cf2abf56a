// numpy's RandomState, Megatron's GPT dataset indices and blending, the blend file and GptDataset.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "catch.hpp"
#include "core/error.hpp"
#include "data/blend.hpp"
#include "data/gpt_dataset.hpp"
#include "data/numpy_random.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {
const std::string kSpm = std::string(MEG_TEST_DATA) + "/megatron/fortunes_spm";
const std::string kGpt2 = std::string(MEG_TEST_DATA) + "/megatron/fortunes_gpt2";

BlendOptions options(uint64_t seq_length, uint64_t train, uint32_t seed = 1234) {
  BlendOptions o;
  o.seq_length = seq_length;
  o.seed = seed;
  o.samples[0] = train;
  return o;
}

// A dataset of many short documents (some shorter than a sample, one empty-free run of single
// tokens) with tokens that differ from document to document.
void write_small_dataset(const std::string& prefix) {
  IndexedDatasetWriter w(prefix, TokenDtype::kUint16);
  for (int d = 0; d < 300; ++d) {
    std::vector<int32_t> doc(1 + (d * 37) % 53);
    for (size_t t = 0; t < doc.size(); ++t) doc[t] = (d * 211 + static_cast<int>(t) * 7) % 60000;
    w.add_document(doc);
  }
  w.finish();
}

void copy_dataset(const std::string& from, const std::string& to) {
  std::filesystem::copy_file(from + ".bin", to + ".bin");
  std::filesystem::copy_file(from + ".idx", to + ".idx");
}
}  // namespace

TEST_CASE("NumpyRandomState draws what numpy.random.RandomState draws", "[blend]") {
  // Produced with numpy 1.24:
  //   RandomState(s).randint(0, 2**32, size=n, dtype=numpy.uint32)  (raw 32-bit outputs)
  const std::map<uint32_t, std::vector<uint32_t>> raw = {
      {1234u, {822569775u, 2137449171u, 2671936806u, 3512589365u, 1880026316u, 2629000564u}},
      {0u, {2357136044u, 2546248239u, 3071714933u, 3626093760u}},
      {4294967295u, {419326371u, 479346978u, 3918654476u, 2416749639u}}};
  for (const auto& [seed, expected] : raw) {
    NumpyRandomState rng(seed);
    for (uint32_t v : expected) CHECK(rng.next_uint32() == v);
  }
  {  // RandomState(1234).randint(0, 1001, size=8, dtype=numpy.int64): 32-bit masked rejection
    NumpyRandomState rng(1234);
    for (uint64_t v : {815, 723, 294, 53, 204, 372, 664, 655}) CHECK(rng.random_interval(1000) == v);
  }
  {  // RandomState(1234).randint(0, 2**40 + 5, size=6, dtype=numpy.int64): 64-bit draws, high half first
    NumpyRandomState rng(1234);
    for (uint64_t v : {878802328948ull, 656147994617ull, 617876871857ull, 662277595166ull, 737940505758ull,
                       1014294388604ull})
      CHECK(rng.random_interval((uint64_t(1) << 40) + 4) == v);
  }
  {  // RandomState(1234).permutation(10)
    NumpyRandomState rng(1234);
    std::vector<int64_t> p(10);
    std::iota(p.begin(), p.end(), 0);
    rng.shuffle(std::span<int64_t>(p));
    CHECK(p == std::vector<int64_t>{7, 2, 9, 1, 0, 8, 4, 5, 6, 3});
  }
  {  // rs = RandomState(7); a = arange(20, dtype=int32); rs.shuffle(a); b = arange(13, dtype=uint32); rs.shuffle(b)
    NumpyRandomState rng(7);
    std::vector<int32_t> a(20);
    std::vector<uint32_t> b(13);
    std::iota(a.begin(), a.end(), 0);
    std::iota(b.begin(), b.end(), 0u);
    rng.shuffle(std::span<int32_t>(a));
    rng.shuffle(std::span<uint32_t>(b));
    CHECK(a == std::vector<int32_t>{1, 17, 2, 5, 11, 0, 18, 6, 13, 19, 10, 14, 8, 16, 9, 12, 7, 3, 4, 15});
    CHECK(b == std::vector<uint32_t>{9, 1, 4, 2, 6, 12, 0, 11, 7, 10, 8, 5, 3});
  }
}

TEST_CASE("Splits and weights are normalized and rounded as Megatron does", "[blend]") {
  // numpy.sum([0.1] * 10) is 1.0 (pairwise); a plain loop gives 0.9999999999999999.
  const std::vector<double> tenths(10, 0.1);
  CHECK(numpy_sum(tenths) == 1.0);

  // Expected ranges from Megatron's split matrix: int(round(bookend * float(n))) in Python.
  const auto ranges = [](const std::string& split, uint64_t n) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (const auto& r : split_ranges(parse_split(split), n)) out.emplace_back(r.begin, r.end);
    return out;
  };
  using R = std::vector<std::pair<uint64_t, uint64_t>>;
  CHECK(ranges("969,30,1", 605) == R{{0, 586}, {586, 604}, {604, 605}});
  CHECK(ranges("1,1", 5) == R{{0, 2}, {2, 5}, {0, 0}});  // 2.5 rounds to even
  CHECK(ranges("1,1", 7) == R{{0, 4}, {4, 7}, {0, 0}});  // 3.5 rounds to even
  CHECK(ranges("1,1,1", 100) == R{{0, 33}, {33, 67}, {67, 100}});
  CHECK(ranges("98,2", 1001) == R{{0, 981}, {981, 1001}, {0, 0}});
  CHECK(ranges("0,1,1", 9) == R{{0, 0}, {0, 4}, {4, 9}});

  for (const char* bad : {"a,b", "1,2,3,4", "-1,2", "0,0,0", "", "1,,2"})
    CHECK_THROWS_AS(parse_split(bad), InputError);
  CHECK_THROWS_WITH(parse_blend_arguments({"x", "p"}), ContainsSubstring("weight 'x' of p is not a number"));
  CHECK_THROWS_WITH(parse_blend_arguments({"0", "p", "0", "q"}), ContainsSubstring("sum to 0"));
  CHECK_THROWS_WITH(parse_blend_arguments({"1", "p", "2"}), ContainsSubstring("odd number"));
  CHECK(parse_blend_arguments({"1e-1", "p", "2", "q"}).at(1).prefix == "q");
}

TEST_CASE("Epochs, the final epoch rule and per-input sample counts follow Megatron", "[blend]") {
  CHECK(num_epochs(1000, 1, 64) == 1);
  CHECK(num_epochs(1000, 15, 64) == 1);  // 15 * 64 + 1 = 961 tokens
  CHECK(num_epochs(1000, 16, 64) == 2);  // 1025 tokens
  // 2 epochs of 26964 tokens at T=64: 421 samples before the last epoch, 421 per epoch; asking 704
  // leaves 283 < int(0.8 * 421) = 336 for the last epoch, so it is shuffled on its own.
  CHECK(final_epoch(26964, 2, 704, 64).separate);
  CHECK(final_epoch(26964, 2, 704, 64).samples_before == 421);
  CHECK_FALSE(final_epoch(26964, 2, 800, 64).separate);
  CHECK(target_samples(1000, 0.3) == 300);
  CHECK(surplus_samples(1000, 0.3) == 302);
  CHECK(surplus_samples(1000, 0.7) == 704);
}

TEST_CASE("Indices equal the ones Megatron builds from the reference datasets", "[blend]") {
  // Produced with a numpy transcription of Megatron-Core's GPTDataset and BlendedDataset
  // (RandomState(1234), T=64, 1000 training samples, split 969,30,1, weights 0.3 spm / 0.7 gpt2).
  TempDir dir;
  build_blend({{0.3, kSpm}, {0.7, kGpt2}}, options(64, 1000), dir.path("b"));
  const BlendFile b(dir.path("b"));
  const auto spm_doc = b.document_index(0, Split::kTrain);
  CHECK(std::vector<int32_t>(spm_doc.begin(), spm_doc.begin() + 8) == std::vector<int32_t>{583, 29, 270, 100, 278, 202, 58, 323});
  CHECK(b.input(0).splits[0].samples == 515);
  CHECK(b.input(0).splits[0].epochs == 1);
  const auto spm_shuffle = b.shuffle_index(0, Split::kTrain);
  CHECK(std::vector<int64_t>(spm_shuffle.begin(), spm_shuffle.begin() + 8) == std::vector<int64_t>{60, 501, 491, 367, 76, 359, 192, 83});
  const auto spm_samples = b.sample_index(0, Split::kTrain);
  CHECK(std::vector<int64_t>(spm_samples.begin(), spm_samples.begin() + 10) == std::vector<int64_t>{0, 0, 1, 42, 1, 106, 1, 170, 2, 31});

  // gpt2 needs two epochs and its last one is shuffled on its own.
  const auto& g = b.input(1).splits[0];
  CHECK(g.epochs == 2);
  CHECK(g.samples == 842);
  CHECK(g.flags == kBlendFinalEpochSeparate);
  const auto gpt_doc = b.document_index(1, Split::kTrain);
  CHECK(std::vector<int32_t>(gpt_doc.begin() + 586, gpt_doc.begin() + 590) == std::vector<int32_t>{507, 539, 294, 448});
  const auto gpt_shuffle = b.shuffle_index(1, Split::kTrain);
  CHECK(std::vector<int64_t>(gpt_shuffle.begin(), gpt_shuffle.begin() + 8) == std::vector<int64_t>{2, 393, 79, 142, 78, 178, 281, 57});
  CHECK(std::vector<int64_t>(gpt_shuffle.begin() + 421, gpt_shuffle.begin() + 425) == std::vector<int64_t>{828, 609, 686, 522});
  const auto gpt_samples = b.sample_index(1, Split::kTrain);
  CHECK(gpt_samples[2 * 842] == 1170);
  CHECK(gpt_samples[2 * 842 + 1] == 263);

  const auto di = b.dataset_index(Split::kTrain);
  const auto ds = b.dataset_sample(Split::kTrain);
  REQUIRE(di.size() == 1000);
  CHECK(std::vector<uint16_t>(di.begin(), di.begin() + 16) == std::vector<uint16_t>{1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1});
  CHECK(std::vector<int64_t>(ds.begin(), ds.begin() + 16) == std::vector<int64_t>{0, 0, 1, 2, 1, 3, 4, 2, 5, 6, 3, 7, 8, 9, 4, 10});
}

TEST_CASE("Every sample is T+1 tokens of the documents in document-index order", "[blend]") {
  TempDir dir;
  write_small_dataset(dir.path("small"));
  BlendOptions o = options(16, 3000);
  o.split = "80,15,5";
  o.samples[1] = 200;
  o.samples[2] = 50;
  build_blend({{2, dir.path("small")}, {1, kGpt2}}, o, dir.path("b"));
  const GptDataset data(dir.path("b"));
  const BlendFile& b = data.blend();
  std::vector<IndexedDataset> inputs;
  inputs.emplace_back(dir.path("small"));
  inputs.emplace_back(kGpt2);
  const uint64_t T = data.seq_length();
  std::vector<int32_t> got(T + 1);
  for (int s = 0; s < kNumSplits; ++s) {
    const Split split = Split(s);
    // Each input's split as one token stream: its documents concatenated in document-index order.
    // Beside it, the document each token comes from.
    std::vector<std::vector<int32_t>> streams(inputs.size()), stream_docs(inputs.size());
    for (size_t k = 0; k < inputs.size(); ++k) {
      const auto& r = b.input(k).splits[s];
      std::map<int32_t, uint64_t> seen;
      for (int32_t doc : b.document_index(k, split)) {
        ++seen[doc];
        const auto tokens = inputs[k].sequence(doc).to_vector();
        streams[k].insert(streams[k].end(), tokens.begin(), tokens.end());
        stream_docs[k].insert(stream_docs[k].end(), tokens.size(), doc);
      }
      // Each document of the split appears once per epoch.
      CHECK(seen.size() == (r.epochs > 0 ? r.end - r.begin : 0));
      for (const auto& [doc, n] : seen) CHECK((uint64_t(doc) >= r.begin && uint64_t(doc) < r.end && n == r.epochs));
      // The shuffle index is a permutation of the samples.
      std::vector<int64_t> perm(b.shuffle_index(k, split).begin(), b.shuffle_index(k, split).end());
      std::sort(perm.begin(), perm.end());
      for (size_t i = 0; i < perm.size(); ++i) CHECK(perm[i] == int64_t(i));
    }
    // The blend draws ceil(N * weight) from each input: N, or a few more.
    REQUIRE(data.num_samples(split) >= o.samples[s].value());
    REQUIRE(data.num_samples(split) <= o.samples[s].value() + inputs.size());
    for (uint64_t i = 0; i < data.num_samples(split); ++i) {
      data.sample(split, i, got.data());
      const size_t k = b.dataset_index(split)[i];
      const uint64_t j = b.shuffle_index(k, split)[b.dataset_sample(split)[i]];
      const auto& stream = streams[k];
      REQUIRE((j + 1) * T < stream.size());
      const std::vector<int32_t> expected(stream.begin() + j * T, stream.begin() + j * T + T + 1);
      REQUIRE(got == expected);
      // Its documents: those of its tokens, in order (empty documents have no tokens to show, and
      // a document repeated across an epoch edge shows once).
      const GptDataset::SampleDocuments where = data.sample_documents(split, i);
      REQUIRE(where.input == k);
      std::vector<int32_t> docs, want;
      for (int32_t d : where.documents)
        if (inputs[k].sequence_length(size_t(d)) > 0 && (docs.empty() || docs.back() != d)) docs.push_back(d);
      for (uint64_t t = j * T; t <= j * T + T; ++t)
        if (want.empty() || want.back() != stream_docs[k][t]) want.push_back(stream_docs[k][t]);
      REQUIRE(docs == want);
    }
  }
  CHECK_THROWS_AS(data.sample(Split::kTest, data.num_samples(Split::kTest), got.data()), std::out_of_range);
}

TEST_CASE("The blend keeps every input within one sample of its weight", "[blend]") {
  const std::vector<std::vector<double>> cases = {
      {1.0}, {0.5, 0.5}, {0.3, 0.7}, {0.01, 0.99}, {1.0 / 3, 1.0 / 3, 1.0 / 3},
      {0.05, 0.1, 0.15, 0.2, 0.25, 0.125, 0.075, 0.05}};
  for (const auto& raw : cases) {
    const auto w = normalize_weights(normalize_weights(raw));
    const size_t n = 20000;
    std::vector<uint16_t> di(n);
    std::vector<int64_t> ds(n);
    build_blending_indices(w, di, ds);
    std::vector<int64_t> taken(w.size(), 0);
    for (size_t i = 0; i < n; ++i) {
      REQUIRE(ds[i] == taken[di[i]]);  // each input's samples are drawn in order
      ++taken[di[i]];
      for (size_t k = 0; k < w.size(); ++k) REQUIRE(std::abs(double(taken[k]) - w[k] * double(i + 1)) <= 1.0);
    }
  }
}

TEST_CASE("Blends are deterministic in the seed", "[blend]") {
  TempDir dir;
  build_blend({{1, kSpm}, {3, kGpt2}}, options(32, 2000), dir.path("a"));
  build_blend({{1, kSpm}, {3, kGpt2}}, options(32, 2000), dir.path("b"));
  build_blend({{1, kSpm}, {3, kGpt2}}, options(32, 2000, 99), dir.path("c"));
  CHECK(read_file(dir.path("a")) == read_file(dir.path("b")));
  const BlendFile a(dir.path("a")), c(dir.path("c"));
  CHECK(a.header().fingerprint != c.header().fingerprint);
  const auto sa = a.shuffle_index(0, Split::kTrain), sc = c.shuffle_index(0, Split::kTrain);
  CHECK_FALSE(std::equal(sa.begin(), sa.end(), sc.begin(), sc.end()));
}

TEST_CASE("A blend whose inputs changed is refused", "[blend]") {
  TempDir dir;
  copy_dataset(kSpm, dir.path("data"));
  build_blend({{1, dir.path("data")}}, options(32, 100), dir.path("b"));
  CHECK_NOTHROW(GptDataset(dir.path("b")));

  // The same documents but one: a different .idx.
  {
    const IndexedDataset original(kSpm);
    std::filesystem::remove(dir.path("data.bin"));
    std::filesystem::remove(dir.path("data.idx"));
    IndexedDatasetWriter w(dir.path("data"), original.dtype());
    for (size_t d = 1; d < original.num_documents(); ++d) w.add_document(original.document(d).to_vector());
    w.finish();
  }
  CHECK_THROWS_WITH(GptDataset(dir.path("b")), ContainsSubstring("changed since the blend was built") &&
                                                   ContainsSubstring("data.idx differs"));
  // A corrupt index is refused for what it is before its fingerprint is compared.
  std::string idx = read_file(dir.path("data.idx"));
  const int32_t huge = 0x7fffffff;
  std::memcpy(idx.data() + 34, &huge, 4);  // sequence 0's length
  write_file(dir.path("data.idx"), idx);
  CHECK_THROWS_WITH(GptDataset(dir.path("b")),
                    ContainsSubstring("input 1: ") && ContainsSubstring("data.idx: offset 34: sequence 0: length 2147483647"));
  std::filesystem::remove(dir.path("data.idx"));
  CHECK_THROWS_WITH(GptDataset(dir.path("b")), ContainsSubstring("input 1: ") && ContainsSubstring("data.idx: cannot open"));
}

TEST_CASE("Corrupt and truncated blend files are refused", "[blend]") {
  TempDir dir;
  build_blend({{1, kSpm}, {1, kGpt2}}, options(32, 500), dir.path("b"));
  const std::string whole = read_file(dir.path("b"));
  const auto refused = [&](std::string bytes, const std::string& message) {
    write_file(dir.path("bad"), bytes);
    CHECK_THROWS_WITH(BlendFile(dir.path("bad")), ContainsSubstring(message));
  };
  refused(whole.substr(0, whole.size() - 8), "(truncated)");
  refused(whole.substr(0, 100), "truncated: 100 bytes");
  refused("", "truncated: 0 bytes");
  refused(whole + "extra", "(trailing bytes)");
  std::string flipped = whole;
  flipped[whole.size() / 2] ^= 0x10;
  refused(flipped, "checksum mismatch");
  std::string magic = whole;
  magic[0] = 'X';
  refused(magic, "offset 0: not a meg blend file");
  std::string version = whole;
  version[16] = 2;
  refused(version, "blend version 2 is not supported");
}

TEST_CASE("Blends that cannot be built are refused before anything is written", "[blend]") {
  TempDir dir;
  write_small_dataset(dir.path("small"));
  BlendOptions o = options(16, 100);
  o.split = "100,0,0";
  o.samples[1] = 10;
  CHECK_THROWS_WITH(build_blend({{1, dir.path("small")}}, o, dir.path("b")), ContainsSubstring("gives the valid split no documents"));
  CHECK_THROWS_WITH(build_blend({{1, dir.path("missing")}}, options(16, 100), dir.path("b")),
                    ContainsSubstring("missing.idx: cannot open"));
  CHECK_THROWS_WITH(build_blend({{1, dir.path("small")}}, options(1, 100), dir.path("b")),
                    ContainsSubstring("--seq-length must be at least 2"));
  // Sizes that cannot be served, refused before the indices are allocated.
  CHECK_THROWS_WITH(build_blend({{1, dir.path("small")}}, options(4000000000, 10), dir.path("b")),
                    ContainsSubstring("small: the train split has 291 documents and") &&
                        ContainsSubstring("fewer than one sample of --seq-length 4000000000 + 1"));
  CHECK_THROWS_WITH(build_blend({{1, dir.path("small")}}, options(64, uint64_t(1) << 60), dir.path("b")),
                    ContainsSubstring("--samples 1152921504606846976: that many samples of --seq-length 64"));
  CHECK_THROWS_WITH(build_blend({{1, dir.path("small")}}, options(16, uint64_t(1) << 50), dir.path("b")),
                    ContainsSubstring("--samples 1125899906842624: the blend's indices would take") &&
                        ContainsSubstring("more than the"));
  o = options(16, 100);
  o.split = "80,10,10";
  o.samples[2] = uint64_t(1) << 50;
  CHECK_THROWS_WITH(build_blend({{1, dir.path("small")}}, o, dir.path("b")), ContainsSubstring("--test-samples 1125899906842624: "));
  CHECK_FALSE(std::filesystem::exists(dir.path("b")));
}

TEST_CASE("An input builds what the blend draws when Megatron's surplus falls short", "[blend]") {
  // Weights 0.1, 0.1, 0.1, 10 and 12 samples: the greedy blend draws 14 samples from the last
  // input, which asks for ceil(ceil(12 * 0.9709) * 1.005) = 13. A one-document dataset of T+1
  // tokens builds exactly what it asks for, so Megatron would fail here with an IndexError.
  TempDir dir;
  {
    IndexedDatasetWriter w(dir.path("tiny"), TokenDtype::kUint16);
    std::vector<int32_t> doc(17);
    std::iota(doc.begin(), doc.end(), 100);
    w.add_document(doc);
    w.finish();
  }
  BlendOptions o = options(16, 12);
  o.split = "1,0,0";
  const auto tiny = dir.path("tiny");
  build_blend({{0.1, tiny}, {0.1, tiny}, {0.1, tiny}, {10, tiny}}, o, dir.path("b"));
  const GptDataset data(dir.path("b"));
  CHECK(data.blend().input(3).splits[0].requested == 14);
  CHECK(data.blend().input(0).splits[0].requested == 2);  // the others keep Megatron's count
  std::vector<int32_t> tokens(17);
  for (uint64_t i = 0; i < data.num_samples(Split::kTrain); ++i) {
    data.sample(Split::kTrain, i, tokens.data());
    // The stream is the one document over and over: any 17 tokens of it hold each token once.
    CHECK(std::count(tokens.begin(), tokens.end(), 100) == 1);
  }
}

TEST_CASE("A blend's fingerprint is known before it is built, and without its counts", "[blend]") {
  TempDir dir;
  BlendOptions o = options(32, 2000);
  o.samples[1] = 20;
  o.samples[2] = 0;
  build_blend({{1, kSpm}, {3, kGpt2}}, o, dir.path("a"));
  CHECK(planned_blend_fingerprint({{1, kSpm}, {3, kGpt2}}, o) == GptDataset(dir.path("a")).fingerprint());
  BlendOptions longer = o, reseeded = o;
  longer.samples[0] = 3000;
  reseeded.seed = 99;
  build_blend({{1, kSpm}, {3, kGpt2}}, longer, dir.path("b"));
  build_blend({{1, kSpm}, {3, kGpt2}}, reseeded, dir.path("c"));
  const GptDataset a(dir.path("a")), b(dir.path("b")), c(dir.path("c"));
  CHECK(a.fingerprint() != b.fingerprint());
  CHECK(a.source_fingerprint() == b.source_fingerprint());
  CHECK(a.source_fingerprint() != c.source_fingerprint());
}

TEST_CASE("--data-path takes weight-prefix pairs or prefixes alone, as Megatron's", "[blend]") {
  const auto abs = [](const std::string& p) { return std::filesystem::absolute(p).lexically_normal().string(); };
  auto in = parse_data_path({"0.7 " + kSpm, "0.3", kGpt2});
  REQUIRE(in.size() == 2);
  CHECK((in[0].weight == 0.7 && in[0].prefix == abs(kSpm) && in[1].weight == 0.3 && in[1].prefix == abs(kGpt2)));
  // Prefixes alone are weighed by their tokens; one prefix alone has weight 1.
  in = parse_data_path({kSpm + " " + kGpt2});
  REQUIRE(in.size() == 2);
  CHECK(in[0].weight == double(IndexedDataset(kSpm).num_tokens()));
  CHECK(in[1].weight == double(IndexedDataset(kGpt2).num_tokens()));
  in = parse_data_path({kSpm});
  CHECK((in.size() == 1 && in[0].weight == 1.0));
  CHECK_THROWS_WITH(parse_data_path({"1", kSpm, "0", kGpt2}), ContainsSubstring("weight of") && ContainsSubstring("is 0"));
  CHECK_THROWS_WITH(parse_data_path({" "}), ContainsSubstring("--data-path: no inputs"));
}
