// The corpus a retrieval database is built from: a blend file (meg-blend), whose inputs and whose
// train split it takes, or indexed dataset prefixes, split as meg-blend would split them (--split,
// Megatron's 969,30,1 by default). The database holds the chunks of all documents. The query
// stage finds neighbours for the blend's train samples (retro/sample_queries.hpp); prefixes have
// no samples, so there it finds them for the chunks of each input's train documents.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/blend.hpp"
#include "data/indexed_dataset.hpp"

namespace meg {

struct RetroInputs {
  std::vector<IndexedDataset> datasets;
  std::vector<DocumentRange> train;  // per input: its train documents (sequences of the .idx)
  std::string split;                 // the split weights, as text, for the record
  std::string blend;                 // the blend file, or "" for prefixes

  // Each input's identity (XXH64 of its .idx, size of its .bin, documents), never its path.
  nlohmann::ordered_json identity() const;
};

// DATA: one blend file, or prefixes. SPLIT: prefixes only ("" for the default); a blend has its
// own. InputError on a missing input, an empty one, or inputs of different token dtypes (which
// come from different tokenizers).
RetroInputs open_inputs(const std::vector<std::string>& data, const std::string& split);

}  // namespace meg
