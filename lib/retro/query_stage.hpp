// The query stage: for each training chunk, the K nearest chunks of the database whose document
// differs from its own, found through the index, nearest first. In its folder:
//
//   rows.mat       i64 [T, 1]: the chunk id of each training chunk, ascending
//   neighbors.mat  i64 [T, K]: row r holds the chunk ids of the neighbours of chunk rows[r]; -1
//                  past the last where the index found fewer than K
//
// A RETRO training run reads row r for training chunk rows[r]: the tokens of neighbour j are chunk
// j of the chunk database (and, for Megatron's continuation, the chunk after it when it is of the
// same document). neighbors.mat is written block by block and resumes like the embeddings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/blend.hpp"
#include "retro/chunk_db.hpp"
#include "retro/index.hpp"

namespace meg {

// The chunks of DB whose document lies in its input's TRAIN range, ascending.
std::vector<int64_t> training_chunks(const ChunkDb& db, const std::vector<DocumentRange>& train);

// Searches INDEX (over BASE, the embeddings of DB's chunks) for the K neighbours of each chunk of
// ROWS, leaving out the chunks of its own document, and writes FOLDER's files stamped with
// FINGERPRINT. Returns the stage's stats.
nlohmann::ordered_json run_query_stage(const ChunkDb& db, const VectorSet& base, const VectorIndex& index,
                                       const std::vector<int64_t>& rows, size_t k, size_t block_rows,
                                       const std::string& folder, uint64_t fingerprint);

}  // namespace meg
