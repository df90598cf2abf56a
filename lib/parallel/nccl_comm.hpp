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
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

  // A communicator of the members that pass MEMBER = true, in this one's rank order, named NAME:
  // collective over every member of this one (those passing false get null). A pipeline's links
  // between neighbours are such communicators of two members each.
  std::unique_ptr<NcclComm> split(bool member, const std::string& name);

  // The collectives and transfers below take T = float, __nv_bfloat16 or __half.

  // In place: the element-wise sum over the members, the same bits on every member.
  template <typename T>
  void all_reduce_sum(T* data, size_t n, cudaStream_t stream);
  // SEND holds size() * n values; member r receives in RECV[n] the sum over members of block r.
  template <typename T>
  void reduce_scatter_sum(T* recv, const T* send, size_t n, cudaStream_t stream);
  // Every member contributes SEND[n]; RECV[size() * n] holds them in member order.
  template <typename T>
  void all_gather(T* recv, const T* send, size_t n, cudaStream_t stream);

  // Point to point. A send holds its stream until the peer's matching receive runs, so a member
  // that both sends and receives (a ring, a pipeline stage) must post both in one send_recv.
  template <typename T>
  void send(const T* data, size_t n, int peer, cudaStream_t stream);
  template <typename T>
  void recv(T* data, size_t n, int peer, cudaStream_t stream);
  template <typename T>
  void send_recv(const T* send, size_t send_n, int dest, T* recv, size_t recv_n, int source, cudaStream_t stream);

  // Timing, for measuring what communication costs (off by default): while on, every call's work
  // is bracketed by CUDA events on its stream, and take_elapsed_ms() returns the summed time of
  // the calls since its last call, waiting for them to finish.
  void set_timing(bool on) { timing_ = on; }
  double take_elapsed_ms();

  // Blocks until STREAM's work is done; throws, aborting the communicator, when NCCL reports an
  // error or SECONDS pass first.
  void wait(cudaStream_t stream, double seconds);
  void wait(cudaStream_t stream) { wait(stream, timeout_seconds()); }
  // The same for the work before EVENT (recorded on a stream).
  void wait(cudaEvent_t event);
  // Throws, aborting the communicator, when NCCL has reported an asynchronous error.
  void check_async();
  // MEG_NCCL_TIMEOUT (seconds; InputError when not a positive number), else 600.
  static double timeout_seconds();

 private:
  ncclComm* live();  // the communicator, after check_async(); throws once aborted
  void check(int result, const char* call);
  [[noreturn]] void abort_and_throw(const std::string& why);
  // wait()'s loop, until QUERY (cudaStreamQuery's or cudaEventQuery's) says the work is done.
  void wait_until(const std::function<cudaError_t()>& query, double seconds);

  NcclComm(ncclComm* comm, std::string name);

  // Brackets one call's work with a pair of events when timing (a pooled pair, reused after
  // take_elapsed_ms()).
  class Timed {
   public:
    Timed(NcclComm& comm, cudaStream_t stream);
    ~Timed();

   private:
    NcclComm& comm_;
    cudaStream_t stream_;
  };

  ncclComm* comm_ = nullptr;
  int rank_, size_;
  std::string name_;
  bool timing_ = false;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events_;
  size_t events_used_ = 0;
};

}  // namespace meg
