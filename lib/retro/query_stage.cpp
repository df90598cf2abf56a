#include "retro/query_stage.hpp"

#include <algorithm>
#include <chrono>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "retro/kmeans.hpp"
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

void DatabaseChunkQueries::block(uint64_t first, size_t n, float* vectors, std::vector<std::vector<IdRange>>& exclude) {
  const std::vector<size_t> chunks(rows_.begin() + ptrdiff_t(first), rows_.begin() + ptrdiff_t(first + n));
  const std::vector<float> rows = gather_rows(base_, chunks);
  std::copy(rows.begin(), rows.end(), vectors);
  for (size_t i = 0; i < n; ++i) exclude[i] = {db_.document_chunks(chunks[i])};
}

nlohmann::ordered_json run_query_stage(QuerySet& queries, const VectorIndex& index, size_t dim, size_t k,
                                       size_t block_rows, const std::string& folder, uint64_t fingerprint) {
  const uint64_t total = queries.rows();
  ResumableMatrixWriter out(folder + "/neighbors.mat", MatrixDtype::kI64, total, k, fingerprint);
  const uint64_t resumed = out.rows_done();
  if (resumed > 0) log::info("query: resuming after {} of {} query rows", resumed, total);
  const auto start = std::chrono::steady_clock::now();
  const size_t most = size_t(std::min<uint64_t>(block_rows, total));
  std::vector<int64_t> ids(most * k);
  std::vector<float> vectors(most * dim);
  std::vector<std::vector<IdRange>> exclude(most);
  std::vector<IdRanges> skip(most);
  Progress progress("query", total - resumed, "rows");
  for (uint64_t first = resumed; first < total;) {
    const size_t n = size_t(std::min<uint64_t>(block_rows, total - first));
    queries.block(first, n, vectors.data(), exclude);
    for (size_t i = 0; i < n; ++i) skip[i] = {exclude[i]};
    index.search({vectors.data(), n, dim}, k, skip.data(), ids.data(), nullptr);
    out.append(ids.data(), n);
    first += n;
    progress.add(n);
  }
  progress.finish();
  out.commit();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {{"query_rows", total}, {"neighbors", k}, {"resumed_after", resumed},
          {"queries_per_second", secs > 0 ? double(total - resumed) / secs : 0.0}};
}

}  // namespace meg
