// The exact search on the GPU (retro/exact_search.hpp): the CPU's method and numbers, on cuBLAS.
// The products q.x come from DGEMM (fp64, on the tensor cores of an H100), the distances
// |q|^2 + |x|^2 - 2 q.x are formed in fp64 and rounded to fp32 as the CPU forms them, and the top K
// by (distance, id) are kept on the device (kernels/retro_search.cu), so the answers are the CPU's
// ids (up to the order of equal fp32 distances that the products' summation order can tip).
//
// The base is uploaded once, as fp32 with fp64 norms: half the memory of an fp64 copy (a million
// vectors of 768 take 3 GB), so twice the database fits beside an embedder. Each block of
// kBaseBlock rows is widened to fp64 for its DGEMM, once per tile of queries: a pass over the block
// that costs far less than the DGEMM of a tile of thousands of queries against it. For each tile
// of queries (as many as fit kTileBytes of products and scratch, at most kMaxTile), the base
// blocks are taken in order: DGEMM, then the top-K update of every query of the tile against the
// block, left-out ranges applied there; only the K keys per query come back to the host.
//
// Everything runs on the index's own stream; search() returns when the results are on the host.
// One search at a time: the scratch arrays and the cuBLAS handle are the index's.
#include <cublas_v2.h>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <limits>
#include <stdexcept>

#include "core/error.hpp"
#include "ops/cuda/check.hpp"
#include "ops/cuda/device_memory.hpp"
#include "ops/cuda/stream.hpp"
#include "retro/cuda_kernels.hpp"
#include "retro/exact_search.hpp"

namespace meg {

namespace {

constexpr size_t kBaseBlock = 8192;               // base rows a DGEMM
constexpr size_t kTileBytes = size_t(1) << 30;    // a tile's products, scratch and lists
constexpr size_t kMaxTile = 4096;                 // queries a tile

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("cuBLAS: {} failed: {}", what, cublasGetStatusString(status)));
}

// A cuBLAS handle whose work goes to STREAM.
class BlasHandle {
 public:
  explicit BlasHandle(cudaStream_t stream) {
    check_blas(cublasCreate(&handle_), "cublasCreate");
    check_blas(cublasSetStream(handle_, stream), "cublasSetStream");
  }
  ~BlasHandle() { cublasDestroy(handle_); }
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

class CudaExactIndex final : public VectorIndex {
 public:
  explicit CudaExactIndex(const VectorSet& base);
  void search(const VectorSet& queries, size_t k, const IdRanges* exclude, int64_t* ids, float* dists) const override;

 private:
  // Queries [FIRST, FIRST + N) of QUERIES, their results into IDS and DISTS from row FIRST.
  void search_tile(const VectorSet& queries, size_t first, size_t n, size_t k, const IdRanges* exclude, int64_t* ids,
                   float* dists) const;

  size_t n_, dim_;
  cuda::Stream stream_;  // first in, last out: the members below queue work on it
  BlasHandle blas_;
  mutable cuda::DeviceAllocator alloc_;  // before the arrays: they go back to it
  cuda::DeviceArray<float> base_;
  cuda::DeviceArray<double> norms_;
};

CudaExactIndex::CudaExactIndex(const VectorSet& base) : n_(base.n), dim_(base.dim), blas_(stream_.get()) {
  // A key holds a 32-bit id (kernels/retro_search.cu), and cuBLAS takes int dimensions.
  if (base.n > std::numeric_limits<uint32_t>::max() || base.dim > size_t(std::numeric_limits<int>::max()))
    input_error("the GPU's exact search takes at most 2^32 vectors of at most 2^31 values; got {} of {}", base.n,
                base.dim);
  const cudaStream_t s = stream_.get();
  base_ = cuda::DeviceArray<float>(alloc_, n_ * dim_);
  norms_ = cuda::DeviceArray<double>(alloc_, n_);
  MEG_CUDA_CHECK(cudaMemcpyAsync(base_.get(), base.data, base_.bytes(), cudaMemcpyHostToDevice, s));
  cuda::squared_norms(norms_.get(), base_.get(), n_, int(dim_), s);
  MEG_CUDA_CHECK(cudaStreamSynchronize(s));
}

void CudaExactIndex::search(const VectorSet& queries, size_t k, const IdRanges* exclude, int64_t* ids,
                            float* dists) const {
  if (queries.dim != dim_)
    throw std::invalid_argument(
        fmt::format("exact search: queries of {} values against vectors of {}", queries.dim, dim_));
  if (k == 0) return;
  if (k > size_t(std::numeric_limits<int>::max())) input_error("exact search: K {} is too large", k);
  const size_t nb = std::min(kBaseBlock, n_);
  const size_t per_query = (nb + cuda::topk_scratch_row(int(nb), int(k)) + k) * sizeof(uint64_t) +
                           dim_ * (sizeof(float) + sizeof(double));
  const size_t tile = std::clamp<size_t>(kTileBytes / per_query, 1, kMaxTile);
  for (size_t first = 0; first < queries.n; first += tile)
    search_tile(queries, first, std::min(tile, queries.n - first), k, exclude, ids, dists);
}

void CudaExactIndex::search_tile(const VectorSet& queries, size_t first, size_t n, size_t k,
                                 const IdRanges* exclude, int64_t* ids, float* dists) const {
  const cudaStream_t s = stream_.get();
  const size_t nb_max = std::min(kBaseBlock, n_);

  // The tile's queries in fp64, with their norms.
  cuda::DeviceArray<float> q32(alloc_, n * dim_);
  cuda::DeviceArray<double> q(alloc_, n * dim_), qnorms(alloc_, n);
  MEG_CUDA_CHECK(cudaMemcpyAsync(q32.get(), queries.row(first), q32.bytes(), cudaMemcpyHostToDevice, s));
  cuda::widen_to_double(q.get(), q32.get(), n * dim_, s);
  cuda::squared_norms(qnorms.get(), q32.get(), n, int(dim_), s);

  // The left-out ranges: query i's are pairs [offsets[i], offsets[i + 1]) of RANGES.
  std::vector<int32_t> offsets(n + 1, 0);
  std::vector<int64_t> ranges;
  for (size_t i = 0; i < n; ++i) {
    if (exclude)
      for (const IdRange& r : exclude[first + i].ranges) ranges.insert(ranges.end(), {r.begin, r.end});
    if (ranges.size() / 2 > size_t(std::numeric_limits<int32_t>::max()))
      input_error("exact search: too many left-out ranges ({})", ranges.size() / 2);
    offsets[i + 1] = int32_t(ranges.size() / 2);
  }
  cuda::DeviceArray<int32_t> d_offsets(alloc_, offsets.size());
  cuda::DeviceArray<int64_t> d_ranges(alloc_, ranges.size());
  MEG_CUDA_CHECK(cudaMemcpyAsync(d_offsets.get(), offsets.data(), d_offsets.bytes(), cudaMemcpyHostToDevice, s));
  if (!ranges.empty())
    MEG_CUDA_CHECK(cudaMemcpyAsync(d_ranges.get(), ranges.data(), d_ranges.bytes(), cudaMemcpyHostToDevice, s));

  // Each query's list starts empty (kNoNeighbor is all ones), then takes in the base block by block.
  cuda::DeviceArray<uint64_t> best(alloc_, n * k);
  MEG_CUDA_CHECK(cudaMemsetAsync(best.get(), 0xFF, best.bytes(), s));
  cuda::DeviceArray<double> block(alloc_, nb_max * dim_), products(alloc_, n * nb_max);
  cuda::DeviceArray<uint64_t> scratch(alloc_, n * cuda::topk_scratch_row(int(nb_max), int(k)));
  const double one = 1, zero = 0;
  for (size_t b0 = 0; b0 < n_; b0 += kBaseBlock) {
    const size_t nb = std::min(kBaseBlock, n_ - b0);
    cuda::widen_to_double(block.get(), base_.get() + b0 * dim_, nb * dim_, s);
    // products [n, nb] (row-major) = q [n, dim] @ block [nb, dim]^T, as the column-major
    // block^T q: [nb, n] with leading dimension nb.
    check_blas(cublasDgemm(blas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, int(nb), int(n), int(dim_), &one, block.get(),
                           int(dim_), q.get(), int(dim_), &zero, products.get(), int(nb)),
               "cublasDgemm");
    cuda::topk_update(best.get(), scratch.get(), products.get(), qnorms.get(), norms_.get() + b0, int(n), int(nb),
                      int64_t(b0), int(k), d_offsets.get(), d_ranges.get(), s);
  }

  std::vector<uint64_t> keys(n * k);
  MEG_CUDA_CHECK(cudaMemcpyAsync(keys.data(), best.get(), best.bytes(), cudaMemcpyDeviceToHost, s));
  MEG_CUDA_CHECK(cudaStreamSynchronize(s));
  for (size_t i = 0; i < n * k; ++i) {
    const uint64_t key = keys[i];
    const bool none = key == cuda::kNoNeighbor;
    ids[first * k + i] = none ? -1 : int64_t(key & 0xFFFFFFFFu);
    if (dists)
      dists[first * k + i] = none ? std::numeric_limits<float>::infinity() : std::bit_cast<float>(uint32_t(key >> 32));
  }
}

}  // namespace

std::unique_ptr<VectorIndex> make_cuda_exact_index(const VectorSet& base) {
  return std::make_unique<CudaExactIndex>(base);
}

}  // namespace meg
