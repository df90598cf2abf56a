// Megatron-LM's indexed dataset: PREFIX.bin holds the tokens of every sequence back to back,
// PREFIX.idx describes them (format in man/meg-formats.5):
//
//   "MMIDIDX\0\0", u64 version (1), u8 dtype code, u64 sequence count S, u64 document count D+1,
//   i32 sequence lengths[S], i64 sequence byte offsets[S], i64 document indices[D+1]
//
// A document is a run of sequences (meg writes one sequence per document, as Megatron's
// preprocess_data does without --split-sentences). The reader maps both files and hands out
// documents as views into the map: no copy, whatever the size of the corpus.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/byte_stream.hpp"
#include "core/bytes.hpp"
#include "core/mapped_file.hpp"

namespace meg {

// Megatron's dtype codes (numpy types).
enum class TokenDtype : uint8_t { kUint8 = 1, kInt8 = 2, kInt16 = 3, kInt32 = 4, kInt64 = 5, kFloat64 = 6, kFloat32 = 7, kUint16 = 8 };

size_t dtype_size(TokenDtype dtype);
const char* dtype_name(TokenDtype dtype);
bool dtype_is_integer(TokenDtype dtype);
// Megatron's choice: uint16 when the vocabulary has fewer than 65500 entries, int32 otherwise.
TokenDtype dtype_for_vocab(uint64_t vocab_size);

// Tokens of one sequence or document, read in place from the mapped .bin file.
struct TokenView {
  const uint8_t* data = nullptr;
  size_t size = 0;
  TokenDtype dtype = TokenDtype::kUint16;

  int64_t operator[](size_t i) const;
  // Copies tokens [FROM, FROM+N) as int32 into OUT.
  void copy_to(int32_t* out, size_t from, size_t n) const;
  std::vector<int32_t> to_vector() const;
  size_t bytes() const { return size * dtype_size(dtype); }
};

class IndexedDataset {
 public:
  // Maps PREFIX.idx and PREFIX.bin and checks the whole structure, so that every view it hands
  // out lies inside the .bin: lengths non-negative, each sequence starting where the one before
  // ends, the last ending at the .bin's end, document indices rising from 0 to the sequence count
  // (O(sequences), no token read). InputError naming the .idx, the offset and the entry otherwise.
  explicit IndexedDataset(const std::string& prefix);

  const std::string& prefix() const { return prefix_; }
  TokenDtype dtype() const { return dtype_; }
  size_t num_sequences() const { return num_sequences_; }
  size_t num_documents() const { return num_doc_indices_ - 1; }
  uint64_t num_tokens() const { return bin_.size() / dtype_size(dtype_); }

  // The index arrays, read from the map (they are not aligned in the file, so through memcpy).
  int32_t sequence_length(size_t i) const { return load<int32_t>(lengths_, i); }
  int64_t sequence_pointer(size_t i) const { return load<int64_t>(pointers_, i); }
  int64_t document_index(size_t i) const { return load<int64_t>(doc_indices_, i); }

  TokenView sequence(size_t i) const;
  TokenView document(size_t i) const;  // all its sequences (they are contiguous in .bin)
  size_t document_length(size_t i) const;

  // What opening does not read: every token, each an integer id, non-negative and, with
  // VOCAB_SIZE > 0, below it. InputError naming the .bin offset of the first bad one.
  void verify(uint64_t vocab_size = 0) const;

  // Bytes of the .idx and .bin, and an XXH64 of the .idx: identifies the dataset for fingerprints.
  uint64_t idx_fingerprint() const;
  size_t bin_bytes() const { return bin_.size(); }

 private:
  template <typename T>
  static T load(const uint8_t* base, size_t i) { return load_unaligned<T>(base + i * sizeof(T)); }
  void check_structure() const;

  std::string prefix_;
  MappedFile idx_, bin_;
  TokenDtype dtype_{};
  size_t num_sequences_ = 0, num_doc_indices_ = 0;
  const uint8_t* lengths_ = nullptr;
  const uint8_t* pointers_ = nullptr;
  const uint8_t* doc_indices_ = nullptr;
};

class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, TokenDtype dtype);

  // One document of one sequence; an empty document gets no sequence, as in Megatron.
  void add_document(const TokenView& tokens);
  void add_document(std::span<const int32_t> tokens) {
    add_document(TokenView{reinterpret_cast<const uint8_t*>(tokens.data()), tokens.size(), TokenDtype::kInt32});
  }
  // Appends every document of OTHER (same dtype) by copying its bytes.
  void append(const IndexedDataset& other);
  // Writes the index and puts the pair in place, the .idx last: after a crash PREFIX holds the old
  // pair, the new pair, or no .idx, never a mix.
  void finish();

  uint64_t documents() const { return doc_indices_.size() - 1; }
  uint64_t tokens() const { return tokens_; }

 private:
  std::string prefix_;
  TokenDtype dtype_;
  ByteWriter bin_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_indices_{0};
  uint64_t tokens_ = 0;
  std::vector<uint8_t> buf_;
};

}  // namespace meg
