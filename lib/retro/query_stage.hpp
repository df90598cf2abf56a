// The query stage: for each query row, the K nearest chunks of the database, found through the
// index, nearest first, leaving out the chunks of the documents the query comes from. In its
// folder:
//
//   neighbors.mat  i64 [Q, K]: the chunk ids of row r's neighbours; -1 past the last where the
//                  index found fewer than K
//
// and what a row is depends on the query set:
//
//   samples (a blend, retro/sample_queries.hpp)  row i * C + j is chunk j of train sample i of
//       the blend (C = seq_length / chunk_length), as Megatron's RETRO preprocessing queries:
//       a RETRO training run reads sample i's rows directly. No other file.
//   chunks (prefixes)  row r is database chunk rows[r] of a train document, with
//       rows.mat       i64 [Q, 1]: those chunk ids, ascending
//
// The tokens of neighbour n are chunk n of the chunk database (and, for Megatron's continuation,
// the chunk after it when it is of the same document). neighbors.mat is written block by block and
// resumes like the embeddings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/blend.hpp"
#include "retro/chunk_db.hpp"
#include "retro/index.hpp"

namespace meg {

// What the query stage searches for: rows() query vectors of the index's width, made a block at a
// time, so that a resumed run makes only the rows it still needs.
class QuerySet {
 public:
  virtual ~QuerySet() = default;
  virtual uint64_t rows() const = 0;
  // The vectors of rows [FIRST, FIRST + N) into VECTORS [N, dim], and into EXCLUDE[i] (cleared
  // first) the ranges of chunk ids row FIRST + i must not be answered with.
  virtual void block(uint64_t first, size_t n, float* vectors, std::vector<std::vector<IdRange>>& exclude) = 0;
};

// The chunks of DB whose document lies in its input's TRAIN range, ascending.
std::vector<int64_t> training_chunks(const ChunkDb& db, const std::vector<DocumentRange>& train);

// Database chunks ROWS as queries: their own embeddings (BASE, one row per chunk of DB), each
// leaving out its own document.
class DatabaseChunkQueries final : public QuerySet {
 public:
  DatabaseChunkQueries(const ChunkDb& db, const VectorSet& base, std::vector<int64_t> rows)
      : db_(db), base_(base), rows_(std::move(rows)) {}
  uint64_t rows() const override { return rows_.size(); }
  void block(uint64_t first, size_t n, float* vectors, std::vector<std::vector<IdRange>>& exclude) override;

 private:
  const ChunkDb& db_;
  VectorSet base_;
  std::vector<int64_t> rows_;
};

// Searches INDEX for the K neighbours of each row of QUERIES (vectors of DIM floats), BLOCK_ROWS
// at a time, and writes FOLDER/neighbors.mat stamped with FINGERPRINT, resuming a run of the same
// fingerprint. Returns the stage's stats.
nlohmann::ordered_json run_query_stage(QuerySet& queries, const VectorIndex& index, size_t dim, size_t k,
                                       size_t block_rows, const std::string& folder, uint64_t fingerprint);

}  // namespace meg
