#include "retro/embed_stage.hpp"

#include <chrono>
#include <filesystem>

#include "ckpt/checkpoint.hpp"
#include "core/error.hpp"
#include "core/float16.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "core/mapped_file.hpp"
#include "core/parallel.hpp"
#include "core/progress.hpp"
#include "infer/checkpoint_model.hpp"
#include "retro/embedder.hpp"
#include "retro/resumable_matrix.hpp"

namespace meg {
namespace {

void check_embedder_fits(const RetroInputs& inputs, const ChunkDb& db, const CheckpointModel& model) {
  const uint64_t vocab = uint64_t(model.config.vocab_size);
  const auto mismatch = [&] { return fmt::format("the inputs and the embedder ({}) use different tokenizers", model.path); };
  for (const IndexedDataset& d : inputs.datasets) {
    if (d.dtype() != dtype_for_vocab(vocab))
      input_error("{}: {} tokens, but a vocabulary of {} is stored as {}: {}", d.prefix(), dtype_name(d.dtype()), vocab,
                  dtype_name(dtype_for_vocab(vocab)), mismatch());
    try {
      d.verify(vocab);
    } catch (const InputError& e) {
      input_error("{} (the embedder's): {}", e.what(), mismatch());
    }
  }
  if (model.config.learned_positions() && db.chunk_length() > uint64_t(model.config.seq_length))
    input_error("--chunk-length {}: longer than the embedder's {} positions ({})", db.chunk_length(),
                model.config.seq_length, model.path);
}

// The rows of OUT from where it stands: DB's chunks through EMBEDDER, BLOCK_ROWS at a time.
void embed_database(const ChunkDb& db, ChunkEmbedder& embedder, size_t block_rows, ResumableMatrixWriter& out) {
  const size_t n = db.size(), dim = embedder.dim();
  const ChunkReader read = [&](uint64_t first, size_t m, int32_t* tokens, uint32_t* lengths) {
    db.read(first, m, tokens, lengths);
  };
  std::vector<float> vectors(std::min(block_rows, n) * dim);
  std::vector<uint16_t> block(vectors.size());
  Progress progress("embed", n - out.rows_done(), "chunks");
  for (uint64_t first = out.rows_done(); first < n;) {
    const size_t rows = size_t(std::min<uint64_t>(block_rows, n - first));
    embed_chunks(embedder, read, db.chunk_length(), first, rows, vectors.data());
    // Over the threads, so that it stays small beside the rate of a GPU embedder.
    parallel_for(rows * dim, 1 << 16, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) block[i] = float_to_fp16(vectors[i]);
    });
    out.append(block.data(), rows);
    first += rows;
    progress.add(rows);
  }
  progress.finish();
}

}  // namespace

nlohmann::ordered_json embedder_identity(const std::string& dir) {
  const std::string path = std::filesystem::exists(dir + "/" + kCheckpointRecordFile) ? dir : find_latest(dir);
  const MappedFile record(path + "/" + kCheckpointRecordFile);
  return {{"checkpoint_xxh64", hex64(xxh64(record.data(), record.size()))}};
}

nlohmann::ordered_json run_embed_stage(const RetroInputs& inputs, const ChunkDb& db, const EmbedStageOptions& options,
                                       const std::string& folder, uint64_t fingerprint) {
  CheckpointModel model = load_checkpoint_model(options.load);
  check_embedder_fits(inputs, db, model);
  const auto embedder =
      make_chunk_embedder(std::move(model), options.device, options.precision, options.batch, db.chunk_length());
  ResumableMatrixWriter out(folder + "/embeddings.mat", MatrixDtype::kF16, db.size(), embedder->dim(), fingerprint);
  const uint64_t resumed = out.rows_done();
  if (resumed > 0) log::info("embed: resuming after {} of {} chunks", resumed, db.size());
  const auto start = std::chrono::steady_clock::now();
  embed_database(db, *embedder, options.block_rows, out);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.commit();
  return {{"chunks", db.size()}, {"dim", embedder->dim()}, {"resumed_after", resumed},
          {"chunks_per_second", secs > 0 ? double(db.size() - resumed) / secs : 0.0}};
}

Embeddings read_embeddings(const std::string& folder, uint64_t rows, uint64_t fingerprint) {
  const MatrixFile file(folder + "/embeddings.mat", MatrixDtype::kF16);
  check_matrix_shape(file, rows, 0, "the embedding matrix");
  if (file.fingerprint() != fingerprint)
    input_error("{}: written by another build of the embed stage (fingerprint {}, expected {})", file.path(),
                hex64(file.fingerprint()), hex64(fingerprint));
  const auto f16 = file.data<uint16_t>();
  return {widen_fp16(f16.data(), f16.size()), size_t(file.rows()), size_t(file.cols())};
}

}  // namespace meg
