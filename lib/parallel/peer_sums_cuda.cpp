#include "parallel/peer_sums.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "ops/cuda/check.hpp"

namespace meg {

namespace {

constexpr size_t kVector = 16;  // bytes of one of peer_sum's vectors

// What a member tells the others: its host, its device, the handle of its receive area, and
// whether it got that far.
struct Member {
  char host[256] = {};
  cudaUUID_t device = {};
  cudaIpcMemHandle_t area = {};
  int32_t ok = 0;
};

bool same_host(const Member& a, const Member& b) { return std::strncmp(a.host, b.host, sizeof a.host) == 0; }
bool same_device(const Member& a, const Member& b) { return std::memcmp(&a.device, &b.device, sizeof a.device) == 0; }

bool enabled_by_environment() {
  const char* value = std::getenv("MEG_PEER_SUMS");
  return value == nullptr || std::string_view(value) != "0";
}

}  // namespace

std::unique_ptr<PeerSums> PeerSums::create(Comm& group, size_t capacity) {
  const int size = group.size(), rank = group.rank();
  if (size < 2 || size > cuda::kMaxPeers) return nullptr;  // the same on every member
  std::unique_ptr<PeerSums> sums(new PeerSums());
  cuda::PeerSumBuffers& b = sums->buffers_;
  b.rank = rank;
  b.size = size;
  b.capacity_vecs = (capacity + kVector - 1) / kVector;
  const size_t data_bytes = 2 * size_t(size) * b.capacity_vecs * kVector;
  const size_t flag_bytes = 2 * size_t(cuda::kPeerSumBlocks) * cuda::kMaxPeers * sizeof(unsigned);

  // Allocated and zeroed here; a failure (no memory, no interprocess handles) is this member's
  // no, which the others hear of below rather than as an exception of one member alone.
  std::vector<Member> members(static_cast<size_t>(size));
  Member& me = members[size_t(rank)];
  int device = 0;
  cudaDeviceProp prop{};
  bool ok = enabled_by_environment() && gethostname(me.host, sizeof me.host - 1) == 0 &&
            cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess &&
            cudaMalloc(&sums->own_, data_bytes + flag_bytes) == cudaSuccess &&
            cudaMalloc(&b.epochs, cuda::kPeerSumBlocks * sizeof(unsigned)) == cudaSuccess &&
            cudaMemset(sums->own_, 0, data_bytes + flag_bytes) == cudaSuccess &&
            cudaMemset(b.epochs, 0, cuda::kPeerSumBlocks * sizeof(unsigned)) == cudaSuccess &&
            cudaIpcGetMemHandle(&me.area, sums->own_) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
  me.device = prop.uuid;
  me.ok = ok;
  for (int r = 0; r < size; ++r) group.broadcast(&members[size_t(r)], sizeof(Member), r);

  // Every member on this host, each on a device of its own; then every other member's area mapped.
  for (int r = 0; r < size && ok; ++r) {
    const Member& m = members[size_t(r)];
    ok = m.ok && same_host(m, me) && (r == rank || !same_device(m, me));
  }
  for (int r = 0; r < size && ok; ++r) {
    void* area = sums->own_;
    if (r != rank) {
      ok = cudaIpcOpenMemHandle(&area, members[size_t(r)].area, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess;
      if (!ok) break;
      sums->mapped_.push_back(area);
    }
    b.data[r] = area;
    b.flags[r] = reinterpret_cast<unsigned*>(static_cast<char*>(area) + data_bytes);
  }
  cudaGetLastError();  // a refusal above is an answer, not an error for the next CUDA call to report

  // All or none: every member zeroed its area before this, so none writes into another's early.
  int64_t failed = ok ? 0 : 1;
  group.all_reduce_max(&failed, 1);
  if (failed != 0) return nullptr;
  return sums;
}

PeerSums::~PeerSums() {
  for (void* area : mapped_) cudaIpcCloseMemHandle(area);
  if (own_ != nullptr) cudaFree(own_);
  if (buffers_.epochs != nullptr) cudaFree(buffers_.epochs);
}

}  // namespace meg
