// A CUDA stream of its own, destroyed with its owner, and an event alike. A class member that
// others queue work on goes first among the members, so that it is destroyed last. Non-blocking
// by default (no implicit ordering with the legacy default stream); cudaStreamDefault gives one
// that is ordered with it, as code that copies with plain cudaMemcpy around its launches needs.
// Only for code built with CUDA (MEG_CUDA).
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/check.hpp"

namespace meg::cuda {

class Stream {
 public:
  explicit Stream(unsigned flags = cudaStreamNonBlocking) {
    MEG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, flags));
  }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// An event that marks where a stream's work has got to, for a host to wait on (no timing).
class Event {
 public:
  Event() { MEG_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace meg::cuda
