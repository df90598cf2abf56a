#include "data/dataset_tools.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/progress.hpp"
#include "data/token_stream.hpp"

namespace meg {

IndexStats index_streams(const std::vector<std::string>& streams, const std::string& prefix) {
  if (streams.empty()) input_error("no token streams to index");
  IndexStats stats;
  std::unique_ptr<IndexedDatasetWriter> writer;
  TokenStreamHeader first;
  TokenView doc;
  for (const auto& path : streams) {
    TokenStreamReader in(path);
    if (!writer) {
      first = in.header();
      stats.dtype = dtype_for_vocab(first.vocab_size);
      writer = std::make_unique<IndexedDatasetWriter>(prefix, stats.dtype);
    } else if (!in.header().compatible_with(first)) {
      input_error("{}: comes from a different tokenizer than {} (vocabulary {} vs {})", in.bytes().path(),
                  streams.front(), in.header().vocab_size, first.vocab_size);
    }
    Progress progress("indexed", in.bytes().raw_size());
    while (in.next(doc)) {
      writer->add_document(doc);
      if ((in.documents() & 1023) == 0) progress.set(in.bytes().raw_consumed());
    }
    progress.finish();
    stats.stream_bytes += in.bytes().offset();
  }
  writer->finish();
  stats.documents = writer->documents();
  stats.tokens = writer->tokens();
  return stats;
}

IndexStats merge_datasets(const std::vector<std::string>& inputs, const std::string& output) {
  if (inputs.empty()) input_error("--merge needs the prefixes of the datasets to merge");
  std::vector<IndexedDataset> datasets;
  datasets.reserve(inputs.size());
  for (const auto& prefix : inputs) {
    if (prefix == output) input_error("{}: the output must not be one of the inputs", prefix);
    datasets.emplace_back(prefix);
  }
  IndexStats stats;
  stats.dtype = datasets.front().dtype();
  IndexedDatasetWriter writer(output, stats.dtype);
  for (const auto& d : datasets) writer.append(d);
  writer.finish();
  stats.documents = writer.documents();
  stats.tokens = writer.tokens();
  return stats;
}

namespace {
// Token ids below this are counted in an array, which grows to the largest id seen; rarer, larger
// ids (a 32-bit id in a corrupt or foreign dataset) in a map, so that one of them cannot make the
// count allocate gigabytes.
constexpr size_t kDenseTokenIds = size_t(1) << 24;

double unigram_entropy(const IndexedDataset& d) {
  std::vector<uint64_t> counts;
  std::unordered_map<int32_t, uint64_t> sparse;
  const uint64_t n = d.num_tokens();
  std::vector<int32_t> chunk;
  for (size_t i = 0; i < d.num_documents(); ++i) {
    const TokenView doc = d.document(i);
    chunk.resize(doc.size);
    doc.copy_to(chunk.data(), 0, doc.size);
    for (const int32_t t : chunk) {
      if (t < 0) input_error("{}.bin: negative token {} in document {}", d.prefix(), t, i);
      if (size_t(t) >= kDenseTokenIds) {
        ++sparse[t];
        continue;
      }
      if (size_t(t) >= counts.size()) counts.resize(size_t(t) + 1);
      ++counts[t];
    }
  }
  double h = 0;
  const auto add = [&](uint64_t c) {
    if (c > 0) h -= double(c) / n * std::log(double(c) / n);
  };
  for (const uint64_t c : counts) add(c);
  for (const auto& entry : sparse) add(entry.second);
  return h;
}
}  // namespace

nlohmann::ordered_json describe_dataset(const IndexedDataset& d, bool entropy) {
  std::vector<uint64_t> lengths(d.num_documents());
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = d.document_length(i);
  std::sort(lengths.begin(), lengths.end());
  const auto pct = [&](double p) -> uint64_t {
    if (lengths.empty()) return 0;
    return lengths[std::min(lengths.size() - 1, static_cast<size_t>(p / 100.0 * lengths.size()))];
  };
  nlohmann::ordered_json j;
  j["prefix"] = d.prefix();
  j["documents"] = d.num_documents();
  j["sequences"] = d.num_sequences();
  j["tokens"] = d.num_tokens();
  j["dtype"] = dtype_name(d.dtype());
  j["bin_bytes"] = d.bin_bytes();
  j["document_tokens"] = {{"min", lengths.empty() ? 0 : lengths.front()},
                          {"p10", pct(10)},
                          {"p50", pct(50)},
                          {"p90", pct(90)},
                          {"p99", pct(99)},
                          {"max", lengths.empty() ? 0 : lengths.back()},
                          {"mean", lengths.empty() ? 0.0 : double(d.num_tokens()) / lengths.size()}};
  if (entropy) j["unigram_entropy_nats"] = unigram_entropy(d);
  return j;
}

std::string format_description(const nlohmann::ordered_json& j) {
  const auto& l = j["document_tokens"];
  return fmt::format(
      "prefix      {}\n"
      "documents   {}\n"
      "sequences   {}\n"
      "tokens      {}\n"
      "dtype       {}\n"
      "bin size    {}\n"
      "doc tokens  min {}  p10 {}  p50 {}  p90 {}  p99 {}  max {}  mean {:.1f}\n",
      j["prefix"].get<std::string>(), j["documents"].get<uint64_t>(), j["sequences"].get<uint64_t>(),
      j["tokens"].get<uint64_t>(), j["dtype"].get<std::string>(), human_count(j["bin_bytes"].get<double>(), "B"),
      l["min"].get<uint64_t>(), l["p10"].get<uint64_t>(), l["p50"].get<uint64_t>(), l["p90"].get<uint64_t>(),
      l["p99"].get<uint64_t>(), l["max"].get<uint64_t>(), l["mean"].get<double>()) +
         (j.contains("unigram_entropy_nats")
              ? fmt::format("entropy     {:.3f} nats per token (unigram)\n", j["unigram_entropy_nats"].get<double>())
              : "");
}

}  // namespace meg
