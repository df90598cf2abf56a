#include "retro/pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iterator>
#include <memory>

#include "core/device.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "data/gpt_dataset.hpp"
#include "retro/chunk_db.hpp"
#include "retro/embed_stage.hpp"
#include "retro/inputs.hpp"
#include "retro/matrix_file.hpp"
#include "retro/query_stage.hpp"
#include "retro/sample_queries.hpp"
#include "retro/stage.hpp"

namespace meg {
namespace {

// What a stage's body hands back: the files it wrote (for the record) and its stats.
struct StageResult {
  std::vector<std::string> files;
  nlohmann::ordered_json stats;
};

class Pipeline {
 public:
  explicit Pipeline(const RetroOptions& o) : o_(o) {
    for (const std::string& s : o.stages) {
      const auto at = std::find(std::begin(kRetroStages), std::end(kRetroStages), s);
      if (at == std::end(kRetroStages)) input_error("--stages: unknown stage '{}' (db, embed, index, query)", s);
      last_ = std::max(last_, int(at - std::begin(kRetroStages)));
    }
    if (o.stages.empty()) input_error("--stages: no stage named");
    if (o.out.empty()) input_error("--out DIR is required");
    if (o.chunk_length == 0 || o.neighbors == 0 || o.batch == 0 || o.block_rows == 0)
      input_error("--chunk-length, --neighbors, --batch and --block-rows must be positive");
    parse_device(o.device);
    if (last_ > 0 && o.load.empty())
      input_error("--load DIR (the embedder checkpoint) is required from the embed stage on");
  }

  int last() const { return last_; }
  std::string folder(const char* stage) const { return o_.out + "/" + stage; }

  // Brings stage NAME (number INDEX) up to date for SETTINGS, running BODY when it must be built;
  // returns its fingerprint.
  uint64_t run(int index, const nlohmann::ordered_json& settings, bool keep_files,
               const std::function<StageResult(uint64_t fingerprint)>& body) const {
    const char* name = kRetroStages[index];
    const std::string dir = folder(name);
    const uint64_t fingerprint = settings_fingerprint(settings);
    const StageStatus status = stage_status(dir, settings);
    if (status.state == StageState::done) {
      log::info("{}: up to date ({})", name, dir);
      return fingerprint;
    }
    const bool missing = status.state == StageState::missing;
    if (std::find(o_.stages.begin(), o_.stages.end(), name) == o_.stages.end())
      input_error("{}: the {} stage is {} ({}); run it: --stages {}", dir, name, missing ? "missing" : "stale",
                  status.why, name);
    log::info("{}: {}", name, missing ? "building" : "rebuilding: " + status.why);
    const auto start = std::chrono::steady_clock::now();
    begin_stage(dir, keep_files);
    const StageResult result = body(fingerprint);
    finish_stage(dir, name, settings, result.files, result.stats);
    log::info("{}: done in {:.1f} s: {}", name,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), result.stats.dump());
    return fingerprint;
  }

 private:
  const RetroOptions& o_;
  int last_ = 0;
};

ChunkDb open_chunk_db(const std::string& dir, uint64_t fingerprint) {
  ChunkDb db(dir);
  if (db.fingerprint() != fingerprint)
    input_error("{}/chunks.mat: written by another build of the db stage (fingerprint {}, expected {})", dir,
                hex64(db.fingerprint()), hex64(fingerprint));
  return db;
}

// The blend whose train samples the query stage queries (null with prefixes), checked before any
// stage runs so that a misfit fails at once, not after hours of embedding; and how many of them.
std::unique_ptr<GptDataset> open_query_blend(const RetroOptions& o, const RetroInputs& inputs, bool querying,
                                             uint64_t& samples) {
  if (inputs.blend.empty()) {
    if (o.query_samples > 0) input_error("--query-samples {}: needs a blend (prefixes have no samples)", o.query_samples);
    return nullptr;
  }
  if (!querying) return nullptr;
  auto blend = std::make_unique<GptDataset>(inputs.blend);
  check_sample_chunking(*blend, o.chunk_length);
  const uint64_t train = blend->num_samples(Split::kTrain);
  if (o.query_samples > train)
    input_error("--query-samples {}: {} has only {} train samples", o.query_samples, inputs.blend, train);
  samples = o.query_samples > 0 ? o.query_samples : train;
  if (samples == 0) input_error("{}: no train samples to query", inputs.blend);
  return blend;
}

}  // namespace

void run_retro_build(const RetroOptions& o) {
  const Pipeline p(o);
  const RetroInputs inputs = open_inputs(o.data, o.split);
  uint64_t query_samples = 0;
  const std::unique_ptr<GptDataset> blend = open_query_blend(o, inputs, p.last() == 3, query_samples);

  const nlohmann::ordered_json db_settings = {
      {"version", 1}, {"chunk_length", o.chunk_length}, {"pad_id", o.pad_id}, {"inputs", inputs.identity()}};
  const uint64_t db = p.run(0, db_settings, false, [&](uint64_t fingerprint) {
    std::vector<const IndexedDataset*> datasets;
    for (const IndexedDataset& d : inputs.datasets) datasets.push_back(&d);
    const ChunkDbStats s = build_chunk_db(datasets, o.chunk_length, o.pad_id, p.folder("db"), fingerprint);
    return StageResult{{"chunks.bin", "chunks.idx", "chunks.mat"},
                       {{"inputs", inputs.datasets.size()}, {"documents", s.documents}, {"tokens", s.tokens}, {"chunks", s.chunks}}};
  });
  if (p.last() == 0) return;

  const nlohmann::ordered_json embed_settings = {{"version", 1},
                                                 {"db", hex64(db)},
                                                 {"embedder", embedder_identity(o.load)},
                                                 {"pooling", "mean of the final norm over the chunk's tokens"},
                                                 {"precision", precision_name(o.precision)},
                                                 {"device", o.device}};
  const uint64_t embed = p.run(1, embed_settings, true, [&](uint64_t fingerprint) {
    const ChunkDb chunks = open_chunk_db(p.folder("db"), db);
    const EmbedStageOptions options{o.load, o.device, o.precision, o.batch, o.block_rows};
    return StageResult{{"embeddings.mat"}, run_embed_stage(inputs, chunks, options, p.folder("embed"), fingerprint)};
  });
  if (p.last() == 1) return;

  const nlohmann::ordered_json index_settings = {{"version", 1}, {"embed", hex64(embed)}, {"index", index_build_settings(o.index)}};
  const uint64_t index = p.run(2, index_settings, false, [&](uint64_t fingerprint) {
    const Embeddings e = read_embeddings(p.folder("embed"), 0, embed);
    const IndexOptions resolved = resolve_index_options(o.index, e.rows, e.dim);
    std::vector<std::string> files = build_index(e.set(), resolved, p.folder("index"), fingerprint);
    nlohmann::ordered_json stats = {{"vectors", e.rows}, {"dim", e.dim}, {"build", index_build_settings(resolved)},
                                    {"search", index_search_settings(resolved)}};
    return StageResult{std::move(files), std::move(stats)};
  });
  if (p.last() == 2) return;

  // The query set: the blend's train samples, or the prefixes' train document chunks.
  nlohmann::ordered_json query_settings = {{"version", 2},           {"db", hex64(db)},
                                           {"embed", hex64(embed)},  {"index", hex64(index)},
                                           {"search", index_search_settings(o.index)}, {"neighbors", o.neighbors}};
  if (blend) {
    query_settings["queries"] = "train sample chunks";
    query_settings["blend"] = hex64(blend->fingerprint());
    query_settings["samples"] = query_samples;
  } else {
    nlohmann::ordered_json train = nlohmann::ordered_json::array();
    for (const DocumentRange& r : inputs.train) train.push_back({r.begin, r.end});
    query_settings["queries"] = "train document chunks";
    query_settings["train_documents"] = train;
  }
  p.run(3, query_settings, true, [&](uint64_t fingerprint) {
    const std::string folder = p.folder("query");
    const ChunkDb chunks = open_chunk_db(p.folder("db"), db);
    const Embeddings e = read_embeddings(p.folder("embed"), chunks.size(), embed);
    const IndexOptions resolved = resolve_index_options(o.index, e.rows, e.dim);
    const auto vector_index = load_index(e.set(), resolved, p.folder("index"), o.device);
    if (blend) {
      std::filesystem::remove(folder + "/rows.mat");  // of an earlier build from prefixes
      const auto embedder =
          make_chunk_embedder(load_checkpoint_model(o.load), o.device, o.precision, o.batch, o.chunk_length);
      SampleChunkQueries queries(*blend, chunks, *embedder, query_samples);
      nlohmann::ordered_json stats = {{"queries", "train sample chunks"}, {"samples", query_samples},
                                      {"chunks_per_sample", queries.chunks_per_sample()}};
      stats.update(run_query_stage(queries, *vector_index, e.dim, o.neighbors, o.block_rows, folder, fingerprint));
      return StageResult{{"neighbors.mat"}, std::move(stats)};
    }
    std::vector<int64_t> rows = training_chunks(chunks, inputs.train);
    if (rows.empty()) input_error("no training chunks: the train split of the inputs holds no documents");
    write_matrix<int64_t>(folder + "/rows.mat", rows.size(), 1, rows, fingerprint);
    DatabaseChunkQueries queries(chunks, e.set(), std::move(rows));
    nlohmann::ordered_json stats = {{"queries", "train document chunks"}};
    stats.update(run_query_stage(queries, *vector_index, e.dim, o.neighbors, o.block_rows, folder, fingerprint));
    return StageResult{{"rows.mat", "neighbors.mat"}, std::move(stats)};
  });
}

}  // namespace meg
