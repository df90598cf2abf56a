// The chunk database (the db stage): every document of the inputs cut into chunks of
// CHUNK_LENGTH tokens, the last chunk of a document padded with PAD_ID, as Megatron's RETRO cuts
// its retrieval database. A "document" is a sequence of the input's .idx, the unit Megatron's GPT
// dataset (and meg-blend) splits; meg-index writes one per document. In its folder:
//
//   chunks.bin, chunks.idx  an indexed dataset (data/indexed_dataset.hpp) of one sequence per
//                           chunk, each CHUNK_LENGTH tokens, in the inputs' dtype
//   chunks.mat              the chunk table, a matrix file of i64 [chunks, 4]: input, document,
//                           first token and end token of the chunk within its document
//                           (end - first tokens are real, the rest of the chunk is padding)
//
// Chunks go input by input, document by document, in token order: a document's chunks are
// consecutive, so "the chunks of my own document" is one range of chunk ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/indexed_dataset.hpp"
#include "retro/matrix_file.hpp"
#include "retro/vectors.hpp"

namespace meg {

struct ChunkDbStats {
  uint64_t chunks = 0, documents = 0, tokens = 0;
};

// Cuts INPUTS (of one dtype, as open_inputs() checks) into DIR's files, stamped with FINGERPRINT.
// InputError when PAD_ID is not a token of that dtype.
ChunkDbStats build_chunk_db(const std::vector<const IndexedDataset*>& inputs, uint32_t chunk_length, int64_t pad_id,
                            const std::string& dir, uint64_t fingerprint);

struct ChunkInfo {
  int64_t input, document, begin, end;  // end - begin: the real tokens
};

class ChunkDb {
 public:
  // Opens DIR's files and checks that they agree (one chunk per row of the table, every chunk of
  // one length, a document's chunks consecutive). InputError otherwise.
  explicit ChunkDb(const std::string& dir);

  uint64_t size() const { return table_.rows(); }
  uint32_t chunk_length() const { return chunk_length_; }
  const IndexedDataset& tokens() const { return data_; }
  uint64_t fingerprint() const { return table_.fingerprint(); }

  ChunkInfo info(uint64_t i) const {
    const int64_t* r = table_.row<int64_t>(i);
    return {r[0], r[1], r[2], r[3]};
  }
  uint32_t length(uint64_t i) const { return uint32_t(table_.row<int64_t>(i)[3] - table_.row<int64_t>(i)[2]); }
  // The ids of the chunks of chunk I's document.
  IdRange document_chunks(uint64_t i) const {
    return {int64_t(i) - table_.row<int64_t>(i)[2] / chunk_length_, document_end_[i]};
  }
  // The ids of the chunks of DOCUMENT of INPUT; empty for a document without tokens.
  IdRange document_chunks(int64_t input, int64_t document) const;
  // Chunks [FIRST, FIRST + N) padded, as int32, into OUT [N, chunk_length()], their real token
  // counts into LENGTHS.
  void read(uint64_t first, size_t n, int32_t* out, uint32_t* lengths) const;

 private:
  IndexedDataset data_;
  MatrixFile table_;
  uint32_t chunk_length_ = 0;
  std::vector<int64_t> document_end_;  // per chunk: one past the last chunk of its document
};

}  // namespace meg
