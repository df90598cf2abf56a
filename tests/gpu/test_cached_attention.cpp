// cached_attention (kernels/cached_attention.cu), the attention of the inference path's decode steps
// (and of prompt tokens that follow cached ones) against the KV cache, run as a decode step runs
// it: on one stream, kv_cache_append (with a RoPE table or without) writes the batch's keys and
// values into caches that already hold older ones, then cached_attention's overlapped launch reads
// them, with new_keys the most tokens one queried slot got in the batch. The reference is computed
// in double from what the kernel was given: the q heads (rotated in place) and the caches,
// downloaded after the launches.
//
// Method (gpu_test_util.hpp's, and):
//   - q and k random in [-2, 2] (scores of a few units: a peaked, not one-hot, softmax), v in
//     [-1, 1], rounded to X; the older keys and values (below each slot's first token of the batch)
//     likewise. Every other place of the caches holds NaN, the places this batch writes included:
//     a key read past its slot's newest token, or one of this batch's read before kv_cache_append
//     has written it (new_keys too small, or the kernel's wait misplaced), makes the output NaN,
//     whatever its weight (a later token of the same batch, finite, moves the output far past
//     the bounds);
//   - the caches after the launches must be the initial ones with the batch's k and v heads (as
//     kv_cache_append left them in qkv) at (slot, position), bit for bit: the keys the reference
//     uses are the batch's and the older ones;
//   - out is poisoned; rows of qkv that are not queried (a fresh prompt's, which attention_forward
//     serves) are appended to the cache, but their output rows must keep the poison;
//   - the queries are listed in reverse row order (query q is not row q);
//   - one scratch per shape and type, sized as the inference model sizes it (the largest
//     cached_attention_scratch of the query counts that split) and zeroed once, serves every
//     launch. Every batch runs once and is checked, then all run again in the same order and must
//     give the same bits (same_bits): the counters every launch left behind were zero, and no merge
//     took a stale partial (between a batch's two runs the other batches overwrote the partials).
//
// Batches, for every shape:
//   - one query with 50 keys, two queries of one slot after 30 cached keys (new_keys = 2), and one
//     query with as many keys as the staged grid takes (cached_attention_staged): on Hopper, one
//     block a (query, head group) with the keys in shared memory, the new ones copied after the
//     wait;
//   - one query with 701 keys: the keys split across the blocks of one cluster (on Hopper), then
//     merged there;
//   - one query with 5001 keys: more than the grid's splits take in one pass each (passes of 128
//     keys or fewer, at most 8 clusters of 8 splits), for every shape but the HS 16 one (passes of
//     512 keys): several clusters, merged through the scratch;
//   - queries of 5 slots at positions 0 (a single key), 1, 37, 300 and 999, split and unsplit in
//     one launch (the short ones leave blocks of their cluster without keys), beside the 4 rows of
//     a fresh prompt in a sixth slot (new_keys = 1);
//   - Q queries of slots of their own with 600 to 1000 keys, Q the least from 40 on for which the
//     grid does not split (cached_attention_splits(Q) == 1, which depends on the device), so that a
//     block takes a query's keys in many passes (grouped-query heads: through the streaming ring);
//   - for shapes of one head a block, as many such queries as take one block more than a wave of
//     4-warp blocks (4 a multiprocessor): the grid of 2-warp blocks;
//   - a prompt after cached tokens: positions 40-44 of one slot and 300-304 of another, each a
//     query (new_keys = 5; each must see its own key and the earlier ones, not the later ones),
//     beside a decode token of a third slot.
// Shapes: GPT-2's heads (12 query and kv heads, HS 64, no RoPE), grouped-query with 4 and with 2
// query heads per kv head (HS 64), HS 16 (two lanes per key row, 4 heads per kv head, no RoPE),
// HS 128 with 8 query heads per kv head (two blocks of 4 per kv head), and HS 40 with groups of 3
// (one head per block; 5 of the 8 lanes of a key row busy). fp32 and bf16. Then some of them with
// a sliding window (Megatron's --window-size (W, 0): a query at p sees the keys p - W .. p) of 0,
// 1, 100 and 333 keys back, and one longer than every context: the splits share out the window's
// keys alone.
//
// Bounds. An output element is a convex combination of the values v[t, d] of the keys it weighs,
// so it is judged against vmax, the largest |v[t, d]| among them. The kernel computes in fp32
// (q pre-scaled by log2(e) / sqrt(HS), dot products of HS terms, ex2.approx with a relative error
// near 2^-22, the sums and the merge of the splits), which moves the probabilities by about 1e-6
// relatively: 1e-5 * vmax leaves a margin of 10. The output is then rounded to X once, which costs
// unit_roundoff<X>() * |out|. So every element must satisfy
//   |gpu - ref| <= 1e-5 * vmax + unit_roundoff<X>() * |ref|,
// for fp32 and bf16 alike. What a wrong kernel gives: a key left out or taken in moves an element
// by that key's probability times |v[t, d] - out|, on average about 0.5 / len (5e-4 for 1000 keys),
// against bf16's bound of about 1e-4 there (|out| is a weighted mean of hundreds of random values,
// a few 1e-2) and fp32's of 1e-5; a wrong kv head, slot or merge weight moves elements by about
// |out| itself.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.hpp"
#include "core/device.hpp"
#include "gpu_test_util.hpp"
#include "ops/cuda/ops.hpp"
#include "ops/cuda/stream.hpp"

namespace {

using namespace meg::test;

constexpr double kArithmetic = 1e-5;  // of vmax: the fp32 arithmetic's share of the bound

struct Shape {
  int NH, NKV, HS;
  bool rope;
  int window = -1;  // the sliding window, -1 for none
  int width() const { return (NH + 2 * NKV) * HS; }  // a row of qkv
};

// The device the tests run on (the current one).
meg::DeviceInfo current_device() {
  int index = 0;
  MEG_CUDA_CHECK(cudaGetDevice(&index));
  for (const meg::DeviceInfo& d : meg::cuda_devices())
    if (d.index == index) return d;
  throw std::runtime_error("the current CUDA device is not among those listed");
}

std::string describe(const Shape& s) {
  std::ostringstream os;
  os << "NH=" << s.NH << " NKV=" << s.NKV << " HS=" << s.HS << (s.rope ? " rope" : " no rope") << " window "
     << s.window;
  return os.str();
}

// A row of the batch: the token at POSITION of SLOT. A query attends through the cache; the
// others stand for a fresh prompt's rows, appended to the cache but served by attention_forward.
struct Token {
  int slot, position;
  bool query = true;
};

struct Batch {
  std::string name;
  std::vector<Token> tokens;  // the rows of qkv
};

// What a batch implies: the cache's slots and length, each slot's first position in the batch
// (its older keys lie below), the queries' rows (in reverse row order) and new_keys.
struct Layout {
  int N = 0, Q = 0, slots = 0, max_length = 0, new_keys = 0;
  int longest = 0;            // the most keys a query attends to
  std::vector<int> first;     // per slot: its first position in the batch (0: no token in it)
  std::vector<int32_t> rows;  // per query: its row
  size_t cache_size(const Shape& s) const { return size_t(slots) * s.NKV * max_length * s.HS; }
};

Layout layout_of(const Batch& b) {
  Layout l;
  l.N = int(b.tokens.size());
  for (const Token& t : b.tokens) {
    l.slots = std::max(l.slots, t.slot + 1);
    l.max_length = std::max(l.max_length, t.position + 8);  // NaN places past every slot's newest
  }
  l.first.assign(size_t(l.slots), INT_MAX);
  std::vector<int> last(size_t(l.slots), -1), count(size_t(l.slots), 0);
  std::vector<bool> queried(size_t(l.slots), false);
  for (const Token& t : b.tokens) {
    l.first[t.slot] = std::min(l.first[t.slot], t.position);
    last[t.slot] = std::max(last[t.slot], t.position);
    ++count[t.slot];
    if (t.query) {
      queried[t.slot] = true;
      l.longest = std::max(l.longest, t.position + 1);
    }
  }
  for (int s = 0; s < l.slots; ++s) {
    // A slot's tokens in a batch are consecutive positions after its cached ones.
    if (count[s] > 0) REQUIRE(last[s] - l.first[s] + 1 == count[s]);
    else l.first[s] = 0;
    if (queried[s]) l.new_keys = std::max(l.new_keys, count[s]);
  }
  for (int n = l.N - 1; n >= 0; --n)
    if (b.tokens[n].query) l.rows.push_back(n);
  l.Q = int(l.rows.size());
  return l;
}

// The batches every shape runs (the header's list).
std::vector<Batch> batches(const Shape& s) {
  std::vector<Batch> out;
  out.push_back({"one query, 50 keys", {{1, 49}}});
  out.push_back({"two queries after 30 cached keys", {{1, 30}, {1, 31}}});
  int staged = 1;  // the most keys of a query that the staged grid takes (0 where it takes none)
  while (staged <= 4096 && meg::cuda::cached_attention_staged(1, s.NH, s.NKV, s.HS, staged)) ++staged;
  if (--staged > 0) out.push_back({"one query, as many keys as a staged block holds", {{0, staged - 1}}});
  out.push_back({"one query, 701 keys", {{1, 700}}});  // slot 0 is left unread (all NaN)
  out.push_back({"one query, 5001 keys", {{0, 5000}}});
  out.push_back({"5 slots at different lengths, and a fresh prompt",
                 {{2, 0}, {0, 1}, {5, 0, false}, {5, 1, false}, {5, 2, false}, {5, 3, false}, {4, 37},
                  {1, 300}, {3, 999}}});
  int Q = 40;
  while (Q < 4096 && meg::cuda::cached_attention_splits(Q, s.NH, s.NKV) > 1) ++Q;
  REQUIRE(meg::cuda::cached_attention_splits(Q, s.NH, s.NKV) == 1);
  Batch many{std::to_string(Q) + " unsplit queries, 600 to 1000 keys", {}};
  for (int q = 0; q < Q; ++q) many.tokens.push_back({q, 600 + (q * 97) % 401});
  out.push_back(many);
  if (s.NH / s.NKV % 2 != 0) {
    // One head a block: just past a wave of 4-warp blocks (4 a multiprocessor), the grid's blocks
    // have 2 warps.
    const int past = 4 * current_device().multiprocessors / s.NH + 1;
    Batch wave{std::to_string(past) + " unsplit queries of 2-warp blocks, 600 to 1000 keys", {}};
    for (int q = 0; q < past; ++q) wave.tokens.push_back({q, 600 + (q * 89) % 401});
    out.push_back(wave);
  }
  Batch prompt{"positions 40-44 and 300-304 of two slots after cached ones, and a decode token", {{0, 500}}};
  for (int p = 40; p <= 44; ++p) prompt.tokens.push_back({1, p});
  for (int p = 300; p <= 304; ++p) prompt.tokens.push_back({3, p});
  out.push_back(prompt);
  return out;
}

template <typename X>
std::vector<X> to_raw(const std::vector<float>& v) {
  std::vector<X> x(v.size());
  for (size_t i = 0; i < v.size(); ++i) x[i] = to_x<X>(v[i]);
  return x;
}

// One batch on the device, with the initial contents of the arrays a decode step writes (qkv, the
// caches), which every run starts from.
template <typename X>
class DecodeStep {
 public:
  DecodeStep(const Shape& s, const Batch& b, std::mt19937& rng)
      : s_(s),
        b_(b),
        l_(layout_of(b)),
        qkv_(size_t(l_.N) * s.width()),
        k_(l_.cache_size(s)),
        v_(l_.cache_size(s)),
        out_(size_t(l_.N) * s.NH * s.HS),
        rows_(size_t(l_.Q)),
        slots_(size_t(l_.N)),
        positions_(size_t(l_.N)) {
    const size_t W = s.width(), qk = size_t(s.NH + s.NKV) * s.HS, vw = size_t(s.NKV) * s.HS;
    std::vector<float> qkv(size_t(l_.N) * W);
    for (int n = 0; n < l_.N; ++n) {
      const auto a = random_floats(qk, -2, 2, rng), v = random_floats(vw, -1, 1, rng);
      std::copy(a.begin(), a.end(), qkv.begin() + n * W);
      std::copy(v.begin(), v.end(), qkv.begin() + n * W + qk);
    }
    qkv0_ = to_raw<X>(round_to<X>(qkv));
    // The older keys and values of each slot, below its first position in the batch; NaN elsewhere.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> k(l_.cache_size(s), nan), v(l_.cache_size(s), nan);
    for (int slot = 0; slot < l_.slots; ++slot) {
      const size_t older = size_t(l_.first[slot]) * s.HS;
      if (older == 0) continue;
      for (int g = 0; g < s.NKV; ++g) {
        const size_t at = (size_t(slot) * s.NKV + g) * l_.max_length * s.HS;
        const auto kx = random_floats(older, -2, 2, rng), vx = random_floats(older, -1, 1, rng);
        std::copy(kx.begin(), kx.end(), k.begin() + at);
        std::copy(vx.begin(), vx.end(), v.begin() + at);
      }
    }
    k0_ = to_raw<X>(round_to<X>(k));
    v0_ = to_raw<X>(round_to<X>(v));
    std::vector<int32_t> slots, positions;
    for (const Token& t : b.tokens) slots.push_back(t.slot), positions.push_back(t.position);
    rows_.upload_raw(l_.rows);
    slots_.upload_raw(slots);
    positions_.upload_raw(positions);
  }

  const Layout& layout() const { return l_; }
  const Batch& batch() const { return b_; }

  // A decode step's two launches from the initial contents; returns out.
  std::vector<X> run(const float* table, float* scratch, cudaStream_t stream) {
    qkv_.upload_raw(qkv0_);
    k_.upload_raw(k0_);
    v_.upload_raw(v0_);
    out_.poison();
    meg::cuda::kv_cache_append<X>(qkv_.get(), k_.get(), v_.get(), slots_.get(), positions_.get(),
                                  s_.rope ? table : nullptr, l_.N, s_.NH, s_.NKV, s_.HS, l_.max_length, stream);
    meg::cuda::cached_attention<X>(out_.get(), qkv_.get(), k_.get(), v_.get(), rows_.get(), slots_.get(),
                                   positions_.get(), l_.Q, s_.NH, s_.NKV, s_.HS, l_.max_length, l_.longest,
                                   l_.new_keys, scratch, stream, s_.window);
    return out_.download_raw();
  }

  // Checks the caches and OUT, the output of run(), against the reference.
  void check(const std::vector<X>& out) const {
    const Shape& s = s_;
    const size_t W = s.width(), HS = size_t(s.HS);
    const auto qkv = qkv_.download_raw(), k = k_.download_raw(), v = v_.download_raw();

    // The caches: the initial ones with the batch's k and v heads at (slot, position).
    std::vector<X> k_want = k0_, v_want = v0_;
    for (int n = 0; n < l_.N; ++n) {
      const Token& t = b_.tokens[n];
      for (int g = 0; g < s.NKV; ++g) {
        const size_t at = ((size_t(t.slot) * s.NKV + g) * l_.max_length + t.position) * HS;
        const X* row = qkv.data() + n * W;
        std::copy(row + (s.NH + g) * HS, row + (s.NH + g + 1) * HS, k_want.begin() + at);
        std::copy(row + (s.NH + s.NKV + g) * HS, row + (s.NH + s.NKV + g + 1) * HS, v_want.begin() + at);
      }
    }
    CHECK(same_bits(k, k_want));
    CHECK(same_bits(v, v_want));

    // The reference, in double: each query's heads against its slot's keys [0, position], those of
    // the window only.
    std::vector<float> got;
    std::vector<double> want, bound, score, q(HS), acc(HS), vmax(HS);
    const double scale = 1.0 / std::sqrt(double(s.HS));
    for (int i = 0; i < l_.Q; ++i) {
      const int r = l_.rows[i];
      const Token& t = b_.tokens[r];
      for (int h = 0; h < s.NH; ++h) {
        const int g = h / (s.NH / s.NKV);
        const size_t head = (size_t(t.slot) * s.NKV + g) * l_.max_length * HS;
        for (size_t d = 0; d < HS; ++d) q[d] = from_x<X>(qkv[r * W + h * HS + d]);
        score.assign(size_t(t.position) + 1, 0.0);
        const int first = s.window < 0 ? 0 : std::max(0, t.position - s.window);
        double mx = -INFINITY;
        for (int j = first; j <= t.position; ++j) {
          double dot = 0;
          for (size_t d = 0; d < HS; ++d) dot += q[d] * from_x<X>(k[head + j * HS + d]);
          score[j] = dot * scale;
          mx = std::max(mx, score[j]);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        std::fill(vmax.begin(), vmax.end(), 0.0);
        double sum = 0;
        for (int j = first; j <= t.position; ++j) {
          const double p = std::exp(score[j] - mx);
          sum += p;
          for (size_t d = 0; d < HS; ++d) {
            const double x = from_x<X>(v[head + j * HS + d]);
            acc[d] += p * x;
            vmax[d] = std::max(vmax[d], std::abs(x));
          }
        }
        for (size_t d = 0; d < HS; ++d) {
          const double ref = acc[d] / sum;
          want.push_back(ref);
          bound.push_back(kArithmetic * vmax[d] + unit_roundoff<X>() * std::abs(ref));
          got.push_back(from_x<X>(out[(size_t(r) * s.NH + h) * HS + d]));
        }
      }
    }
    check_close_x<X>("cached_attention", got, want, bound, 1.0);

    // The rows that are not queried keep their poison (every byte 0xFF).
    std::vector<bool> queried(size_t(l_.N), false);
    for (const int r : l_.rows) queried[r] = true;
    const size_t row_bytes = size_t(s.NH) * HS * sizeof(X);
    const auto* bytes = reinterpret_cast<const unsigned char*>(out.data());
    size_t written = 0;
    for (int n = 0; n < l_.N; ++n)
      if (!queried[n])
        written += size_t(std::count_if(bytes + n * row_bytes, bytes + (n + 1) * row_bytes,
                                        [](unsigned char c) { return c != 0xFF; }));
    INFO("bytes written to rows that are not queried: " << written);
    CHECK(written == 0);
  }

 private:
  Shape s_;
  Batch b_;
  Layout l_;
  std::vector<X> qkv0_, k0_, v0_;
  DeviceBuffer<X> qkv_, k_, v_, out_;
  DeviceBuffer<int32_t> rows_, slots_, positions_;
};

template <typename X>
void check_shape(const Shape& s, std::mt19937& rng) {
  INFO(type_name<X>() << " " << describe(s));
  REQUIRE(meg::cuda::cached_attention_supports(s.HS));
  // A single query splits its keys: the merge is exercised. On Hopper a short one takes the staged
  // grid.
  REQUIRE(meg::cuda::cached_attention_splits(1, s.NH, s.NKV) > 1);
  if (current_device().compute_major >= 9) REQUIRE(meg::cuda::cached_attention_staged(1, s.NH, s.NKV, s.HS, 50));
  std::vector<std::unique_ptr<DecodeStep<X>>> steps;
  int max_q = 1, max_length = 1;
  for (const Batch& b : batches(s)) {
    steps.push_back(std::make_unique<DecodeStep<X>>(s, b, rng));
    max_q = std::max(max_q, steps.back()->layout().Q);
    max_length = std::max(max_length, steps.back()->layout().max_length);
  }
  // The scratch as the inference model sizes it: the splits, and with them the scratch, only fall
  // as the queries grow.
  size_t floats = 0;
  for (int q = 1; q <= max_q && meg::cuda::cached_attention_splits(q, s.NH, s.NKV) > 1; ++q)
    floats = std::max(floats, meg::cuda::cached_attention_scratch(q, s.NH, s.NKV, s.HS));
  DeviceBuffer<float> scratch(floats);
  MEG_CUDA_CHECK(cudaMemset(scratch.get(), 0, floats * sizeof(float)));
  float* scratch_ptr = floats > 0 ? scratch.get() : nullptr;
  DeviceBuffer<float> table(meg::cuda::rope_table(max_length, s.HS, 10000.0));
  const meg::cuda::Stream stream(cudaStreamDefault);  // ordered with the buffers' plain copies

  std::vector<std::vector<X>> first;
  for (const auto& step : steps) {
    const Layout& l = step->layout();
    INFO(step->batch().name << ": Q=" << l.Q << " new_keys=" << l.new_keys
                            << " grid splits=" << meg::cuda::cached_attention_splits(l.Q, s.NH, s.NKV)
                            << " staged=" << meg::cuda::cached_attention_staged(l.Q, s.NH, s.NKV, s.HS, l.longest));
    first.push_back(step->run(table.get(), scratch_ptr, stream.get()));
    step->check(first.back());
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    INFO(steps[i]->batch().name << ", run again");
    CHECK(same_bits(steps[i]->run(table.get(), scratch_ptr, stream.get()), first[i]));
  }
}

const std::vector<Shape> kShapes = {
    {12, 12, 64, false},  // GPT-2's heads
    {16, 4, 64, true},    // grouped-query, 4 query heads per kv head: one block of 4
    {8, 4, 64, true},     // 2 query heads per kv head
    {8, 2, 16, false},    // HS 16: two lanes per key row
    {16, 2, 128, true},   // HS 128, 8 query heads per kv head: two blocks of 4
    {6, 2, 40, true},     // groups of 3: one head per block; 5 of a key row's 8 lanes busy
};

}  // namespace

TEST_CASE("cached_attention after kv_cache_append attends as the CPU computes (fp32)", "[gpu][kernels]") {
  std::mt19937 rng(51);
  for (const Shape& s : kShapes) check_shape<float>(s, rng);
}

TEST_CASE("cached_attention after kv_cache_append attends as the CPU computes (bf16)", "[gpu][kernels]") {
  std::mt19937 rng(52);
  for (const Shape& s : kShapes) check_shape<__nv_bfloat16>(s, rng);
}

TEST_CASE("cached_attention reads only a sliding window's keys", "[gpu][kernels][window]") {
  std::mt19937 rng(53);
  const std::vector<Shape> windowed = {{12, 12, 64, false, 0}, {16, 4, 64, true, 100}, {8, 2, 16, false, 1},
                                       {16, 2, 128, true, 333}, {6, 2, 40, true, 10000}};
  for (const Shape& s : windowed) {
    check_shape<float>(s, rng);
    check_shape<__nv_bfloat16>(s, rng);
  }
}

TEST_CASE("cached_attention rejects new_keys below 1, longest outside the cache and unsupported shapes",
          "[gpu][kernels]") {
  const int NH = 4, NKV = 2, HS = 64, max_length = 16;
  DeviceBuffer<float> qkv(size_t(NH + 2 * NKV) * HS), k(size_t(NKV) * max_length * HS),
      v(size_t(NKV) * max_length * HS), out(size_t(NH) * HS);
  DeviceBuffer<int32_t> zero(3);  // rows, slots and positions of up to 3 queries
  zero.upload_raw({0, 0, 0});
  const size_t floats = meg::cuda::cached_attention_scratch(1, NH, NKV, HS);
  DeviceBuffer<float> scratch(floats);
  MEG_CUDA_CHECK(cudaMemset(scratch.get(), 0, floats * sizeof(float)));
  const auto launch = [&](int Q, int nh, int nkv, int hs, int new_keys, int longest = 1) {
    meg::cuda::cached_attention<float>(out.get(), qkv.get(), k.get(), v.get(), zero.get(), zero.get(), zero.get(),
                                       Q, nh, nkv, hs, max_length, longest, new_keys,
                                       floats > 0 ? scratch.get() : nullptr, nullptr);
  };
  CHECK_THROWS_AS(launch(1, NH, NKV, HS, 0), std::invalid_argument);
  CHECK_THROWS_AS(launch(1, NH, NKV, HS, -1), std::invalid_argument);
  CHECK_THROWS_AS(launch(3, NH, NKV, HS, 0), std::invalid_argument);
  CHECK_THROWS_AS(launch(1, NH, NKV, HS, 1, 0), std::invalid_argument);
  CHECK_THROWS_AS(launch(1, NH, NKV, HS, 1, max_length + 1), std::invalid_argument);
  // A pass of fresh prompts alone has no queries, and new_keys 0: nothing to do.
  CHECK_NOTHROW(launch(0, NH, NKV, HS, 0));
  CHECK_THROWS_AS(launch(1, 6, 4, HS, 1), std::invalid_argument);  // 6 query heads over 4 kv heads
  CHECK_THROWS_AS(launch(1, NH, NKV, 7, 1), std::invalid_argument);  // odd head size
  CHECK_FALSE(meg::cuda::cached_attention_supports(7));
  MEG_CUDA_CHECK(cudaDeviceSynchronize());
}
