// Queries per second and recall@10 of each retrieval index (retro/index.hpp) on the CPU, against
// the exact search (flat, the reference row and the ground truth). As the query stage asks them,
// the queries are base vectors, each with itself left out. Build time is reported too. With
// --device cuda the flat row is the GPU's exact search (its recall against the CPU's ground truth
// shows that the two agree), and a second table gives the fp64 rate of its products against the
// H100's fp64 tensor-core peak. Each search is timed after a warm-up search of a few queries.
//
// The vectors are synthetic unless --embeddings names an embeddings.mat of meg-retro-build: N
// points of DIM on a 32-dimensional subspace (as embeddings, they span far fewer directions than
// their width), each a cluster centre (N / 10000 of them) plus as much noise again, so the clusters
// overlap and no index finds the neighbours by luck, and a little full-width noise; generated from
// Philox, the same for any thread count.
//   bench_retro_index [--n 1000000] [--dim 768] [--queries 1000] [--types flat,ivf,ivf-pq,hnsw]
//                     [--device cpu|cuda] [--embeddings FILE] [index options as meg-retro-build takes them]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/cli.hpp"
#include "core/parallel.hpp"
#include "core/philox.hpp"
#include "retro/exact_search.hpp"
#include "retro/index.hpp"
#include "retro/kmeans.hpp"
#include "retro/matrix_file.hpp"

namespace {

using namespace meg;
using Clock = std::chrono::steady_clock;

constexpr size_t kLatent = 32;
constexpr size_t kWarmUp = 10;             // queries of the untimed first search
constexpr double kFp64PeakTflops = 67.0;   // H100 SXM (and H200), fp64 on the tensor cores

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Random bits number I of stream STREAM.
PhiloxCounter bits(uint64_t stream, uint64_t i) {
  return philox4x32_10({uint32_t(i), uint32_t(i >> 32), uint32_t(stream), 0}, {0x5eed, 0});
}

// A standard normal number from them (Box-Muller).
float normal(uint64_t stream, uint64_t i) {
  const PhiloxCounter c = bits(stream, i);
  const double u1 = (double(c[0]) + 1.0) / 4294967296.0, u2 = double(c[1]) / 4294967296.0;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

std::vector<float> synthetic(size_t n, size_t dim) {
  const size_t clusters = std::max<size_t>(1, n / 10000);
  std::vector<float> basis(kLatent * dim), out(n * dim);
  for (size_t i = 0; i < basis.size(); ++i) basis[i] = normal(1, i) / std::sqrt(float(kLatent));
  parallel_for(n, 256, [&](size_t begin, size_t end) {
    std::vector<float> z(kLatent);
    for (size_t i = begin; i < end; ++i) {
      const uint64_t c = bits(2, i)[0] % clusters;
      for (size_t l = 0; l < kLatent; ++l) z[l] = normal(3, c * kLatent + l) + normal(4, i * kLatent + l);
      for (size_t d = 0; d < dim; ++d) {
        float x = 0.02f * normal(5, i * dim + d);
        for (size_t l = 0; l < kLatent; ++l) x += z[l] * basis[l * dim + d];
        out[i * dim + d] = x;
      }
    }
  });
  return out;
}

std::vector<float> embeddings(const std::string& path, size_t* n, size_t* dim) {
  const MatrixFile f(path, MatrixDtype::kF16);
  *n = f.rows();
  *dim = f.cols();
  return widen_fp16(f.data<uint16_t>().data(), f.data<uint16_t>().size());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Queries per second and recall@10 of each retrieval index, against the exact search.",
               "bench_retro_index"};
  size_t n = 1000000, dim = 768, nq = 1000, k = 10;
  std::string types = "flat,ivf,ivf-pq,hnsw", file, device = "cpu";
  IndexOptions o;
  app.add_option("--n", n, "Vectors")->capture_default_str();
  app.add_option("--dim", dim, "Their width")->capture_default_str();
  app.add_option("--queries", nq, "Queries (base vectors spread over the set)")->capture_default_str();
  app.add_option("--types", types, "Index types")->capture_default_str();
  app.add_option("--embeddings", file, "An embeddings.mat to index instead of synthetic vectors");
  app.add_option("--device", device, "Where flat searches: cpu or cuda")->capture_default_str();
  app.add_option("--nlist", o.nlist);
  app.add_option("--nprobe", o.nprobe);
  app.add_option("--pq-m", o.pq_m);
  app.add_option("--refine", o.refine);
  app.add_option("--hnsw-m", o.hnsw_m);
  app.add_option("--ef-construction", o.ef_construction);
  app.add_option("--ef-search", o.ef_search);
  cli::add_common_options(app, "bench_retro_index --n 100000 --types ivf-pq,hnsw");
  return cli::run_tool(app, argc, argv, [&] {
    auto start = Clock::now();
    const std::vector<float> points = file.empty() ? synthetic(n, dim) : embeddings(file, &n, &dim);
    std::fprintf(stderr, "%zu vectors of %zu (%s) in %.1f s, %u threads\n", n, dim, file.empty() ? "synthetic" : file.c_str(),
                 seconds_since(start), num_threads());
    const VectorSet base{points.data(), n, dim};
    nq = std::min(nq, n);
    std::vector<size_t> rows(nq);
    for (size_t q = 0; q < nq; ++q) rows[q] = q * (n / nq);
    const std::vector<float> queries = gather_rows(base, rows);
    std::vector<IdRange> own(nq);
    std::vector<IdRanges> skip(nq);
    for (size_t q = 0; q < nq; ++q) {
      own[q] = {int64_t(rows[q]), int64_t(rows[q] + 1)};
      skip[q] = {std::span(&own[q], 1)};
    }
    std::vector<int64_t> truth(nq * k), found(nq * k);
    start = Clock::now();
    exact_search(base, {queries.data(), nq, dim}, k, skip.data(), truth.data(), nullptr);
    const double exact_qps = double(nq) / seconds_since(start);

    std::printf("| index | settings | build s | queries/s | recall@10 | reference (flat) queries/s | ratio |\n");
    std::printf("|---|---|---:|---:|---:|---:|---:|\n");
    const std::string dir = (std::filesystem::temp_directory_path() / "bench_retro_index").string();
    double flat_qps = 0;
    std::istringstream list(types);
    for (std::string name; std::getline(list, name, ',');) {
      o.type = parse_index_type(name);
      const IndexOptions r = resolve_index_options(o, n, dim);
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
      start = Clock::now();
      build_index(base, r, dir, 0);
      const double build = seconds_since(start);
      const auto index = load_index(base, r, dir, device);
      index->search({queries.data(), std::min(nq, kWarmUp), dim}, k, skip.data(), found.data(), nullptr);
      start = Clock::now();
      index->search({queries.data(), nq, dim}, k, skip.data(), found.data(), nullptr);
      const double qps = double(nq) / seconds_since(start);
      nlohmann::ordered_json settings = index_build_settings(r);
      settings.update(index_search_settings(r));
      settings.erase("type");
      if (r.type == IndexType::flat) {
        settings["device"] = device;
        flat_qps = qps;
      }
      std::printf("| %s | %s | %.1f | %.0f | %.3f | %.0f | %.1f |\n", name.c_str(), settings.dump().c_str(), build, qps,
                  recall_at_k(found, truth, k), exact_qps, qps / exact_qps);
      std::fflush(stdout);
    }
    std::filesystem::remove_all(dir);
    if (device == "cuda" && flat_qps > 0) {
      // A query's products with the base: 2 N DIM flops, the search's work.
      const double tflops = flat_qps * 2.0 * double(n) * double(dim) / 1e12;
      std::printf("\n| benchmark | measured | reference | ratio |\n|---|---:|---:|---:|\n");
      std::printf("| flat on the GPU: fp64 TFLOP/s of its products (2 x %zu x %zu a query) | %.1f | %.0f (fp64 "
                  "tensor-core peak) | %.2f |\n",
                  n, dim, tflops, kFp64PeakTflops, tflops / kFp64PeakTflops);
    }
    return 0;
  });
}
