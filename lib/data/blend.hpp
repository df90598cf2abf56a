// meg-blend's work: Megatron-Core's GPT dataset indices for every input and split, the blend
// index over the inputs, and the blend file that holds them all (read by data/gpt_dataset.hpp).
//
// For each input and each of the train/valid/test splits, as Megatron's GPTDataset builds them:
//   document index  the split's documents repeated once per epoch and shuffled
//   sample index    where each sample starts: (position in the document index, token offset); sample
//                   j runs to the start of sample j+1 plus one token, so samples of T+1 tokens
//                   overlap by one token and cross document edges
//   shuffle index   a permutation of the samples
// and per split, as Megatron's BlendedDataset builds them:
//   dataset index   which input sample i comes from
//   dataset sample  which of that input's samples it is
//
// A "document" here is a sequence of the .idx, the unit Megatron's GPT dataset splits and shuffles;
// meg-index, and Megatron's preprocess_data without --split-sentences, write one per document.
// Every shuffle uses numpy's RandomState(seed), reproduced in data/numpy_random.hpp, so the indices
// equal Megatron's for the same data, split, sequence length, sample counts and seed.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/indexed_dataset.hpp"
#include "data/numpy_random.hpp"

namespace meg {

enum class Split : int { kTrain = 0, kValid = 1, kTest = 2 };
inline constexpr int kNumSplits = 3;
const char* split_name(Split split);

// ---------------------------------------------------------------------------------------------
// The steps, one function each (Megatron's names in brackets).

// "969,30,1" -> the weights normalized to sum 1 (parse_and_normalize_split); up to three
// non-negative numbers, missing ones are 0. InputError when malformed or all zero.
std::array<double, kNumSplits> parse_split(const std::string& text);

// numpy.sum of float64 values: pairwise summation, whose rounding Megatron's normalize() inherits.
double numpy_sum(std::span<const double> values);
// Weights divided by their numpy sum (normalize).
std::vector<double> normalize_weights(std::span<const double> weights);

// The documents [begin, end) of each split of a dataset of N documents (the split matrix of
// convert_split_vector_to_split_matrix, rounded as Python's round(): half to even). A split of
// weight 0 is empty.
struct DocumentRange {
  uint64_t begin = 0, end = 0;
  uint64_t size() const { return end - begin; }
};
std::array<DocumentRange, kNumSplits> split_ranges(const std::array<double, kNumSplits>& split, uint64_t n);

// The smallest number of epochs whose tokens give SAMPLES samples of T+1 tokens (_get_num_epochs).
uint64_t num_epochs(uint64_t tokens_per_epoch, uint64_t samples, uint64_t seq_length);

// Whether the last epoch is shuffled on its own: when it contributes less than 80% of an epoch's
// samples, so that its samples are not spread thinly over the whole run (_build_document_sample_
// shuffle_indices). Also gives the number of samples before the final epoch.
struct FinalEpoch {
  bool separate = false;
  uint64_t samples_before = 0;
};
FinalEpoch final_epoch(uint64_t tokens_per_epoch, uint64_t epochs, uint64_t samples, uint64_t seq_length);

// Documents [begin, end) once per epoch, shuffled (_build_document_index).
std::vector<int32_t> build_document_index(DocumentRange docs, uint64_t epochs, bool separate_final_epoch,
                                          NumpyRandomState& rng);

// Sample boundaries as (document index position, offset) pairs, SAMPLES + 1 of them
// (build_sample_idx, dropping the last partial sample). LENGTHS are the token counts of the
// dataset's documents, indexed by document id.
std::vector<int64_t> build_sample_index(std::span<const int32_t> lengths, std::span<const int32_t> document_index,
                                        uint64_t seq_length, uint64_t samples);

// [0, SPLIT_AT) shuffled, followed by [SPLIT_AT, TOTAL) shuffled (_build_shuffle_index).
std::vector<int64_t> build_shuffle_index(uint64_t split_at, uint64_t total, NumpyRandomState& rng);

// Greedy blending (build_blending_indices): sample i comes from the input whose share lags its
// weight the most, weight * max(i, 1) - taken so far, ties to the lowest index.
void build_blending_indices(std::span<const double> weights, std::span<uint16_t> dataset_index,
                            std::span<int64_t> dataset_sample_index);

// Samples Megatron's builder asks of each input for a split of N samples: the blend draws
// ceil(N * weight) (the target) and the input builds 0.5% more (the surplus) so the greedy blend
// never runs past its end (_get_size_per_split_per_dataset).
uint64_t target_samples(uint64_t n, double weight);
uint64_t surplus_samples(uint64_t n, double weight);

// The three indices of one input's split.
struct GptIndices {
  DocumentRange docs;
  uint64_t tokens = 0, epochs = 0, requested = 0, samples = 0;
  FinalEpoch final;
  std::vector<int32_t> document_index;
  std::vector<int64_t> sample_index, shuffle_index;
};
// Empty (no epochs, no samples) when REQUESTED is 0. LENGTHS as for build_sample_index.
GptIndices build_gpt_indices(std::span<const int32_t> lengths, DocumentRange docs, uint64_t requested,
                             uint64_t seq_length, uint32_t seed);

// ---------------------------------------------------------------------------------------------
// Building a blend file.

struct BlendInput {
  double weight = 0;
  std::string prefix;  // stored as given: relative prefixes are resolved by the reader's directory
};

// "W1 PREFIX1 W2 PREFIX2 ..." from the command line. InputError on an odd count, a weight that is
// not a non-negative number, a weight of 0, or weights summing to 0.
std::vector<BlendInput> parse_blend_arguments(const std::vector<std::string>& args);

// Megatron's --data-path: WEIGHT PREFIX pairs "W1 P1 W2 P2 ...", or prefixes alone "P1 P2 ..."
// (an odd count, or a weight that is not a number, means prefixes alone), in one or more WORDS
// that may each hold several separated by spaces. Prefixes alone are weighed by their tokens
// (Megatron weighs them by their samples, the same shares to a sample). The prefixes are made
// absolute: the blend that names them is written elsewhere. InputError as parse_blend_arguments.
std::vector<BlendInput> parse_data_path(const std::vector<std::string>& words);

struct BlendOptions {
  uint64_t seq_length = 0;
  uint32_t seed = 1234;  // Megatron's default --seed
  std::string split = "969,30,1";
  // Samples per split. Train must be given; valid and test default to one epoch of the split (its
  // tokens over all inputs, in samples of T+1), or 0 when an input's split is shorter than a sample.
  std::array<std::optional<uint64_t>, kNumSplits> samples;
};

struct BlendStats {
  std::array<uint64_t, kNumSplits> samples{};
  uint64_t bytes = 0;
};

// Opens the inputs, builds every index and writes OUTPUT atomically (nothing appears under that
// name unless the whole file was written).
BlendStats build_blend(const std::vector<BlendInput>& inputs, const BlendOptions& options, const std::string& output);

// ---------------------------------------------------------------------------------------------
// The blend file, version 1 (man/meg-formats.5, BLEND FILE). Little-endian; the records below are
// written as they lie in memory, every array starts on an 8-byte boundary, so a reader maps the
// file and uses the arrays in place.

static_assert(std::endian::native == std::endian::little, "the blend file is little-endian");

inline constexpr char kBlendMagic[8] = {'M', 'E', 'G', 'B', 'L', 'E', 'N', 'D'};
inline constexpr uint32_t kBlendVersion = 1;
inline constexpr uint64_t kBlendChecksummed = 16;  // the checksum covers every byte from here on

struct BlendHeader {
  char magic[8];
  uint64_t checksum;     // XXH64 of bytes [16, file_size)
  uint32_t version;
  uint32_t num_inputs;
  uint64_t file_size;
  uint64_t fingerprint;  // XXH64 of the options and every input's prefix, weight and fingerprint
  uint64_t seed;
  uint64_t seq_length;   // T: samples hold T+1 tokens
  double split[kNumSplits];              // normalized split weights
  uint64_t requested[kNumSplits];        // samples asked for, per split
  uint64_t samples[kNumSplits];          // blend length per split: sum of the inputs' targets
  uint64_t dataset_index[kNumSplits];    // offset of uint16[samples]: the input of each sample
  uint64_t dataset_sample[kNumSplits];   // offset of int64[samples]: the sample of that input
};
static_assert(sizeof(BlendHeader) == 176);

struct BlendSplitRecord {
  uint64_t begin, end;      // the split's documents [begin, end)
  uint64_t tokens;          // tokens per epoch
  uint64_t epochs;
  uint64_t requested;       // samples asked of this input (target plus surplus)
  uint64_t samples;         // samples the epochs hold
  uint64_t flags;           // bit 0: the final epoch was shuffled on its own
  uint64_t document_index;  // offset of int32[epochs * (end - begin)]
  uint64_t sample_index;    // offset of int64[2 * (samples + 1)], 0 when samples is 0
  uint64_t shuffle_index;   // offset of int64[samples]
};
static_assert(sizeof(BlendSplitRecord) == 80);

struct BlendInputRecord {
  double weight;            // as given
  double normalized;        // weight / sum of weights
  uint64_t idx_hash;        // XXH64 of PREFIX.idx
  uint64_t bin_bytes;       // size of PREFIX.bin
  uint64_t documents;       // documents (sequences) in PREFIX.idx
  uint64_t prefix_offset;   // the prefix as given, UTF-8, no terminator
  uint64_t prefix_bytes;
  BlendSplitRecord splits[kNumSplits];
};
static_assert(sizeof(BlendInputRecord) == 296);

inline constexpr uint64_t kBlendFinalEpochSeparate = 1;

// The fingerprint a blend file holds: the XXH64 of its options (sequence length, seed, split, and
// with WITH_REQUESTED the sample counts asked for) and of every input's prefix, weight, .idx hash
// and .bin size, taken from its header, its input records and their PREFIXES. Without the sample
// counts it names the data a blend draws from and how it shuffles it, whatever its length.
uint64_t blend_fingerprint(const BlendHeader& header, std::span<const BlendInputRecord> inputs,
                           std::span<const std::string_view> prefixes, bool with_requested = true);
// The fingerprint build_blend(INPUTS, OPTIONS) would give its file, read from the inputs' indices
// without building anything; OPTIONS must give every split's sample count.
uint64_t planned_blend_fingerprint(const std::vector<BlendInput>& inputs, const BlendOptions& options);

}  // namespace meg
