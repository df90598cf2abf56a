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

namespace meg {
namespace {

ncclDataType_t dtype(const float*) { return ncclFloat; }
ncclDataType_t dtype(const __nv_bfloat16*) { return ncclBfloat16; }

}  // namespace

NcclComm::NcclComm(Comm& group) : rank_(group.rank()), size_(group.size()), name_(group.name()) {
  ncclUniqueId id{};
  if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  group.broadcast(&id, sizeof id, 0);
  ncclComm_t comm = nullptr;
  check(ncclCommInitRank(&comm, size_, id, rank_), "ncclCommInitRank");
  comm_ = comm;
}

NcclComm::~NcclComm() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
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
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    live();
    const cudaError_t state = cudaStreamQuery(stream);
    if (state == cudaSuccess) return check_async();
    if (state != cudaErrorNotReady) abort_and_throw(fmt::format("the stream failed: {}", cudaGetErrorString(state)));
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds)
      abort_and_throw(fmt::format("the stream's work did not finish within {} s (a member failed or stopped?)",
                                  seconds));
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

void NcclComm::all_reduce_sum(float* data, size_t n, cudaStream_t stream) {
  check(ncclAllReduce(data, data, n, ncclFloat, ncclSum, live(), stream), "ncclAllReduce");
}
void NcclComm::all_reduce_sum(__nv_bfloat16* data, size_t n, cudaStream_t stream) {
  check(ncclAllReduce(data, data, n, ncclBfloat16, ncclSum, live(), stream), "ncclAllReduce");
}

void NcclComm::reduce_scatter_sum(float* recv, const float* send, size_t n, cudaStream_t stream) {
  check(ncclReduceScatter(send, recv, n, ncclFloat, ncclSum, live(), stream), "ncclReduceScatter");
}
void NcclComm::reduce_scatter_sum(__nv_bfloat16* recv, const __nv_bfloat16* send, size_t n, cudaStream_t stream) {
  check(ncclReduceScatter(send, recv, n, ncclBfloat16, ncclSum, live(), stream), "ncclReduceScatter");
}

void NcclComm::all_gather(float* recv, const float* send, size_t n, cudaStream_t stream) {
  check(ncclAllGather(send, recv, n, ncclFloat, live(), stream), "ncclAllGather");
}
void NcclComm::all_gather(__nv_bfloat16* recv, const __nv_bfloat16* send, size_t n, cudaStream_t stream) {
  check(ncclAllGather(send, recv, n, ncclBfloat16, live(), stream), "ncclAllGather");
}

void NcclComm::send(const float* data, size_t n, int peer, cudaStream_t stream) {
  check(ncclSend(data, n, ncclFloat, peer, live(), stream), "ncclSend");
}
void NcclComm::send(const __nv_bfloat16* data, size_t n, int peer, cudaStream_t stream) {
  check(ncclSend(data, n, ncclBfloat16, peer, live(), stream), "ncclSend");
}

void NcclComm::recv(float* data, size_t n, int peer, cudaStream_t stream) {
  check(ncclRecv(data, n, ncclFloat, peer, live(), stream), "ncclRecv");
}
void NcclComm::recv(__nv_bfloat16* data, size_t n, int peer, cudaStream_t stream) {
  check(ncclRecv(data, n, ncclBfloat16, peer, live(), stream), "ncclRecv");
}

template <typename T>
void NcclComm::send_recv_impl(const T* send, size_t send_n, int dest, T* recv, size_t recv_n, int source,
                              cudaStream_t stream) {
  ncclComm* comm = live();
  check(ncclGroupStart(), "ncclGroupStart");
  // The group must be closed whatever happens inside it, so the results are checked after.
  const ncclResult_t sent = ncclSend(send, send_n, dtype(send), dest, comm, stream);
  const ncclResult_t received = ncclRecv(recv, recv_n, dtype(send), source, comm, stream);
  const ncclResult_t ended = ncclGroupEnd();
  check(sent, "ncclSend");
  check(received, "ncclRecv");
  check(ended, "ncclGroupEnd");
}

void NcclComm::send_recv(const float* send, size_t send_n, int dest, float* recv, size_t recv_n, int source,
                         cudaStream_t stream) {
  send_recv_impl(send, send_n, dest, recv, recv_n, source, stream);
}
void NcclComm::send_recv(const __nv_bfloat16* send, size_t send_n, int dest, __nv_bfloat16* recv, size_t recv_n,
                         int source, cudaStream_t stream) {
  send_recv_impl(send, send_n, dest, recv, recv_n, source, stream);
}

}  // namespace meg
