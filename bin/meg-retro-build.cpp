// meg-retro-build: the retrieval database of a RETRO model, in resumable stages: the corpus cut
// into chunks, every chunk embedded by a meg checkpoint, a nearest-neighbour index over the
// embeddings, and the nearest chunks of other documents for each chunk of the blend's training
// samples (with prefixes: of the train documents).
#include <optional>
#include <sstream>

#include "core/cli.hpp"
#include "core/cli_groups.hpp"
#include "core/device.hpp"
#include "retro/pipeline.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Build a RETRO retrieval database: chunks, embeddings, a nearest-neighbour index and the neighbour "
               "table of the training samples' chunks, each stage resumable.",
               "meg-retro-build"};
  meg::RetroOptions o;
  meg::IndexOptions& x = o.index;
  std::string stages = "db,embed,index,query", index_type = meg::index_type_name(x.type), device, precision;
  std::optional<size_t> batch;

  app.add_option("--data", o.data, "A blend file (meg-blend), or indexed dataset prefixes")->required();
  meg::cli::add_load_option(app, o.load, "the embedder");
  app.add_option("--out", o.out, "The database folder (one subfolder per stage)")->required();
  app.add_option("--stages", stages, "Stages to bring up to date, comma-separated: db, embed, index, query")
      ->capture_default_str();
  app.add_option("--chunk-length", o.chunk_length, "Tokens a chunk")->capture_default_str();
  app.add_option("--pad-id", o.pad_id, "Token that pads the last chunk of a document (its end-of-document id, say)")
      ->capture_default_str();
  app.add_option("--split", o.split, "With prefixes: train,valid,test weights; the neighbour table covers the train "
                                     "documents (default 969,30,1)");
  app.add_option("--neighbors", o.neighbors, "Neighbours kept per query chunk (K)")->capture_default_str();
  app.add_option("--query-samples", o.query_samples, "With a blend: the first N train samples are queried "
                                                      "(default: all)");
  app.add_option("--index-type", index_type, "flat (exact), ivf, ivf-pq or hnsw")->capture_default_str();
  app.add_option("--seed", x.seed, "Seed of the index's training rows, initial centroids and graph levels")
      ->capture_default_str();
  app.add_option("--nlist", x.nlist, "ivf, ivf-pq: lists (default 2 sqrt(chunks), at most chunks / 16)");
  app.add_option("--nprobe", x.nprobe, "ivf, ivf-pq: lists scanned a query (default nlist / 16, at least 8)");
  app.add_option("--train-size", x.train_size, "ivf, ivf-pq: rows k-means trains on (default 64 per list, at least 16384)");
  app.add_option("--kmeans-iters", x.kmeans_iters, "ivf, ivf-pq: k-means iterations")->capture_default_str();
  app.add_option("--pq-m", x.pq_m, "ivf-pq: sub-vectors of 8 bits a code (default dim / 8)");
  app.add_option("--refine", x.refine, "ivf-pq: candidates re-ranked by exact distance, per neighbour (0: none)")
      ->capture_default_str();
  app.add_option("--hnsw-m", x.hnsw_m, "hnsw: links a node (2M on level 0)")->capture_default_str();
  app.add_option("--ef-construction", x.ef_construction, "hnsw: candidates while linking")->capture_default_str();
  app.add_option("--ef-search", x.ef_search, "hnsw: candidates while searching (at least K)")->capture_default_str();
  meg::cli::add_device_options(app, device, precision, "embed, query");
  app.add_option("--batch", batch, "embed, and query with a blend: chunks a forward (default 256 on the GPU, 16 on "
                                   "the CPU)");
  app.add_option("--block-rows", o.block_rows, "embed, query: rows written (and synced) at a time: what a resumed run "
                                               "redoes at most")
      ->capture_default_str();
  meg::cli::add_common_options(app, "meg-retro-build --data data/train.blend --load runs/embedder --out retro "
                                    "--chunk-length 64 --neighbors 20 --index-type ivf-pq");

  return meg::cli::run_tool(app, argc, argv, [&] {
    o.stages.clear();
    std::istringstream list(stages);
    for (std::string s; std::getline(list, s, ',');) o.stages.push_back(s);
    x.type = meg::parse_index_type(index_type);
    o.precision = meg::resolve_device_precision(device, precision).precision;
    o.device = device;
    o.batch = batch.value_or(o.device == "cuda" ? 256 : 16);
    meg::run_retro_build(o);
    return 0;
  });
}
