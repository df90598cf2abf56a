// meg-index's work as library calls: token streams to an indexed dataset, merging datasets, and
// describing one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/indexed_dataset.hpp"

namespace meg {

struct IndexStats {
  uint64_t documents = 0, tokens = 0, stream_bytes = 0;
  TokenDtype dtype = TokenDtype::kUint16;
};

// Reads the token streams STREAMS ("-" is stdin; all from one tokenizer) into PREFIX.bin/.idx.
// Nothing appears under PREFIX until every stream has been read whole.
IndexStats index_streams(const std::vector<std::string>& streams, const std::string& prefix);

// Concatenates the datasets INPUTS (one dtype) into OUTPUT.
IndexStats merge_datasets(const std::vector<std::string>& inputs, const std::string& output);

// What --info shows: counts, dtype, sizes and document length percentiles; with ENTROPY also the
// unigram entropy of the tokens in nats (a reads-every-token pass: the loss a model that knows only
// token frequencies reaches, the bar a trained model's loss should fall well below).
nlohmann::ordered_json describe_dataset(const IndexedDataset& dataset, bool entropy = false);
std::string format_description(const nlohmann::ordered_json& info);

}  // namespace meg
