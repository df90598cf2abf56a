// NcclComm under mpirun, one GPU per rank (rank % device count): every collective on float, fp16 and
// bf16 device buffers against sums worked out by hand, a ring, and the time-out that turns a
// missing peer into an exception. Needs as many GPUs as ranks (NCCL refuses two members on one
// device): with fewer, main.cpp skips them.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

#include "catch.hpp"
#include "core/error.hpp"
#include "gpu/gpu_test_util.hpp"
#include "gpu_per_rank.hpp"
#include "ops/cuda/check.hpp"
#include "parallel/comm.hpp"
#include "parallel/nccl_comm.hpp"

using namespace meg;
using meg::test::DeviceBuffer;
using Catch::Matchers::ContainsSubstring;

namespace {

// One GPU per rank and a stream.
struct Setup {
  Comm& world = World::get().world();
  cudaStream_t stream = nullptr;
  Setup() {
    meg::test::use_gpu_per_rank(world);
    MEG_CUDA_CHECK(cudaStreamCreate(&stream));
  }
  ~Setup() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// Small multiples of 1/4 below 64: exact in bf16, and so are their sums over a few ranks.
float v(size_t i, int r) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(r) * 5) % 29) - 14) * 0.25f;
}

template <typename T>
void check_collectives(NcclComm& nccl, cudaStream_t stream) {
  const int P = nccl.size(), me = nccl.rank();
  const size_t n = 100003;
  const auto sum = [P](size_t i, size_t block) {
    float s = 0;
    for (int r = 0; r < P; ++r) s += v(i + block, r);
    return s;
  };

  // Values go up rounded to T and come back widened to float (gpu_test_util's buffers).
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = v(i, me);
  DeviceBuffer<T> d(x);
  nccl.all_reduce_sum(d.get(), n, stream);
  nccl.wait(stream);
  const std::vector<float> reduced = d.download();
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += reduced[i] != sum(i, 0);
  CHECK(wrong == 0);
  // The same bits on every rank, for values whose sums round: the results meet on the host.
  {
    std::vector<float> rough(n);
    for (size_t i = 0; i < n; ++i)
      rough[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(me)) *
                 std::pow(10.0f, static_cast<float>(i % 7) - 3);
    DeviceBuffer<T> r(rough);
    nccl.all_reduce_sum(r.get(), n, stream);
    nccl.wait(stream);
    const std::vector<float> mine = r.download();
    std::vector<float> all(static_cast<size_t>(P) * n);
    World::get().world().all_gather(all.data(), mine.data(), n);
    for (int k = 1; k < P; ++k) CHECK(std::memcmp(all.data(), all.data() + k * n, n * sizeof(float)) == 0);
  }

  std::vector<float> blocks(static_cast<size_t>(P) * n);
  for (size_t b = 0; b < static_cast<size_t>(P); ++b)
    for (size_t i = 0; i < n; ++i) blocks[b * n + i] = v(i + 1000 * b, me);
  DeviceBuffer<T> send(blocks), recv(std::vector<float>(n, -1.0f));
  nccl.reduce_scatter_sum(recv.get(), send.get(), n, stream);
  nccl.wait(stream);
  const std::vector<float> scattered = recv.download();
  wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += scattered[i] != sum(i, 1000 * static_cast<size_t>(me));
  CHECK(wrong == 0);

  DeviceBuffer<T> own(x), gathered(std::vector<float>(static_cast<size_t>(P) * n, -1.0f));
  nccl.all_gather(gathered.get(), own.get(), n, stream);
  nccl.wait(stream);
  const std::vector<float> all = gathered.download();
  wrong = 0;
  for (int k = 0; k < P; ++k)
    for (size_t i = 0; i < n; ++i) wrong += all[static_cast<size_t>(k) * n + i] != v(i, k);
  CHECK(wrong == 0);

  // A ring: each rank sends its own values to the next and receives the previous rank's.
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  DeviceBuffer<T> in(std::vector<float>(n, -1.0f));
  nccl.send_recv(own.get(), n, next, in.get(), n, prev, stream);
  nccl.wait(stream);
  const std::vector<float> ring = in.download();
  wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += ring[i] != v(i, prev);
  CHECK(wrong == 0);

  // A lone send and a lone receive, member 0 to member 1.
  DeviceBuffer<T> one(std::vector<float>(n, -1.0f));
  if (me == 0) nccl.send(d.get(), n, 1, stream);
  if (me == 1) nccl.recv(one.get(), n, 0, stream);
  nccl.wait(stream);
  if (me == 1) {
    const std::vector<float> got = one.download();
    wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += got[i] != sum(i, 0);
    CHECK(wrong == 0);
  }
}

}  // namespace

TEST_CASE("NcclComm collectives on float, bf16 and fp16", "[nccl]") {
  Setup s;
  NcclComm nccl(s.world);
  CHECK(nccl.size() == s.world.size());
  CHECK(nccl.rank() == s.world.rank());
  check_collectives<float>(nccl, s.stream);
  check_collectives<__nv_bfloat16>(nccl, s.stream);
  check_collectives<__half>(nccl, s.stream);
}

TEST_CASE("MEG_NCCL_TIMEOUT", "[nccl]") {
  unsetenv("MEG_NCCL_TIMEOUT");
  CHECK(NcclComm::timeout_seconds() == 600);
  setenv("MEG_NCCL_TIMEOUT", "2.5", 1);
  CHECK(NcclComm::timeout_seconds() == 2.5);
  setenv("MEG_NCCL_TIMEOUT", "soon", 1);
  CHECK_THROWS_MATCHES(NcclComm::timeout_seconds(), InputError,
                       Catch::Matchers::Message("MEG_NCCL_TIMEOUT 'soon': expected a positive number of seconds"));
  setenv("MEG_NCCL_TIMEOUT", "0", 1);
  CHECK_THROWS_AS(NcclComm::timeout_seconds(), InputError);
  unsetenv("MEG_NCCL_TIMEOUT");
}

TEST_CASE("a receive no peer answers times out and aborts the communicator", "[nccl]") {
  Setup s;
  NcclComm nccl(s.world);
  const int P = nccl.size(), me = nccl.rank();
  const size_t n = 1024;
  DeviceBuffer<float> out(std::vector<float>(n, 1.0f)), in(std::vector<float>(n, 0.0f));
  // One good exchange first, so the connections exist and the lone receive below reaches the GPU.
  nccl.send_recv(out.get(), n, (me + 1) % P, in.get(), n, (me + P - 1) % P, s.stream);
  nccl.wait(s.stream);
  nccl.recv(in.get(), n, (me + P - 1) % P, s.stream);  // nobody sends
  CHECK_THROWS_WITH(nccl.wait(s.stream, 2.0), ContainsSubstring("did not finish within 2 s") &&
                                                  ContainsSubstring("communicator aborted"));
  CHECK_THROWS_WITH(nccl.all_reduce_sum(in.get(), n, s.stream), ContainsSubstring("the communicator was aborted"));
  // The abort stopped the receive's kernel: the stream drains.
  const auto start = std::chrono::steady_clock::now();
  cudaError_t state = cudaErrorNotReady;
  while (state == cudaErrorNotReady && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    state = cudaStreamQuery(s.stream);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(state == cudaSuccess);
  World::get().world().barrier();
}
