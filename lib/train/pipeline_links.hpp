// The messages of the pipeline schedules on GPUs. A rank of a schedule (train/pipeline_schedule.hpp,
// 1F1B or interleaved) receives a message only when the step that needs it comes, so a send has to
// be able to wait for its receiver without blocking the sender's own work, as Comm::isend does on
// CPUs.
//
// NCCL's point-to-point send occupies its stream until the peer posts the matching receive. So
// each link between neighbouring pipeline ranks, one per direction (activations from rank i to
// i + 1, gradients from i + 1 to i, rank S - 1 wrapping to 0), is a two-member NCCL communicator
// of its own, split from the pipeline's; a rank's sends go out on a stream of their own per
// direction, from a copy of the data (so the caller may overwrite its buffer at once), and its
// receives run on the compute stream, which waits for the message as a CPU rank's recv does. Each
// link carries one direction's messages in the order the sender sends them, which the schedules'
// orders make the order the receiver takes them (forward number k of one rank feeds forward number
// k, or k + S past the wrap, of the next), so no tags are needed.
//
// CUDA builds only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "ops/cuda/device_memory.hpp"
#include "parallel/nccl_comm.hpp"

namespace meg {

template <typename X>
class PipelineLinks {
 public:
  // Collective over PIPELINE's members (it splits the link communicators from it).
  PipelineLinks(NcclComm& pipeline, cuda::DeviceAllocator& alloc);
  ~PipelineLinks();
  PipelineLinks(const PipelineLinks&) = delete;
  PipelineLinks& operator=(const PipelineLinks&) = delete;

  // Sends N values of DATA to the next rank (activations) or the previous one (gradients), after
  // the work queued on STREAM so far; returns at once, and so does STREAM.
  void send_next(const X* data, size_t n, cudaStream_t stream);
  void send_previous(const X* data, size_t n, cudaStream_t stream);
  // Queues on STREAM the receipt of N values into DATA from the previous rank (activations) or the
  // next one (gradients).
  void recv_previous(X* data, size_t n, cudaStream_t stream);
  void recv_next(X* data, size_t n, cudaStream_t stream);
  // STREAM's later work waits for every send so far to be taken.
  void join(cudaStream_t stream);

  // For the communication timing of the links' calls.
  std::vector<NcclComm*> comms();

 private:
  struct Outgoing {
    cuda::DeviceArray<X> data;
    cudaEvent_t done = nullptr;  // recorded on the send stream after the send
  };
  struct Direction {
    NcclComm* send_link = nullptr;  // of links_
    NcclComm* recv_link = nullptr;
    cudaStream_t stream = nullptr;
    std::vector<std::unique_ptr<Outgoing>> outgoing;
  };
  void send(Direction& d, const X* data, size_t n, cudaStream_t stream);
  static void recv(Direction& d, X* data, size_t n, cudaStream_t stream);

  cuda::DeviceAllocator& alloc_;
  // This rank's link communicators in the order of their creation, which every rank shares: they
  // are destroyed in that order too, as NCCL's tear-down waits for the other member.
  std::vector<std::unique_ptr<NcclComm>> links_;
  Direction forward_, backward_;  // activations to the next rank; gradients to the previous one
  cudaEvent_t ready_ = nullptr;
};

}  // namespace meg
