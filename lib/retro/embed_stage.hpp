// The embed stage: every chunk of the database embedded (retro/embedder.hpp) and stored as
// embeddings.mat, a float16 matrix file [chunks, hidden size], written block by block so that an
// interrupted run resumes from its last synced block (retro/resumable_matrix.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/precision.hpp"
#include "retro/chunk_db.hpp"
#include "retro/inputs.hpp"
#include "retro/vectors.hpp"

namespace meg {

// What identifies the embedder checkpoint DIR (a checkpoint, or a directory of them: its latest)
// in the stage's settings: the XXH64 of its checkpoint.json, which lists the XXH64 of every file.
nlohmann::ordered_json embedder_identity(const std::string& dir);

struct EmbedStageOptions {
  std::string load;  // the checkpoint
  std::string device = "cpu";  // and where it runs (retro/embedder.hpp's make_chunk_embedder)
  Precision precision = Precision::fp32;
  size_t batch = 16, block_rows = 4096;
};

// Loads the checkpoint, checks that INPUTS (DB's source) fit its model, and writes FOLDER/
// embeddings.mat stamped with FINGERPRINT, resuming a run of the same fingerprint. Returns the
// stage's stats. The checks, as far as files without a tokenizer id allow: the inputs' token
// dtype is the one Megatron picks for the model's vocabulary (uint16 below 65500 entries, int32
// from there), every token is inside the vocabulary, and a chunk fits the model's learned
// positions. Each failure is an InputError naming the inputs and the embedder.
nlohmann::ordered_json run_embed_stage(const RetroInputs& inputs, const ChunkDb& db, const EmbedStageOptions& options,
                                       const std::string& folder, uint64_t fingerprint);

// FOLDER/embeddings.mat widened to floats; InputError unless it has ROWS rows (0: any) and was
// written by the stage of FINGERPRINT.
struct Embeddings {
  std::vector<float> data;
  size_t rows = 0, dim = 0;
  VectorSet set() const { return {data.data(), rows, dim}; }
};
Embeddings read_embeddings(const std::string& folder, uint64_t rows, uint64_t fingerprint);

}  // namespace meg
