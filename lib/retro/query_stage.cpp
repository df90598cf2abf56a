#include "retro/query_stage.hpp"

#include <algorithm>
#include <chrono>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "retro/kmeans.hpp"
#include "retro/matrix_file.hpp"
#include "retro/resumable_matrix.hpp"

namespace meg {

std::vector<int64_t> training_chunks(const ChunkDb& db, const std::vector<DocumentRange>& train) {
  std::vector<int64_t> rows;
  for (uint64_t i = 0; i < db.size(); ++i) {
    const ChunkInfo c = db.info(i);
    const DocumentRange& r = train.at(size_t(c.input));
    if (uint64_t(c.document) >= r.begin && uint64_t(c.document) < r.end) rows.push_back(int64_t(i));
  }
  return rows;
}

nlohmann::ordered_json run_query_stage(const ChunkDb& db, const VectorSet& base, const VectorIndex& index,
                                       const std::vector<int64_t>& rows, size_t k, size_t block_rows,
                                       const std::string& folder, uint64_t fingerprint) {
  if (rows.empty()) input_error("no training chunks: the train split of the inputs holds no documents");
  write_matrix<int64_t>(folder + "/rows.mat", rows.size(), 1, rows, fingerprint);
  ResumableMatrixWriter out(folder + "/neighbors.mat", MatrixDtype::kI64, rows.size(), k, fingerprint);
  const uint64_t resumed = out.rows_done();
  if (resumed > 0) log::info("query: resuming after {} of {} training chunks", resumed, rows.size());
  const auto start = std::chrono::steady_clock::now();
  std::vector<int64_t> ids(std::min(block_rows, rows.size()) * k);
  std::vector<IdRange> skip(std::min(block_rows, rows.size()));
  Progress progress("query", rows.size() - resumed, "chunks");
  for (uint64_t first = resumed; first < rows.size();) {
    const size_t n = size_t(std::min<uint64_t>(block_rows, rows.size() - first));
    const std::vector<size_t> chunks(rows.begin() + ptrdiff_t(first), rows.begin() + ptrdiff_t(first + n));
    const std::vector<float> queries = gather_rows(base, chunks);
    for (size_t i = 0; i < n; ++i) skip[i] = db.document_chunks(chunks[i]);
    index.search({queries.data(), n, base.dim}, k, skip.data(), ids.data(), nullptr);
    out.append(ids.data(), n);
    first += n;
    progress.add(n);
  }
  progress.finish();
  out.commit();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {{"training_chunks", rows.size()}, {"neighbors", k}, {"resumed_after", resumed},
          {"queries_per_second", secs > 0 ? double(rows.size() - resumed) / secs : 0.0}};
}

}  // namespace meg
