// The CUDA chunk embedder and the GPU's exact search against their CPU references.
//
// Embedder. Models of both families with random weights and random biases (init_params, so that a
// bias dropped or added twice shows): micro ones (head size 4: the fallback attention) and ones of
// head size 64 (bf16 and fp16 take the tensor-core flash attention there). In fp32 the GPU computes
// the CPU's function in another summation order, so each chunk's vector agrees within 1e-4 of its
// largest element (fp32 rounding gives ~1e-6; a wrong row, length or norm gives errors of order 1).
// bf16 and fp16 round every activation, so each vector is only compared by direction: cosine above
// 0.999 (a bug gives far less). The chunks have different real lengths, so a length ignored or off
// by one fails the comparison; the same chunk embedded alone, with other padding and in another
// place of its batch must give the same vector (within the rounding that another GEMM shape may
// bring), so padding or a neighbouring chunk that leaks into a vector fails.
//
// Search. The GPU's flat index against exact_search() (fp64, the ground truth): the same ids, the
// same distances to an ulp, on clustered vectors whose fp32 expansion cancels, with exact ties
// (duplicated rows: the lower id first), left-out ranges (across the base blocks' edges too),
// queries that are base rows leaving themselves out (as the query stage asks), more queries than a
// tile, and K from 1 to past the shared-memory sort (1500, 3000) and past the candidates. Then a
// small real case: the fortunes chunks embedded on the GPU and searched on it, each leaving out its
// own document.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "catch.hpp"
#include "core/error.hpp"
#include "infer_test_models.hpp"
#include "retro/chunk_db.hpp"
#include "retro/embedder.hpp"
#include "retro/exact_search.hpp"
#include "retro_test_vectors.hpp"
#include "test_util.hpp"

using namespace meg;

namespace {

// The small inference model (2 layers, a large init) widened to HIDDEN with HEADS heads (Llama:
// half as many key/value heads, at least 1), with 32 positions.
ModelConfig embedder_config(ModelFamily family, int hidden, int heads, int vocab) {
  ModelConfig c = small_inference_config(family, heads, std::max(1, heads / 2), vocab);
  c.hidden_size = hidden;
  c.seq_length = 32;
  c.validate();
  return c;
}

// The models of the embedder tests: each family, head size 4 and head size 64.
std::vector<CheckpointModel> embedder_models(int vocab) {
  std::vector<CheckpointModel> out;
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama})
    for (const auto& [hidden, heads] : {std::pair{16, 4}, std::pair{128, 2}}) {
      const ModelConfig c = embedder_config(family, hidden, heads, vocab);
      out.push_back({to_string(family) + " C" + std::to_string(hidden), c, init_params(c, 11), "", ""});
    }
  return out;
}

// The largest row_error() over the rows of DIM values: each chunk against its own scale.
double worst_row_error(const std::vector<float>& got, const std::vector<float>& want, size_t dim) {
  double worst = 0;
  for (size_t r = 0; r < want.size() / dim; ++r)
    worst = std::max(worst, row_error(got.data() + r * dim, want.data() + r * dim, int(dim)));
  return worst;
}

// The smallest cosine between matching rows (NaN counts as -1).
double worst_cosine(const std::vector<float>& got, const std::vector<float>& want, size_t dim) {
  double worst = 1;
  for (size_t r = 0; r < want.size() / dim; ++r) {
    double dot = 0, gg = 0, ww = 0;
    for (size_t c = 0; c < dim; ++c) {
      const double g = got[r * dim + c], w = want[r * dim + c];
      dot += g * w, gg += g * g, ww += w * w;
    }
    const double cosine = dot / std::sqrt(gg * ww);
    worst = std::isnan(cosine) ? -1 : std::min(worst, cosine);
  }
  return worst;
}

constexpr size_t kChunks = 6, kLength = 16;
const uint32_t kLengths[kChunks] = {16, 9, 1, 16, 4, 13};

// kChunks chunks of kLength random tokens of VOCAB, padded with PAD after kLengths.
std::vector<int32_t> chunk_tokens(int vocab, int32_t pad, uint32_t seed) {
  std::vector<int32_t> t = random_tokens(kChunks * kLength, vocab, seed);
  for (size_t i = 0; i < kChunks; ++i) std::fill(t.begin() + ptrdiff_t(i * kLength + kLengths[i]),
                                                 t.begin() + ptrdiff_t((i + 1) * kLength), pad);
  return t;
}

std::vector<float> embed(ChunkEmbedder& e, const std::vector<int32_t>& tokens, const uint32_t* lengths, size_t n) {
  std::vector<float> out(n * e.dim(), NAN);
  e.embed(tokens.data(), lengths, n, tokens.size() / n, out.data());
  return out;
}

}  // namespace

TEST_CASE("retro cuda: the embedder in fp32 is the CPU's; in bf16 and fp16 it points the same way", "[retro]") {
  for (const CheckpointModel& m : embedder_models(100)) {
    INFO(m.path);
    const std::vector<int32_t> tokens = chunk_tokens(100, 0, 3);
    CpuEmbedder cpu(m, kChunks);
    const std::vector<float> want = embed(cpu, tokens, kLengths, kChunks);
    for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16}) {
      INFO(precision_name(p));
      const auto gpu = make_chunk_embedder(m, "cuda", p, kChunks, kLength);
      REQUIRE(gpu->dim() == cpu.dim());
      REQUIRE(gpu->batch() == kChunks);
      const std::vector<float> got = embed(*gpu, tokens, kLengths, kChunks);
      if (p == Precision::fp32) {
        CHECK(worst_row_error(got, want, cpu.dim()) <= 1e-4);
      } else {
        CHECK(worst_cosine(got, want, cpu.dim()) > 0.999);
      }
    }
  }
}

TEST_CASE("retro cuda: a chunk's vector depends on its own tokens only, and repeats", "[retro]") {
  for (const CheckpointModel& m : embedder_models(100)) {
    for (Precision p : {Precision::fp32, Precision::bf16}) {
      INFO(m.path << " " << precision_name(p));
      // Another GEMM shape may round differently: bf16 keeps 8 bits.
      const double bound = p == Precision::fp32 ? 1e-5 : 2e-2;
      const auto gpu = make_chunk_embedder(m, "cuda", p, kChunks, kLength);
      const size_t C = gpu->dim();
      const std::vector<int32_t> tokens = chunk_tokens(100, 0, 5);
      const std::vector<float> together = embed(*gpu, tokens, kLengths, kChunks);
      CHECK(embed(*gpu, tokens, kLengths, kChunks) == together);

      // Each chunk alone, padded with the last token of the vocabulary instead.
      const std::vector<int32_t> repadded = chunk_tokens(100, 99, 5);
      for (size_t i = 0; i < kChunks; ++i) {
        INFO("chunk " << i);
        const std::vector<int32_t> alone(repadded.begin() + ptrdiff_t(i * kLength),
                                         repadded.begin() + ptrdiff_t((i + 1) * kLength));
        const std::vector<float> single = embed(*gpu, alone, &kLengths[i], 1);
        CHECK(row_error(single.data(), together.data() + i * C, int(C)) <= bound);
      }
      // The batch in reverse order.
      std::vector<int32_t> reversed;
      std::vector<uint32_t> lengths;
      for (size_t i = kChunks; i-- > 0;) {
        reversed.insert(reversed.end(), repadded.begin() + ptrdiff_t(i * kLength),
                        repadded.begin() + ptrdiff_t((i + 1) * kLength));
        lengths.push_back(kLengths[i]);
      }
      const std::vector<float> backwards = embed(*gpu, reversed, lengths.data(), kChunks);
      for (size_t i = 0; i < kChunks; ++i)
        CHECK(row_error(backwards.data() + (kChunks - 1 - i) * C, together.data() + i * C, int(C)) <= bound);
    }
  }
}

TEST_CASE("retro cuda: the embedder refuses what does not fit it", "[retro]") {
  const CheckpointModel m = embedder_models(100).front();  // GPT-2: 32 learned positions
  CHECK_THROWS_AS(make_chunk_embedder(m, "cuda", Precision::bf16, 4, 33), InputError);
  const auto gpu = make_chunk_embedder(m, "cuda", Precision::bf16, 2, kLength);
  std::vector<int32_t> tokens = chunk_tokens(100, 0, 7);
  std::vector<float> out(kChunks * gpu->dim());
  CHECK_THROWS_AS(gpu->embed(tokens.data(), kLengths, 3, kLength, out.data()), InputError);  // past the batch
  CHECK_THROWS_AS(gpu->embed(tokens.data(), kLengths, 1, kLength + 1, out.data()), InputError);
  const uint32_t none[1] = {0};
  CHECK_THROWS_AS(gpu->embed(tokens.data(), none, 1, kLength, out.data()), InputError);
  tokens[3] = 100;
  CHECK_THROWS_AS(gpu->embed(tokens.data(), kLengths, 1, kLength, out.data()), InputError);
}

TEST_CASE("retro cuda: the GPU's exact search is exact_search()", "[retro][kernels]") {
  const size_t n = 20000, dim = 24, nq = 4500;
  std::vector<float> points = clustered(n, dim, 40, 1);
  // Exact ties: rows [10000, 10500) repeat rows [0, 500), in another base block.
  std::copy(points.begin(), points.begin() + 500 * dim, points.begin() + 10000 * dim);
  const VectorSet base{points.data(), n, dim};
  // Queries: new points, and every 10th one a base row that leaves itself out.
  std::vector<float> queries = clustered(nq, dim, 40, 2);
  for (size_t q = 0; q < nq; q += 10)
    std::copy(base.row(q * 4 % n), base.row(q * 4 % n) + dim, queries.begin() + ptrdiff_t(q * dim));
  // Left out: none for every third query; else a range and, for odd ones, one across the first
  // blocks' edge (8192); base-row queries, themselves.
  std::vector<IdRange> ranges(2 * nq);
  std::vector<IdRanges> skip(nq);
  for (size_t q = 0; q < nq; ++q) {
    if (q % 10 == 0) {
      ranges[2 * q] = {int64_t(q * 4 % n), int64_t(q * 4 % n + 1)};
      skip[q] = {std::span(ranges).subspan(2 * q, 1)};
    } else if (q % 3 != 0) {
      ranges[2 * q] = {int64_t(q * 61 % n), int64_t(q * 61 % n + 100)};
      ranges[2 * q + 1] = {int64_t(8142 + q % 40), int64_t(8242 + q % 40)};
      skip[q] = {std::span(ranges).subspan(2 * q, q % 2 ? 2 : 1)};
    }
  }
  const auto index = make_exact_index(base, "cuda");
  for (size_t k : {1, 10, 1500, 3000}) {
    const size_t m = k > 100 ? 40 : nq;  // more than a tile of queries, where the CPU is quick
    INFO("K " << k << ", " << m << " queries");
    std::vector<int64_t> want(m * k), got(m * k, -7);
    std::vector<float> want_d(m * k), got_d(m * k, NAN);
    exact_search(base, {queries.data(), m, dim}, k, skip.data(), want.data(), want_d.data());
    index->search({queries.data(), m, dim}, k, skip.data(), got.data(), got_d.data());
    CHECK(got == want);
    size_t off = 0;
    for (size_t i = 0; i < m * k; ++i) off += !(std::abs(got_d[i] - want_d[i]) <= 1e-6f * want_d[i] + 1e-6f);
    CHECK(off == 0);
  }

  // Fewer candidates than K: three rows outside the left-out range, or a base of seven.
  const IdRange all_but_three{3, int64_t(n)};
  const IdRanges leave{std::span(&all_but_three, 1)};
  std::vector<int64_t> ids(50);
  std::vector<float> dists(50);
  index->search({queries.data(), 1, dim}, 50, &leave, ids.data(), dists.data());
  std::vector<int64_t> want(50);
  exact_search(base, {queries.data(), 1, dim}, 50, &leave, want.data(), nullptr);
  CHECK(ids == want);
  CHECK(std::count(ids.begin(), ids.end(), -1) == 47);
  CHECK(std::isinf(dists[3]));
  CHECK(std::isinf(dists[49]));
  const VectorSet seven{points.data(), 7, dim};
  make_exact_index(seven, "cuda")->search({queries.data(), 1, dim}, 12, nullptr, ids.data(), dists.data());
  exact_search(seven, {queries.data(), 1, dim}, 12, nullptr, want.data(), nullptr);
  CHECK(std::vector<int64_t>(ids.begin(), ids.begin() + 12) == std::vector<int64_t>(want.begin(), want.begin() + 12));
  CHECK(ids[7] == -1);
}

TEST_CASE("retro cuda: the fortunes chunks embedded and searched on the GPU", "[retro]") {
  TempDir dir;
  const IndexedDataset data(std::string(MEG_TEST_DATA) + "/megatron/fortunes_spm");
  build_chunk_db({&data}, 32, 2, dir.path(""), 1);
  const ChunkDb db(dir.path(""));
  const ChunkReader read = [&](uint64_t first, size_t n, int32_t* tokens, uint32_t* lengths) {
    db.read(first, n, tokens, lengths);
  };
  // A GPT-2 of head size 64 over the SentencePiece vocabulary of 2000.
  const ModelConfig c = embedder_config(ModelFamily::gpt2, 64, 1, 2000);
  const CheckpointModel m{"fortunes", c, init_params(c, 5), "", ""};
  const size_t n = db.size(), C = 64, k = 10;
  REQUIRE(n > 1000);
  std::vector<float> want(n * C), fp32(n * C), bf16(n * C);
  CpuEmbedder cpu(m, 16);
  embed_chunks(cpu, read, 32, 0, n, want.data());
  embed_chunks(*make_chunk_embedder(m, "cuda", Precision::fp32, 100, 32), read, 32, 0, n, fp32.data());
  embed_chunks(*make_chunk_embedder(m, "cuda", Precision::bf16, 100, 32), read, 32, 0, n, bf16.data());
  CHECK(worst_row_error(fp32, want, C) <= 1e-4);
  CHECK(worst_cosine(bf16, want, C) > 0.999);

  // Every chunk a query, leaving out its own document. Equal ids, but for neighbours whose
  // distances tie in fp32 (duplicated text) and may then come in either order.
  std::vector<IdRange> own(n);
  std::vector<IdRanges> skip(n);
  for (size_t i = 0; i < n; ++i) {
    own[i] = db.document_chunks(i);
    skip[i] = {std::span(&own[i], 1)};
  }
  const VectorSet set{bf16.data(), n, C};
  std::vector<int64_t> cpu_ids(n * k), gpu_ids(n * k);
  std::vector<float> cpu_d(n * k), gpu_d(n * k);
  exact_search(set, set, k, skip.data(), cpu_ids.data(), cpu_d.data());
  make_exact_index(set, "cuda")->search(set, k, skip.data(), gpu_ids.data(), gpu_d.data());
  size_t swapped = 0, wrong = 0;
  for (size_t i = 0; i < n * k; ++i) {
    if (gpu_ids[i] == cpu_ids[i]) continue;
    ++swapped;
    wrong += !(std::abs(gpu_d[i] - cpu_d[i]) <= 1e-6f * cpu_d[i] + 1e-6f);
  }
  INFO(swapped << " of " << n * k << " neighbours in another order");
  CHECK(wrong == 0);
  CHECK(swapped * 100 <= n * k);
  CHECK(std::count(gpu_ids.begin(), gpu_ids.end(), -1) == 0);
}
