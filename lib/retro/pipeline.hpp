// meg-retro-build's work: a RETRO retrieval database in four resumable stages, each in its own
// folder of OUT with a record of what it was built from (retro/stage.hpp):
//
//   db     the corpus cut into chunks, with each chunk's document    (retro/chunk_db.hpp)
//   embed  every chunk embedded by a meg checkpoint, float16, on the CPU or the GPU
//                                                                    (retro/embed_stage.hpp)
//   index  an exact or approximate nearest-neighbour index           (retro/index.hpp)
//   query  the K nearest chunks of other documents for each chunk of the blend's train samples
//          (or, with prefixes, of the train documents)          (retro/query_stage.hpp)
//
// A run goes through the stages in order up to the last one asked for. An asked-for stage that is
// done (its record matches the current settings) is skipped, a missing or stale one is built, and
// the stages after it then see new fingerprints and are rebuilt too. A stage not asked for must be
// done already when a later one needs it: otherwise the run stops with a message naming it. The
// embed and query stages resume an interrupted run from their last synced block.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/precision.hpp"
#include "retro/index.hpp"

namespace meg {

inline constexpr const char* kRetroStages[] = {"db", "embed", "index", "query"};

struct RetroOptions {
  std::vector<std::string> data;  // one blend file, or indexed dataset prefixes
  std::string load;               // the embedder: a meg checkpoint directory
  std::string out;                // the database folder
  std::vector<std::string> stages = {"db", "embed", "index", "query"};
  uint32_t chunk_length = 64;
  int64_t pad_id = 0;
  std::string split;              // prefixes only: train/valid/test weights ("": 969,30,1)
  size_t batch = 16;              // embed: chunks a forward
  std::string device = "cpu";     // embed, query: cpu or cuda (the embedder, and the flat index's search)
  Precision precision = Precision::fp32;  // embed: the CUDA embedder's (the CPU's is fp32)
  size_t block_rows = 4096;       // embed, query: rows a resumable block
  size_t neighbors = 20;          // query: K, Megatron's default number of neighbours saved
  uint64_t query_samples = 0;     // query, a blend only: train samples queried (0: all)
  IndexOptions index;
};

// Runs the stages of OPTIONS. InputError on bad options or input, a missing or stale stage that
// is needed but not asked for, or data that does not fit the embedder.
void run_retro_build(const RetroOptions& options);

}  // namespace meg
