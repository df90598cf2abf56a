// Collectives on DEVICE buffers through NCCL: one communicator per process group, built from the
// group's Comm, which carries NCCL's bootstrap id from member 0 to the others.
//
// Every call enqueues its work on STREAM and returns. NCCL reports a failed peer only
// asynchronously, and a peer that died leaves the others spinning in a kernel forever; so wait()
// blocks on the stream while watching for NCCL's errors and a time-out (MEG_NCCL_TIMEOUT seconds,
// 600 by default), and on either aborts the communicator (ncclCommAbort, which stops its kernels)
// and throws. An aborted NcclComm throws on every later call.
//
// CUDA builds only (MEG_CUDA). Members must be on distinct devices: cudaSetDevice before
// constructing; each member's communicator lives on the device current then.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "parallel/comm.hpp"

struct ncclComm;  // nccl.h's ncclComm_t is a ncclComm*

namespace meg {

class NcclComm {
 public:
  // Collective over GROUP's members.
  explicit NcclComm(Comm& group);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  // In place: the element-wise sum over the members, the same bits on every member.
  void all_reduce_sum(float* data, size_t n, cudaStream_t stream);
  void all_reduce_sum(__nv_bfloat16* data, size_t n, cudaStream_t stream);
  // SEND holds size() * n values; member r receives in RECV[n] the sum over members of block r.
  void reduce_scatter_sum(float* recv, const float* send, size_t n, cudaStream_t stream);
  void reduce_scatter_sum(__nv_bfloat16* recv, const __nv_bfloat16* send, size_t n, cudaStream_t stream);
  // Every member contributes SEND[n]; RECV[size() * n] holds them in member order.
  void all_gather(float* recv, const float* send, size_t n, cudaStream_t stream);
  void all_gather(__nv_bfloat16* recv, const __nv_bfloat16* send, size_t n, cudaStream_t stream);

  // Point to point. A send holds its stream until the peer's matching receive runs, so a member
  // that both sends and receives (a ring, a pipeline stage) must post both in one send_recv.
  void send(const float* data, size_t n, int peer, cudaStream_t stream);
  void send(const __nv_bfloat16* data, size_t n, int peer, cudaStream_t stream);
  void recv(float* data, size_t n, int peer, cudaStream_t stream);
  void recv(__nv_bfloat16* data, size_t n, int peer, cudaStream_t stream);
  void send_recv(const float* send, size_t send_n, int dest, float* recv, size_t recv_n, int source,
                 cudaStream_t stream);
  void send_recv(const __nv_bfloat16* send, size_t send_n, int dest, __nv_bfloat16* recv, size_t recv_n,
                 int source, cudaStream_t stream);

  // Blocks until STREAM's work is done; throws, aborting the communicator, when NCCL reports an
  // error or SECONDS pass first.
  void wait(cudaStream_t stream, double seconds);
  void wait(cudaStream_t stream) { wait(stream, timeout_seconds()); }
  // Throws, aborting the communicator, when NCCL has reported an asynchronous error.
  void check_async();
  // MEG_NCCL_TIMEOUT (seconds; InputError when not a positive number), else 600.
  static double timeout_seconds();

 private:
  ncclComm* live();  // the communicator, after check_async(); throws once aborted
  void check(int result, const char* call);
  [[noreturn]] void abort_and_throw(const std::string& why);
  template <typename T>
  void send_recv_impl(const T* send, size_t send_n, int dest, T* recv, size_t recv_n, int source,
                      cudaStream_t stream);

  ncclComm* comm_ = nullptr;
  int rank_, size_;
  std::string name_;
};

}  // namespace meg
