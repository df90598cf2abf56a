// NcclComm: NCCL calls with every result checked, and the wait that turns a failed or vanished peer
// into an exception instead of a hang.
#include "parallel/nccl_comm.hpp"

#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"
#include "ops/cuda/check.hpp"

namespace meg {
namespace {

ncclDataType_t dtype(const float*) { return ncclFloat; }
ncclDataType_t dtype(const __nv_bfloat16*) { return ncclBfloat16; }
ncclDataType_t dtype(const __half*) { return ncclHalf; }

constexpr int kSpinMs = 5;  // wait() polls without sleeping for this long

}  // namespace

NcclComm::NcclComm(Comm& group) : rank_(group.rank()), size_(group.size()), name_(group.name()) {
  ncclUniqueId id{};
  if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  group.broadcast(&id, sizeof id, 0);
  ncclComm_t comm = nullptr;
  check(ncclCommInitRank(&comm, size_, id, rank_), "ncclCommInitRank");
  comm_ = comm;
}

NcclComm::NcclComm(ncclComm* comm, std::string name) : comm_(comm), name_(std::move(name)) {
  check(ncclCommCount(comm_, &size_), "ncclCommCount");
  check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
}

std::unique_ptr<NcclComm> NcclComm::split(bool member, const std::string& name) {
  ncclComm_t part = nullptr;
  check(ncclCommSplit(live(), member ? 0 : NCCL_SPLIT_NOCOLOR, rank_, &part, nullptr), "ncclCommSplit");
  if (!member) return nullptr;
  return std::unique_ptr<NcclComm>(new NcclComm(part, name));
}

NcclComm::~NcclComm() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
  for (auto& [start, end] : events_) {
    cudaEventDestroy(start);
    cudaEventDestroy(end);
  }
}

NcclComm::Timed::Timed(NcclComm& comm, cudaStream_t stream) : comm_(comm), stream_(stream) {
  if (!comm_.timing_) return;
  if (comm_.events_used_ == comm_.events_.size()) {
    cudaEvent_t start = nullptr, end = nullptr;
    MEG_CUDA_CHECK(cudaEventCreate(&start));
    MEG_CUDA_CHECK(cudaEventCreate(&end));
    comm_.events_.emplace_back(start, end);
  }
  MEG_CUDA_CHECK(cudaEventRecord(comm_.events_[comm_.events_used_].first, stream_));
}

NcclComm::Timed::~Timed() {
  if (!comm_.timing_) return;
  cudaEventRecord(comm_.events_[comm_.events_used_++].second, stream_);  // no throwing from a destructor
}

double NcclComm::take_elapsed_ms() {
  double total = 0;
  for (size_t k = 0; k < events_used_; ++k) {
    MEG_CUDA_CHECK(cudaEventSynchronize(events_[k].second));
    float ms = 0;
    MEG_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[k].first, events_[k].second));
    total += ms;
  }
  events_used_ = 0;
  return total;
}

void NcclComm::check(int result, const char* call) {
  const auto r = static_cast<ncclResult_t>(result);
  if (r == ncclSuccess) return;
  const char* detail = comm_ != nullptr ? ncclGetLastError(comm_) : nullptr;
  throw std::runtime_error(fmt::format("{} on the {} group failed: {}{}", call, name_, ncclGetErrorString(r),
                                       detail != nullptr && *detail != '\0' ? fmt::format(" ({})", detail) : ""));
}

void NcclComm::abort_and_throw(const std::string& why) {
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
  throw std::runtime_error(fmt::format("NCCL on the {} group: {}; communicator aborted", name_, why));
}

void NcclComm::check_async() {
  if (comm_ == nullptr) return;
  ncclResult_t state = ncclSuccess;
  check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
  if (state != ncclSuccess && state != ncclInProgress)
    abort_and_throw(fmt::format("asynchronous error: {} ({})", ncclGetErrorString(state), ncclGetLastError(comm_)));
}

ncclComm* NcclComm::live() {
  if (comm_ == nullptr)
    throw std::runtime_error(fmt::format("NCCL on the {} group: the communicator was aborted", name_));
  check_async();
  return comm_;
}

void NcclComm::wait(cudaStream_t stream, double seconds) {
  wait_until([stream] { return cudaStreamQuery(stream); }, seconds);
}

void NcclComm::wait(cudaEvent_t event) {
  wait_until([event] { return cudaEventQuery(event); }, timeout_seconds());
}

void NcclComm::wait_until(const std::function<cudaError_t()>& query, double seconds) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    live();
    const cudaError_t state = query();
    if (state == cudaSuccess) return check_async();
    if (state != cudaErrorNotReady) abort_and_throw(fmt::format("the stream failed: {}", cudaGetErrorString(state)));
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds)
      abort_and_throw(fmt::format("the stream's work did not finish within {} s (a member failed or stopped?)",
                                  seconds));
    // A decode step's work ends within milliseconds, and a sleep's wake-up would add tens of
    // microseconds to it; only longer waits give the core back.
    if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(kSpinMs))
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

double NcclComm::timeout_seconds() {
  const char* text = std::getenv("MEG_NCCL_TIMEOUT");
  if (text == nullptr) return 600;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds > 0))
    input_error("MEG_NCCL_TIMEOUT '{}': expected a positive number of seconds", text);
  return seconds;
}

template <typename T>
void NcclComm::all_reduce_sum(T* data, size_t n, cudaStream_t stream) {
  Timed timed(*this, stream);
  check(ncclAllReduce(data, data, n, dtype(data), ncclSum, live(), stream), "ncclAllReduce");
}

template <typename T>
void NcclComm::reduce_scatter_sum(T* recv, const T* send, size_t n, cudaStream_t stream) {
  Timed timed(*this, stream);
  check(ncclReduceScatter(send, recv, n, dtype(send), ncclSum, live(), stream), "ncclReduceScatter");
}

template <typename T>
void NcclComm::all_gather(T* recv, const T* send, size_t n, cudaStream_t stream) {
  Timed timed(*this, stream);
  check(ncclAllGather(send, recv, n, dtype(send), live(), stream), "ncclAllGather");
}

template <typename T>
void NcclComm::send(const T* data, size_t n, int peer, cudaStream_t stream) {
  Timed timed(*this, stream);
  check(ncclSend(data, n, dtype(data), peer, live(), stream), "ncclSend");
}

template <typename T>
void NcclComm::recv(T* data, size_t n, int peer, cudaStream_t stream) {
  Timed timed(*this, stream);
  check(ncclRecv(data, n, dtype(data), peer, live(), stream), "ncclRecv");
}

template <typename T>
void NcclComm::send_recv(const T* send, size_t send_n, int dest, T* recv, size_t recv_n, int source,
                         cudaStream_t stream) {
  ncclComm* comm = live();
  Timed timed(*this, stream);
  check(ncclGroupStart(), "ncclGroupStart");
  // The group must be closed whatever happens inside it, so the results are checked after.
  const ncclResult_t sent = ncclSend(send, send_n, dtype(send), dest, comm, stream);
  const ncclResult_t received = ncclRecv(recv, recv_n, dtype(send), source, comm, stream);
  const ncclResult_t ended = ncclGroupEnd();
  check(sent, "ncclSend");
  check(received, "ncclRecv");
  check(ended, "ncclGroupEnd");
}

#define MEG_INSTANTIATE(T)                                                                               \
  template void NcclComm::all_reduce_sum<T>(T*, size_t, cudaStream_t);                                  \
  template void NcclComm::reduce_scatter_sum<T>(T*, const T*, size_t, cudaStream_t);                     \
  template void NcclComm::all_gather<T>(T*, const T*, size_t, cudaStream_t);                             \
  template void NcclComm::send<T>(const T*, size_t, int, cudaStream_t);                                  \
  template void NcclComm::recv<T>(T*, size_t, int, cudaStream_t);                                        \
  template void NcclComm::send_recv<T>(const T*, size_t, int, T*, size_t, int, cudaStream_t);
MEG_INSTANTIATE(float)
MEG_INSTANTIATE(__nv_bfloat16)
MEG_INSTANTIATE(__half)
#undef MEG_INSTANTIATE

}  // namespace meg
