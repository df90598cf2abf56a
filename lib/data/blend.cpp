#include "data/blend.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <future>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <thread>

#include "core/byte_stream.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "core/memory_limit.hpp"
#include "core/progress.hpp"
#include "core/thread_pool.hpp"

namespace meg {
namespace {

// Megatron's constants: the share of an epoch below which the final epoch is shuffled on its own,
// and the surplus of samples each input builds beyond what the blend is expected to draw.
constexpr double kSeparateFinalEpochThreshold = 0.80;
constexpr double kSurplus = 0.005;

// A document index longer than this means a tiny split repeated absurdly often: refuse it rather
// than exhaust memory.
constexpr uint64_t kMaxDocumentIndex = uint64_t(1) << 32;

// A whole string as a finite double, or nothing.
std::optional<double> parse_number(std::string_view text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || !std::isfinite(v)) return {};
  return v;
}

}  // namespace

const char* split_name(Split split) {
  switch (split) {
    case Split::kTrain: return "train";
    case Split::kValid: return "valid";
    case Split::kTest: return "test";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// Splits and weights

double numpy_sum(std::span<const double> a) {
  // numpy's pairwise_sum: below 8 values a plain loop, up to 128 eight running sums combined as a
  // tree, above that the two halves (cut at a multiple of 8) summed recursively.
  const size_t n = a.size();
  if (n < 8) {
    double sum = 0.0;
    for (double v : a) sum += v;
    return sum;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - n % 8; i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) sum += a[i];
    return sum;
  }
  size_t half = n / 2;
  half -= half % 8;
  return numpy_sum(a.first(half)) + numpy_sum(a.subspan(half));
}

std::vector<double> normalize_weights(std::span<const double> weights) {
  const double sum = numpy_sum(weights);
  std::vector<double> out(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) out[i] = weights[i] / sum;
  return out;
}

std::array<double, kNumSplits> parse_split(const std::string& text) {
  std::array<double, kNumSplits> w{};
  size_t count = 0, start = 0;
  while (true) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const auto v = parse_number(std::string_view(text).substr(start, comma - start));
    if (!v || *v < 0 || count == kNumSplits)
      input_error("--split '{}': expected up to three comma-separated non-negative numbers (train,valid,test)", text);
    w[count++] = *v;
    if (comma == text.size()) break;
    start = comma + 1;
  }
  if (numpy_sum(w) <= 0) input_error("--split '{}': the split weights sum to 0", text);
  const auto normalized = normalize_weights(w);
  std::copy(normalized.begin(), normalized.end(), w.begin());
  return w;
}

std::array<DocumentRange, kNumSplits> split_ranges(const std::array<double, kNumSplits>& split, uint64_t n) {
  // Book-ends are running sums of the weights, each rounded to a document (half to even, as
  // Python's round()), so consecutive splits share their edges and cover every document.
  std::array<DocumentRange, kNumSplits> ranges{};
  double low = 0.0;
  for (int s = 0; s < kNumSplits; ++s) {
    const double high = low + split[s];
    if (high > low) {
      ranges[s].begin = static_cast<uint64_t>(std::nearbyint(low * static_cast<double>(n)));
      ranges[s].end = static_cast<uint64_t>(std::nearbyint(high * static_cast<double>(n)));
    }
    low = high;
  }
  return ranges;
}

// ---------------------------------------------------------------------------------------------
// One input's split

uint64_t num_epochs(uint64_t tokens_per_epoch, uint64_t samples, uint64_t seq_length) {
  // Samples overlap by one token, so S samples need S*T + 1 tokens.
  const uint64_t needed = samples * seq_length + 1;
  return std::max<uint64_t>(1, (needed + tokens_per_epoch - 1) / tokens_per_epoch);
}

FinalEpoch final_epoch(uint64_t tokens_per_epoch, uint64_t epochs, uint64_t samples, uint64_t seq_length) {
  if (epochs <= 1) return {};
  FinalEpoch f;
  f.samples_before = ((epochs - 1) * tokens_per_epoch - 1) / seq_length;
  const uint64_t from_final = samples - f.samples_before;
  const uint64_t per_epoch = (tokens_per_epoch - 1) / seq_length;
  f.separate = from_final < static_cast<uint64_t>(kSeparateFinalEpochThreshold * static_cast<double>(per_epoch));
  return f;
}

std::vector<int32_t> build_document_index(DocumentRange docs, uint64_t epochs, bool separate_final_epoch,
                                          NumpyRandomState& rng) {
  if (separate_final_epoch && epochs > 1) {
    // The first epochs shuffled together, then the last one alone, from the same generator.
    auto index = build_document_index(docs, epochs - 1, false, rng);
    const auto last = build_document_index(docs, 1, false, rng);
    index.insert(index.end(), last.begin(), last.end());
    return index;
  }
  std::vector<int32_t> index(epochs * docs.size());
  for (uint64_t e = 0; e < epochs; ++e)
    std::iota(index.begin() + e * docs.size(), index.begin() + (e + 1) * docs.size(), static_cast<int32_t>(docs.begin));
  rng.shuffle(std::span<int32_t>(index));
  return index;
}

std::vector<int64_t> build_sample_index(std::span<const int32_t> lengths, std::span<const int32_t> document_index,
                                        uint64_t seq_length, uint64_t samples) {
  std::vector<int64_t> index(2 * (samples + 1));
  size_t position = 0;  // in the document index
  int64_t offset = 0;   // in that document
  for (uint64_t s = 1; s <= samples; ++s) {
    // Take T+1 tokens from here on; the next sample starts on the last of them.
    int64_t remaining = static_cast<int64_t>(seq_length) + 1;
    while (true) {
      const int64_t available = lengths[document_index[position]] - offset;
      if (remaining <= available) {
        offset += remaining - 1;
        break;
      }
      remaining -= available;
      if (++position == document_index.size())
        throw std::logic_error("sample index walked past the document index");
      offset = 0;
    }
    index[2 * s] = static_cast<int64_t>(position);
    index[2 * s + 1] = offset;
  }
  return index;
}

std::vector<int64_t> build_shuffle_index(uint64_t split_at, uint64_t total, NumpyRandomState& rng) {
  std::vector<int64_t> index(total);
  std::iota(index.begin(), index.end(), int64_t{0});
  rng.shuffle(std::span<int64_t>(index).first(split_at));
  rng.shuffle(std::span<int64_t>(index).subspan(split_at));
  return index;
}

GptIndices build_gpt_indices(std::span<const int32_t> lengths, DocumentRange docs, uint64_t requested,
                             uint64_t seq_length, uint32_t seed) {
  GptIndices g;
  g.docs = docs;
  g.requested = requested;
  for (uint64_t d = docs.begin; d < docs.end; ++d) g.tokens += static_cast<uint64_t>(lengths[d]);
  if (requested == 0) return g;
  if (g.tokens < 2) throw std::invalid_argument("a split needs at least 2 tokens to draw samples from");
  g.epochs = num_epochs(g.tokens, requested, seq_length);
  g.final = final_epoch(g.tokens, g.epochs, requested, seq_length);
  // Every split of every input starts from the same seed, as in Megatron.
  NumpyRandomState rng(seed);
  g.document_index = build_document_index(docs, g.epochs, g.final.separate, rng);
  g.samples = (g.epochs * g.tokens - 1) / seq_length;
  g.sample_index = build_sample_index(lengths, g.document_index, seq_length, g.samples);
  g.shuffle_index = build_shuffle_index(g.final.separate ? g.final.samples_before : g.samples, g.samples, rng);
  return g;
}

// ---------------------------------------------------------------------------------------------
// Blending

void build_blending_indices(std::span<const double> weights, std::span<uint16_t> dataset_index,
                            std::span<int64_t> dataset_sample_index) {
  std::vector<int64_t> taken(weights.size(), 0);
  for (size_t i = 0; i < dataset_index.size(); ++i) {
    const double at = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_error = weights[0] * at - static_cast<double>(taken[0]);
    for (size_t k = 1; k < weights.size(); ++k) {
      const double error = weights[k] * at - static_cast<double>(taken[k]);
      if (error > best_error) {
        best_error = error;
        best = k;
      }
    }
    dataset_index[i] = static_cast<uint16_t>(best);
    dataset_sample_index[i] = taken[best]++;
  }
}

uint64_t target_samples(uint64_t n, double weight) {
  return static_cast<uint64_t>(std::ceil(static_cast<double>(n) * weight));
}

uint64_t surplus_samples(uint64_t n, double weight) {
  return static_cast<uint64_t>(std::ceil(static_cast<double>(target_samples(n, weight)) * (1.0 + kSurplus)));
}

// ---------------------------------------------------------------------------------------------
// Command-line inputs

std::vector<BlendInput> parse_blend_arguments(const std::vector<std::string>& args) {
  if (args.empty()) input_error("no inputs: give WEIGHT PREFIX pairs");
  if (args.size() % 2 != 0)
    input_error("expected WEIGHT PREFIX pairs but got {} arguments (an odd number): '{}' has no partner",
                args.size(), args.back());
  std::vector<BlendInput> inputs;
  std::vector<double> weights;
  for (size_t i = 0; i < args.size(); i += 2) {
    const auto w = parse_number(args[i]);
    if (!w) input_error("argument {}: weight '{}' of {} is not a number", i + 1, args[i], args[i + 1]);
    if (*w < 0) input_error("argument {}: weight {} of {} is negative", i + 1, args[i], args[i + 1]);
    inputs.push_back({*w, args[i + 1]});
    weights.push_back(*w);
  }
  if (numpy_sum(weights) <= 0) input_error("the weights sum to 0: at least one must be positive");
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].weight == 0) input_error("argument {}: weight of {} is 0: leave the input out instead", 2 * k + 1, inputs[k].prefix);
  if (inputs.size() > std::numeric_limits<uint16_t>::max())
    input_error("{} inputs: a blend holds at most {}", inputs.size(), std::numeric_limits<uint16_t>::max());
  return inputs;
}

std::vector<BlendInput> parse_data_path(const std::vector<std::string>& words) {
  std::vector<std::string> args;
  for (const auto& w : words) {
    size_t at = 0;
    while ((at = w.find_first_not_of(" \t\n", at)) != std::string::npos) {
      const size_t end = std::min(w.find_first_of(" \t\n", at), w.size());
      args.push_back(w.substr(at, end - at));
      at = end;
    }
  }
  if (args.empty()) input_error("--data-path: no inputs: give WEIGHT PREFIX pairs or PREFIX ...");
  bool pairs = args.size() % 2 == 0;
  for (size_t i = 0; pairs && i < args.size(); i += 2) pairs = parse_number(args[i]).has_value();
  std::vector<BlendInput> inputs;
  if (pairs) {
    inputs = parse_blend_arguments(args);
  } else {
    for (const auto& prefix : args) {
      const double tokens = args.size() == 1 ? 1.0 : double(IndexedDataset(prefix).num_tokens());
      if (tokens == 0) input_error("--data-path: {} holds no tokens", prefix);
      inputs.push_back({tokens, prefix});
    }
  }
  for (auto& in : inputs) in.prefix = std::filesystem::absolute(in.prefix).lexically_normal().string();
  return inputs;
}

// ---------------------------------------------------------------------------------------------
// Writing the file

namespace {

// The file as a list of byte ranges, each array placed on an 8-byte boundary.
class Layout {
 public:
  uint64_t add(const void* data, size_t bytes) {
    static constexpr uint8_t kZeros[8] = {};
    const uint64_t at = size_;
    if (bytes > 0) chunks_.push_back({static_cast<const uint8_t*>(data), bytes});
    size_ += bytes;
    if (size_ % 8 != 0) {
      chunks_.push_back({kZeros, 8 - size_ % 8});
      size_ += 8 - size_ % 8;
    }
    return at;
  }
  template <typename T>
  uint64_t add_array(const std::vector<T>& v) {
    return v.empty() ? 0 : add(v.data(), v.size() * sizeof(T));
  }
  uint64_t size() const { return size_; }
  const std::vector<std::span<const uint8_t>>& chunks() const { return chunks_; }

 private:
  std::vector<std::span<const uint8_t>> chunks_;
  uint64_t size_ = 0;
};

struct OpenInput {
  IndexedDataset dataset;
  std::vector<int32_t> lengths;  // of every document, read once and shared by the splits
};

// The option that sets a split's sample count.
const char* samples_option(int s) {
  static constexpr const char* kOptions[kNumSplits] = {"--samples", "--valid-samples", "--test-samples"};
  return kOptions[s];
}

// Refuses, before anything is allocated, sample counts the inputs cannot serve: samples whose
// tokens overflow the 64-bit offsets, a split shorter than one sample of T+1 tokens (it would be
// repeated for every sample), and indices larger than the memory this process may use.
void check_sizes(const std::vector<BlendInput>& inputs, const BlendOptions& options, std::span<const double> weights,
                 const std::vector<std::array<DocumentRange, kNumSplits>>& ranges,
                 const std::vector<std::array<uint64_t, kNumSplits>>& tokens,
                 const std::array<uint64_t, kNumSplits>& requested) {
  const uint64_t T = options.seq_length;
  constexpr uint64_t kMaxTokens = uint64_t(1) << 62;  // sample offsets are int64, with room to spare
  std::array<double, kNumSplits> bytes{};
  for (int s = 0; s < kNumSplits; ++s) {
    if (requested[s] == 0) continue;
    const auto name = split_name(Split(s));
    if (requested[s] > kMaxTokens / T)
      input_error("{} {}: that many samples of --seq-length {} tokens is more than 2^62 tokens", samples_option(s),
                  requested[s], T);
    for (size_t k = 0; k < inputs.size(); ++k) {
      const uint64_t asked = surplus_samples(requested[s], weights[k]);
      if (asked == 0) continue;
      const auto& r = ranges[k][s];
      if (tokens[k][s] < T + 1)
        input_error("{}: the {} split has {} documents and {} tokens, fewer than one sample of --seq-length {} + 1 "
                    "(change --seq-length, --split or {})",
                    inputs[k].prefix, name, r.size(), tokens[k][s], T, samples_option(s));
      // What build_gpt_indices allocates for the input's split, and the blend's share of it.
      const uint64_t epochs = num_epochs(tokens[k][s], asked, T);
      const double samples = (double(epochs) * double(tokens[k][s]) - 1) / double(T);
      bytes[s] += double(epochs) * double(r.size()) * sizeof(int32_t) + samples * 3 * sizeof(int64_t) +
                  double(target_samples(requested[s], weights[k])) * (sizeof(uint16_t) + sizeof(int64_t));
    }
  }
  const double total = bytes[0] + bytes[1] + bytes[2];
  const uint64_t usable = usable_memory();
  if (total > double(usable)) {
    const int s = int(std::max_element(bytes.begin(), bytes.end()) - bytes.begin());
    input_error("{} {}: the blend's indices would take {} of memory, more than the {} this process may use",
                samples_option(s), requested[s], human_count(total, "B"), human_count(double(usable), "B"));
  }
}

// The default sample count of a split is none when one input's part of it cannot fill a sample:
// a small input's 1 in 1000 test documents under the default --split, say. Training would then go
// without validation, or a later evaluation without a test split, with nothing said; so each
// input to blame is named (splits the options ask nothing of, with weight 0 or 0 samples given,
// are empty by request).
void warn_empty_splits(const std::vector<BlendInput>& inputs, const BlendOptions& options,
                       const std::array<double, kNumSplits>& split,
                       const std::vector<std::array<DocumentRange, kNumSplits>>& ranges,
                       const std::vector<std::array<uint64_t, kNumSplits>>& tokens,
                       const std::array<uint64_t, kNumSplits>& requested) {
  const uint64_t T = options.seq_length;
  for (int s = 0; s < kNumSplits; ++s) {
    if (requested[s] > 0 || options.samples[s] || split[s] == 0) continue;
    const auto name = split_name(Split(s));
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (tokens[k][s] >= T + 1) continue;
      const uint64_t docs = ranges[k][s].size();
      log::warn("{}: its {} split (--split {}) holds {} of its {} documents and {} tokens, less than one sample of "
                "--seq-length {} + 1: the blend has no {} samples",
                inputs[k].prefix, name, options.split, docs, ranges[k].back().end, tokens[k][s], T, name);
    }
  }
}

}  // namespace

uint64_t blend_fingerprint(const BlendHeader& header, std::span<const BlendInputRecord> inputs,
                           std::span<const std::string_view> prefixes, bool with_requested) {
  Hasher fp;
  fp.update_value(kBlendVersion);
  fp.update_value(header.seq_length);
  fp.update_value(header.seed);
  fp.update_value(header.split);
  if (with_requested) fp.update_value(header.requested);
  fp.update_value(static_cast<uint64_t>(inputs.size()));
  for (size_t k = 0; k < inputs.size(); ++k) {
    fp.update_value(inputs[k].prefix_bytes);
    fp.update(prefixes[k]);
    fp.update_value(inputs[k].weight);
    fp.update_value(inputs[k].idx_hash);
    fp.update_value(inputs[k].bin_bytes);
  }
  return fp.digest();
}

uint64_t planned_blend_fingerprint(const std::vector<BlendInput>& inputs, const BlendOptions& options) {
  BlendHeader header{};
  header.seq_length = options.seq_length;
  header.seed = options.seed;
  const auto split = parse_split(options.split);
  for (int s = 0; s < kNumSplits; ++s) {
    if (!options.samples[s]) throw std::invalid_argument("planned_blend_fingerprint: every sample count is needed");
    header.split[s] = split[s];
    header.requested[s] = *options.samples[s];
  }
  std::vector<BlendInputRecord> records(inputs.size());
  std::vector<std::string_view> prefixes;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const IndexedDataset d(inputs[k].prefix);
    records[k].prefix_bytes = inputs[k].prefix.size();
    records[k].weight = inputs[k].weight;
    records[k].idx_hash = d.idx_fingerprint();
    records[k].bin_bytes = d.bin_bytes();
    prefixes.push_back(inputs[k].prefix);
  }
  return blend_fingerprint(header, records, prefixes);
}

BlendStats build_blend(const std::vector<BlendInput>& inputs, const BlendOptions& options, const std::string& output) {
  const uint64_t T = options.seq_length;
  if (T < 2) input_error("--seq-length must be at least 2 (got {})", T);
  if (!options.samples[0]) input_error("--samples is required");
  if (inputs.empty()) input_error("no inputs: give WEIGHT PREFIX pairs");
  const auto split = parse_split(options.split);
  const size_t K = inputs.size();

  std::vector<OpenInput> open;
  open.reserve(K);
  for (const auto& in : inputs) {
    IndexedDataset d(in.prefix);
    if (d.num_sequences() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      input_error("{}.idx: {} documents: more than the 32-bit document index holds", in.prefix, d.num_sequences());
    std::vector<int32_t> lengths(d.num_sequences());
    for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = d.sequence_length(i);
    open.push_back({std::move(d), std::move(lengths)});
  }

  // Megatron normalizes the weights once for the per-input sample counts and once more inside the
  // blended dataset; the second pass can move the last bit, so both are kept.
  std::vector<double> raw(K);
  for (size_t k = 0; k < K; ++k) raw[k] = inputs[k].weight;
  const auto weights = normalize_weights(raw);
  const auto blend_weights = normalize_weights(weights);

  std::vector<std::array<DocumentRange, kNumSplits>> ranges(K);
  std::vector<std::array<uint64_t, kNumSplits>> tokens(K);
  for (size_t k = 0; k < K; ++k) {
    ranges[k] = split_ranges(split, open[k].lengths.size());
    for (int s = 0; s < kNumSplits; ++s)
      for (uint64_t d = ranges[k][s].begin; d < ranges[k][s].end; ++d) tokens[k][s] += open[k].lengths[d];
  }

  std::array<uint64_t, kNumSplits> requested{};
  for (int s = 0; s < kNumSplits; ++s) {
    const auto name = split_name(Split(s));
    if (options.samples[s]) {
      requested[s] = *options.samples[s];
      if (requested[s] > 0 && split[s] == 0)
        input_error("{} {} samples were asked for but --split {} gives the {} split no documents", requested[s], name,
                    options.split, name);
    } else {
      // One epoch of the split over all inputs; none when an input's split cannot fill a sample.
      for (size_t k = 0; k < K; ++k) {
        if (tokens[k][s] < T + 1) {
          requested[s] = 0;
          break;
        }
        requested[s] += (tokens[k][s] - 1) / T;
      }
    }
  }

  check_sizes(inputs, options, weights, ranges, tokens, requested);
  warn_empty_splits(inputs, options, split, ranges, tokens, requested);

  // The blend depends only on the weights and the sample counts, so it comes first: it says how
  // many samples each input's split must provide.
  std::array<std::vector<uint16_t>, kNumSplits> dataset_index;
  std::array<std::vector<int64_t>, kNumSplits> dataset_sample;
  std::vector<std::array<uint64_t, kNumSplits>> asked(K);
  for (int s = 0; s < kNumSplits; ++s) {
    uint64_t size = 0;
    for (size_t k = 0; k < K; ++k) size += target_samples(requested[s], weights[k]);
    dataset_index[s].resize(size);
    dataset_sample[s].resize(size);
    build_blending_indices(blend_weights, dataset_index[s], dataset_sample[s]);
    std::vector<uint64_t> taken(K, 0);
    for (uint16_t k : dataset_index[s]) ++taken[k];

    for (size_t k = 0; k < K; ++k) {
      asked[k][s] = surplus_samples(requested[s], weights[k]);
      if (asked[k][s] == 0) continue;
      const auto& r = ranges[k][s];
      const auto name = split_name(Split(s));
      // The surplus and the whole epochs built for it almost always cover what the greedy blend
      // draws; with many inputs and few samples they may not, and Megatron then fails with an
      // IndexError in training. Building what the blend draws keeps the indices Megatron's
      // wherever Megatron works.
      const uint64_t built = (num_epochs(tokens[k][s], asked[k][s], T) * tokens[k][s] - 1) / T;
      if (taken[k] > built) asked[k][s] = taken[k];
      const uint64_t epochs = num_epochs(tokens[k][s], asked[k][s], T);
      if (epochs > kMaxDocumentIndex / std::max<uint64_t>(1, r.size()))
        input_error("{}: the {} split ({} tokens) would be repeated {} times to give {} samples: too small for this blend",
                    inputs[k].prefix, name, tokens[k][s], epochs, asked[k][s]);
    }
  }

  // The inputs' splits are independent: build them on all cores.
  std::vector<std::array<GptIndices, kNumSplits>> built(K);
  {
    ThreadPool pool(std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), K * kNumSplits)));
    std::vector<std::future<void>> jobs;
    for (size_t k = 0; k < K; ++k)
      for (int s = 0; s < kNumSplits; ++s)
        jobs.push_back(pool.submit([&, k, s] {
          built[k][s] = build_gpt_indices(open[k].lengths, ranges[k][s], asked[k][s], T, options.seed);
        }));
    for (auto& j : jobs) j.get();
  }

  // Records, then the prefixes, then the arrays.
  BlendHeader header{};
  std::copy(std::begin(kBlendMagic), std::end(kBlendMagic), header.magic);
  header.version = kBlendVersion;
  header.num_inputs = static_cast<uint32_t>(K);
  header.seed = options.seed;
  header.seq_length = T;
  std::vector<BlendInputRecord> records(K);
  Layout layout;
  layout.add(&header, sizeof(header));
  layout.add(records.data(), records.size() * sizeof(BlendInputRecord));
  for (size_t k = 0; k < K; ++k) {
    records[k].prefix_offset = layout.size();
    records[k].prefix_bytes = inputs[k].prefix.size();
    layout.add(inputs[k].prefix.data(), inputs[k].prefix.size());
  }
  for (size_t k = 0; k < K; ++k) {
    auto& rec = records[k];
    rec.weight = inputs[k].weight;
    rec.normalized = weights[k];
    rec.idx_hash = open[k].dataset.idx_fingerprint();
    rec.bin_bytes = open[k].dataset.bin_bytes();
    rec.documents = open[k].dataset.num_sequences();
    for (int s = 0; s < kNumSplits; ++s) {
      const auto& g = built[k][s];
      auto& r = rec.splits[s];
      r.begin = g.docs.begin;
      r.end = g.docs.end;
      r.tokens = g.tokens;
      r.epochs = g.epochs;
      r.requested = g.requested;
      r.samples = g.samples;
      r.flags = g.final.separate ? kBlendFinalEpochSeparate : 0;
      r.document_index = layout.add_array(g.document_index);
      r.sample_index = layout.add_array(g.sample_index);
      r.shuffle_index = layout.add_array(g.shuffle_index);
    }
  }
  for (int s = 0; s < kNumSplits; ++s) {
    header.split[s] = split[s];
    header.requested[s] = requested[s];
    header.samples[s] = dataset_index[s].size();
    header.dataset_index[s] = layout.add_array(dataset_index[s]);
    header.dataset_sample[s] = layout.add_array(dataset_sample[s]);
  }
  header.file_size = layout.size();

  std::vector<std::string_view> prefixes;
  for (const auto& in : inputs) prefixes.push_back(in.prefix);
  header.fingerprint = blend_fingerprint(header, records, prefixes);

  Hasher sum;
  const auto& chunks = layout.chunks();
  sum.update(chunks[0].data() + kBlendChecksummed, chunks[0].size() - kBlendChecksummed);
  for (size_t i = 1; i < chunks.size(); ++i) sum.update(chunks[i].data(), chunks[i].size());
  header.checksum = sum.digest();

  ByteWriter out(output);
  for (const auto& c : chunks) out.write(c.data(), c.size());
  out.commit();
  return {{header.samples[0], header.samples[1], header.samples[2]}, layout.size()};
}

}  // namespace meg
