// PeerSums under mpirun, one GPU per rank: where the GPUs can map each other's memory, sums of
// float, bf16 and fp16 values over the ranks against sums worked out by hand, in place and added
// to an array, for sizes of one vector to the capacity, many calls in a row (the epochs and the
// two halves of the receive areas), the same bits as NCCL's all-reduce, and calls replayed from a
// CUDA graph; sums that do not fit are refused on every rank. Needs as many GPUs as ranks: with
// fewer, main.cpp skips them; where they cannot map each other's memory, the sums' case reports
// itself skipped.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "catch.hpp"
#include "gpu/gpu_test_util.hpp"
#include "gpu_per_rank.hpp"
#include "ops/cuda/check.hpp"
#include "parallel/comm.hpp"
#include "parallel/nccl_comm.hpp"
#include "parallel/peer_sums.hpp"

using namespace meg;
using meg::test::DeviceBuffer;

namespace {

constexpr size_t kCapacity = 64 * 1024;  // bytes

// Multiples of 1/4 in [-3.5, 3.5], different for every rank, element and call: exact in bf16 and
// fp16, and so are their sums over up to 8 ranks (PeerSums' most) and an added value of the same kind
// (below 32: at most 128 quarters, within bf16's 8 significant bits; with values up to 16, sums
// over 4 ranks reached 66.25, which bf16 rounds).
float v(size_t i, int r, int call) {
  return static_cast<float>(static_cast<int>((i * 7 + size_t(r) * 5 + size_t(call) * 11) % 29) - 14) * 0.25f;
}

// Whether every pair of this job's GPUs can map each other's memory: then create() must succeed.
bool all_peers(int ranks) {
  for (int a = 0; a < ranks; ++a)
    for (int b = 0; b < ranks; ++b) {
      int can = 1;
      if (a != b && (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || !can)) return false;
    }
  return true;
}

template <typename T>
void check_sums(PeerSums& sums, NcclComm& nccl, cudaStream_t stream) {
  const int P = nccl.size(), me = nccl.rank();
  const size_t vec = 16 / sizeof(T), capacity = kCapacity / sizeof(T);
  int call = 0;
  // In place and added, sizes from one vector to the capacity, each twice so that both halves of
  // the receive areas see every size.
  for (const size_t n : {vec, vec * 3, size_t(768), size_t(4 * 1600), capacity / 2 + vec, capacity}) {
    for (int twice = 0; twice < 2; ++twice) {
      for (const bool add : {false, true}) {
        INFO("n " << n << ", add " << add << ", call " << call);
        std::vector<float> x(n), base(n);
        for (size_t i = 0; i < n; ++i) {
          x[i] = v(i, me, call);
          base[i] = v(i, P, call);  // the same on every rank, as the residual stream is
        }
        DeviceBuffer<T> in(x), out(base);
        const bool done = add ? sums.add_sum(out.get(), in.get(), n, stream) : sums.sum(in.get(), n, stream);
        REQUIRE(done);
        MEG_CUDA_CHECK(cudaStreamSynchronize(stream));
        const std::vector<float> got = add ? out.download() : in.download();
        size_t wrong = 0;
        for (size_t i = 0; i < n; ++i) {
          float s = 0;
          for (int r = 0; r < P; ++r) s += v(i, r, call);
          wrong += got[i] != (add ? base[i] + s : s);
        }
        CHECK(wrong == 0);
        ++call;
      }
    }
  }
  // Too large, or not whole vectors: refused, nothing queued, on every rank alike.
  DeviceBuffer<T> big(capacity + vec);
  CHECK_FALSE(sums.sum(big.get(), capacity + vec, stream));
  CHECK_FALSE(sums.sum(big.get(), vec + 1, stream));

  // Values whose sums round: the same bits as NCCL's all-reduce (at 2 ranks both add a + b).
  const size_t n = 4096;
  std::vector<float> rough(n);
  for (size_t i = 0; i < n; ++i)
    rough[i] = std::sin(0.37f * float(i) + float(me)) * std::pow(10.0f, float(i % 7) - 3);
  DeviceBuffer<T> a(rough), b(rough);
  REQUIRE(sums.sum(a.get(), n, stream));
  nccl.all_reduce_sum(b.get(), n, stream);
  nccl.wait(stream);
  const auto pa = a.download_raw(), pb = b.download_raw();
  size_t differ = 0;
  for (size_t i = 0; i < n; ++i) differ += std::memcmp(&pa[i], &pb[i], sizeof(T)) != 0;
  if (nccl.size() == 2) CHECK(differ == 0);

  // Replayed from a CUDA graph: the epochs live on the device, so every replay is a new call.
  DeviceBuffer<T> g(n);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MEG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  REQUIRE(sums.sum(g.get(), n, stream));
  REQUIRE(sums.sum(g.get(), n, stream));
  MEG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MEG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 5; ++replay) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = v(i, me, replay) / 8;  // summed twice: P times their sum
    g.upload(x);
    MEG_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MEG_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> got = g.download();
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) {
      float s = 0;
      for (int r = 0; r < P; ++r) s += v(i, r, replay) / 8;
      wrong += got[i] != s * float(P);
    }
    CHECK(wrong == 0);
  }
  MEG_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MEG_CUDA_CHECK(cudaGraphDestroy(graph));
}

}  // namespace

TEST_CASE("PeerSums: sums over GPUs that share memory, the same bits as NCCL's", "[nccl]") {
  Comm& world = World::get().world();
  meg::test::use_gpu_per_rank(world);
  NcclComm nccl(world);
  auto sums = PeerSums::create(world, kCapacity);
  // The same answer on every rank, so that all skip or none.
  if (!all_peers(world.size())) SKIP("these GPUs cannot all map each other's memory");
  REQUIRE(sums != nullptr);
  cudaStream_t stream = nullptr;
  MEG_CUDA_CHECK(cudaStreamCreate(&stream));
  check_sums<float>(*sums, nccl, stream);
  check_sums<__nv_bfloat16>(*sums, nccl, stream);
  check_sums<__half>(*sums, nccl, stream);
  MEG_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("PeerSums: turned off, none on every rank", "[nccl]") {
  Comm& world = World::get().world();
  meg::test::use_gpu_per_rank(world);
  setenv("MEG_PEER_SUMS", "0", 1);
  CHECK(PeerSums::create(world, kCapacity) == nullptr);
  unsetenv("MEG_PEER_SUMS");
}
