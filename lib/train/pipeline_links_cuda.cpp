#include "train/pipeline_links.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <fmt/format.h>

#include "ops/cuda/check.hpp"

namespace meg {

// NCCL connects a communicator's peers on its first send and receive, with the host blocked until
// the peer's host connects too. Mid-schedule that would stall the host while its stream waits on a
// neighbour, so each link makes its connection here, with one message, before the next split.
template <typename X>
static void connect(NcclComm& link, bool sender, cuda::DeviceAllocator& alloc, cudaStream_t stream) {
  cuda::DeviceArray<X> one(alloc, 1);
  MEG_CUDA_CHECK(cudaMemsetAsync(one.get(), 0, one.bytes(), stream));
  if (sender) link.send(one.get(), 1, 1 - link.rank(), stream);
  else link.recv(one.get(), 1, 1 - link.rank(), stream);
  link.wait(stream);
}

template <typename X>
PipelineLinks<X>::PipelineLinks(NcclComm& pipeline, cuda::DeviceAllocator& alloc) : alloc_(alloc) {
  const int S = pipeline.size(), s = pipeline.rank();
  for (Direction* d : {&forward_, &backward_}) MEG_CUDA_CHECK(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
  MEG_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  // Every rank takes part in every split, in the same order (NCCL's splits are collective).
  for (int i = 0; i < S; ++i) {
    const int next = (i + 1) % S;
    auto activations = pipeline.split(s == i || s == next, fmt::format("pipeline link {}->{}", i, next));
    if (activations) {
      connect<X>(*activations, s == i, alloc, forward_.stream);
      (s == i ? forward_.send_link : forward_.recv_link) = activations.get();
      links_.push_back(std::move(activations));
    }
    auto gradients = pipeline.split(s == i || s == next, fmt::format("pipeline link {}->{}", next, i));
    if (gradients) {
      connect<X>(*gradients, s == next, alloc, backward_.stream);
      (s == next ? backward_.send_link : backward_.recv_link) = gradients.get();
      links_.push_back(std::move(gradients));
    }
  }
}

template <typename X>
PipelineLinks<X>::~PipelineLinks() {
  for (Direction* d : {&forward_, &backward_}) {
    cudaStreamSynchronize(d->stream);
    for (auto& o : d->outgoing) cudaEventDestroy(o->done);
    cudaStreamDestroy(d->stream);
  }
  cudaEventDestroy(ready_);
  for (auto& link : links_) link.reset();
}

// Copies DATA (after STREAM's work so far) into a buffer no send is using, and sends it from
// there on the direction's own stream.
template <typename X>
void PipelineLinks<X>::send(Direction& d, const X* data, size_t n, cudaStream_t stream) {
  Outgoing* free = nullptr;
  for (auto& o : d.outgoing)
    if (o->data.size() >= n && cudaEventQuery(o->done) == cudaSuccess) {
      free = o.get();
      break;
    }
  if (!free) {
    d.outgoing.push_back(std::make_unique<Outgoing>());
    free = d.outgoing.back().get();
    free->data = cuda::DeviceArray<X>(alloc_, n);
    MEG_CUDA_CHECK(cudaEventCreateWithFlags(&free->done, cudaEventDisableTiming));
  }
  MEG_CUDA_CHECK(cudaMemcpyAsync(free->data.get(), data, n * sizeof(X), cudaMemcpyDeviceToDevice, stream));
  MEG_CUDA_CHECK(cudaEventRecord(ready_, stream));
  MEG_CUDA_CHECK(cudaStreamWaitEvent(d.stream, ready_, 0));
  NcclComm& link = *d.send_link;
  link.send(free->data.get(), n, 1 - link.rank(), d.stream);
  MEG_CUDA_CHECK(cudaEventRecord(free->done, d.stream));
}

template <typename X>
void PipelineLinks<X>::recv(Direction& d, X* data, size_t n, cudaStream_t stream) {
  NcclComm& link = *d.recv_link;
  link.recv(data, n, 1 - link.rank(), stream);
}

template <typename X>
void PipelineLinks<X>::send_next(const X* data, size_t n, cudaStream_t stream) {
  send(forward_, data, n, stream);
}
template <typename X>
void PipelineLinks<X>::send_previous(const X* data, size_t n, cudaStream_t stream) {
  send(backward_, data, n, stream);
}
template <typename X>
void PipelineLinks<X>::recv_previous(X* data, size_t n, cudaStream_t stream) {
  recv(forward_, data, n, stream);
}
template <typename X>
void PipelineLinks<X>::recv_next(X* data, size_t n, cudaStream_t stream) {
  recv(backward_, data, n, stream);
}

template <typename X>
void PipelineLinks<X>::join(cudaStream_t stream) {
  for (Direction* d : {&forward_, &backward_}) {
    MEG_CUDA_CHECK(cudaEventRecord(ready_, d->stream));
    MEG_CUDA_CHECK(cudaStreamWaitEvent(stream, ready_, 0));
  }
}

template <typename X>
std::vector<NcclComm*> PipelineLinks<X>::comms() {
  return {forward_.send_link, forward_.recv_link, backward_.send_link, backward_.recv_link};
}

template class PipelineLinks<float>;
template class PipelineLinks<__nv_bfloat16>;
template class PipelineLinks<__half>;

}  // namespace meg
