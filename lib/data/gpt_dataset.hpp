// Reading a blend file (data/blend.hpp writes it): BlendFile maps and checks the file, GptDataset
// adds the inputs it was built from and hands out samples of T+1 tokens for training.
//
//   meg::GptDataset data("data/train.blend");
//   std::vector<int32_t> tokens(data.seq_length() + 1);
//   for (uint64_t i = 0; i < data.num_samples(meg::Split::kTrain); ++i) data.sample(meg::Split::kTrain, i, tokens.data());
//
// Sample i of a split is what Megatron's BlendedDataset returns for index i: the input named by the
// dataset index, its sample through the shuffle index, and the tokens between that sample's
// boundaries in the sample index, read from the input's documents in document-index order.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mapped_file.hpp"
#include "data/blend.hpp"
#include "data/indexed_dataset.hpp"

namespace meg {

class BlendFile {
 public:
  // Maps PATH and checks magic, version, size, checksum and that every array lies inside the file.
  // InputError naming the file and the problem otherwise. Does not open the inputs.
  explicit BlendFile(const std::string& path);

  const std::string& path() const { return map_.path(); }
  const BlendHeader& header() const { return header_; }
  size_t num_inputs() const { return inputs_.size(); }
  const BlendInputRecord& input(size_t k) const { return inputs_[k]; }
  std::string_view prefix(size_t k) const;

  // The arrays of input K's SPLIT, and of the blend of SPLIT, read in place from the map.
  std::span<const int32_t> document_index(size_t k, Split s) const { return arrays_[k][int(s)].document_index; }
  std::span<const int64_t> sample_index(size_t k, Split s) const { return arrays_[k][int(s)].sample_index; }
  std::span<const int64_t> shuffle_index(size_t k, Split s) const { return arrays_[k][int(s)].shuffle_index; }
  std::span<const uint16_t> dataset_index(Split s) const { return dataset_index_[int(s)]; }
  std::span<const int64_t> dataset_sample(Split s) const { return dataset_sample_[int(s)]; }

 private:
  template <typename T>
  std::span<const T> array(uint64_t offset, uint64_t count, const char* what) const;

  struct SplitArrays {
    std::span<const int32_t> document_index;
    std::span<const int64_t> sample_index, shuffle_index;
  };
  MappedFile map_;
  BlendHeader header_{};
  std::vector<BlendInputRecord> inputs_;
  std::vector<std::array<SplitArrays, kNumSplits>> arrays_;
  std::array<std::span<const uint16_t>, kNumSplits> dataset_index_;
  std::array<std::span<const int64_t>, kNumSplits> dataset_sample_;
};

class GptDataset {
 public:
  // Opens the blend and its inputs, and refuses a blend whose inputs changed since it was built.
  explicit GptDataset(const std::string& blend_path);

  const BlendFile& blend() const { return blend_; }
  uint64_t seq_length() const { return blend_.header().seq_length; }  // samples hold one token more
  uint64_t num_samples(Split s) const { return blend_.header().samples[int(s)]; }
  uint64_t fingerprint() const { return blend_.header().fingerprint; }
  // The fingerprint without the sample counts (blend_fingerprint): the same for blends of the same
  // data and shuffles built for more or fewer samples.
  uint64_t source_fingerprint() const;

  // Writes the seq_length() + 1 tokens of sample I (< num_samples(SPLIT)) to OUT.
  void sample(Split split, uint64_t i, int32_t* out) const;

  // Where sample I's tokens come from: its input, and the documents (sequences of that input's
  // .idx) its seq_length() + 1 tokens are read from, in token order, as Megatron's GPTDataset
  // returns them ("document_ids"). RETRO's query stage keeps a sample's neighbours out of these.
  struct SampleDocuments {
    size_t input = 0;
    std::vector<int32_t> documents;
  };
  SampleDocuments sample_documents(Split split, uint64_t i) const;

 private:
  // Sample I of SPLIT located and checked: its input, and the positions [first, last] of the
  // input's document index it spans, from token offset FROM of the first to token TO of the last.
  struct Span {
    size_t input;
    uint64_t first, last, from, to;
  };
  Span locate(Split split, uint64_t i) const;
  // The document at position POS of SPAN's document index; InputError when out of range.
  int32_t document_at(Split split, uint64_t i, const Span& span, uint64_t pos) const;
  [[noreturn]] void corrupt(Split split, uint64_t i, const char* what) const;

  BlendFile blend_;
  std::vector<IndexedDataset> inputs_;
};

// What meg-blend --dump shows: options, and per input its weight, documents, tokens, epochs and
// samples per split, with the share of each split the blend actually draws from it.
nlohmann::ordered_json describe_blend(const BlendFile& blend);
std::string format_blend_description(const nlohmann::ordered_json& info);

}  // namespace meg
