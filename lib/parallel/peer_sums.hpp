// Sums over a tensor-parallel group whose members' GPUs can write into each other's memory (one
// host, peer access: NVLink or PCIe), by one kernel a call (kernels/peer_sums.cu) instead of
// NCCL's all-reduce: what a decode step's few rows cost is the latency, and there one kernel that
// writes straight into the others' memory beats NCCL's launch and ring (tensor-parallel inference,
// infer/cuda_inference_model.hpp).
//
// Each member allocates a receive area (two halves of one row per member, CAPACITY bytes each) and
// flags in one allocation, and maps every other member's through CUDA's interprocess handles,
// exchanged over the group's Comm. create() returns null, on every member alike, where that
// cannot be done: members on different hosts, more than kMaxPeers members, two on one device, or
// a device that cannot map another's memory; or where MEG_PEER_SUMS=0.
//
// As NCCL's kernels, a call's kernel waits on the device for the other members' calls: every
// member must make the same calls in the same order (a collective), and a member that never
// makes its call leaves the others' kernels waiting, which NcclComm::wait() turns into an error.
// CUDA builds only (MEG_CUDA).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "ops/cuda/ops.hpp"
#include "parallel/comm.hpp"

namespace meg {

class PeerSums {
 public:
  // Collective over GROUP's members, each on its own device (current when called); null where
  // the members cannot share memory (above). CAPACITY: the most bytes a call sums.
  static std::unique_ptr<PeerSums> create(Comm& group, size_t capacity);
  ~PeerSums();
  PeerSums(const PeerSums&) = delete;
  PeerSums& operator=(const PeerSums&) = delete;

  // In place (DATA) or into OUT as OUT + the sum (add_sum): the element-wise sum over the members,
  // the same bits on every member, queued on STREAM. False, with nothing queued, for N values
  // that do not fit (more than the capacity, or not whole 16-byte vectors): the caller sums them
  // otherwise. T = float, __nv_bfloat16 or __half.
  template <typename T>
  bool sum(T* data, size_t n, cudaStream_t stream) {
    return cuda::peer_sum(data, data, n, false, buffers_, stream);
  }
  template <typename T>
  bool add_sum(T* out, const T* in, size_t n, cudaStream_t stream) {
    return cuda::peer_sum(out, in, n, true, buffers_, stream);
  }

 private:
  PeerSums() = default;

  cuda::PeerSumBuffers buffers_;
  void* own_ = nullptr;              // this member's receive area and flags
  std::vector<void*> mapped_;        // the other members', mapped here
};

}  // namespace meg
