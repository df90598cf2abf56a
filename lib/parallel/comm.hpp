// Communication for the parallel layout: the job's processes (World) and one communicator per
// process group (Comm), with the collectives the training loop needs on HOST buffers, through MPI.
// Device buffers go through NCCL (parallel/nccl_comm.hpp) on communicators built from these.
//
// World::init() starts MPI only when the process was started by an MPI launcher (mpirun, Slurm's
// srun: recognised by their environment variables); a process started on its own is a world of
// one with no MPI at all, and every collective on a group of one is a copy or nothing. So the same
// code runs from one process to hundreds.
//
// Failures: a collective that fails throws std::runtime_error naming the group and the call. A
// rank that stops with an error must bring the job down rather than leave the others waiting in a
// collective forever: World::abort() (MPI_Abort) does that, and cli::run_tool calls it when a
// tool exits with an error in a world of more than one process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/layout.hpp"

namespace meg {

// A send under way (Comm::isend): move-only; its buffer must stay unchanged until Comm::done()
// has said so or Comm::wait() has returned.
class CommRequest {
 public:
  CommRequest() = default;
  CommRequest(CommRequest&&) = default;
  CommRequest& operator=(CommRequest&&) = default;

 private:
  friend class Comm;
  std::vector<intptr_t> pending_;  // MPI requests (cast like Comm::handle()), one per chunk
};

class Comm {
 public:
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }  // e.g. "dp" or "world", for messages

  // In place, over every member: the element-wise sum. Every member gets the same bits (each
  // element is summed on one member and copied to the others).
  void all_reduce_sum(float* data, size_t n);
  void all_reduce_sum(double* data, size_t n);
  // The element-wise maximum (e.g. of a status flag).
  void all_reduce_max(int64_t* data, size_t n);
  void all_reduce_max(double* data, size_t n);
  // SEND holds size() * n values; member r receives in RECV[n] the sum over members of block r.
  void reduce_scatter_sum(float* recv, const float* send, size_t n);
  void reduce_scatter_sum(double* recv, const double* send, size_t n);
  // Every member contributes SEND[n]; RECV[size() * n] holds them in member order.
  void all_gather(float* recv, const float* send, size_t n);
  void all_gather(double* recv, const double* send, size_t n);
  // The same for raw bytes: SEND[bytes] from every member, RECV[size() * bytes] in member order.
  void all_gather_bytes(void* recv, const void* send, size_t bytes);
  // ROOT's DATA[n] to every member.
  void broadcast(void* data, size_t bytes, int root);
  void send(const float* data, size_t n, int dest, int tag = 0);
  void recv(float* data, size_t n, int source, int tag = 0);
  // SEND[send_n] to DEST and RECV[recv_n] from SOURCE at once (a pipeline stage passing activations
  // on while taking gradients back): never blocked by the peer doing the same.
  void send_recv(const float* send, size_t send_n, int dest, int send_tag, float* recv, size_t recv_n, int source,
                 int recv_tag);
  // Starts sending DATA[n] to DEST and returns at once (a pipeline stage sending on without
  // waiting for the peer to take it): DATA must stay valid and unchanged until the request is done.
  [[nodiscard]] CommRequest isend(const float* data, size_t n, int dest, int tag = 0);
  // Whether REQUEST's send is complete, without blocking; wait() blocks until it is.
  bool done(CommRequest& request);
  void wait(CommRequest& request);
  void barrier();

  // The MPI communicator (an MPI_Comm cast to a pointer-sized integer), or 0 in a world of one.
  intptr_t handle() const { return handle_; }

 private:
  friend class World;
  Comm(intptr_t handle, int rank, int size, std::string name)
      : handle_(handle), rank_(rank), size_(size), name_(std::move(name)) {}
  intptr_t handle_;
  int rank_, size_;
  std::string name_;
};

class World {
 public:
  // Starts MPI when launched by an MPI launcher (idempotent). The World lives until exit.
  static World& init();
  static World& get();  // init() must have run
  static bool initialized();

  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  bool distributed() const { return size() > 1; }
  // The rank among this node's processes (which GPU of the node to take): 0 in a world of one.
  int local_rank() const { return local_rank_; }
  Comm& world() { return *world_; }

  // Splits the world into the groups of LAYOUT (whose world_size() must equal size(): InputError
  // otherwise). Call collectively before group(); a later call replaces the groups.
  void set_layout(const ParallelLayout& layout);
  const ParallelLayout& layout() const { return layout_; }
  const RankCoords& coords() const { return coords_; }
  // This rank's group along D.
  Comm& group(ParallelDim d);

  // Ends every process of the job with STATUS (MPI_Abort; plain exit in a world of one).
  [[noreturn]] void abort(int status);
  ~World();

 private:
  World();
  std::unique_ptr<Comm> world_;
  ParallelLayout layout_;
  RankCoords coords_;
  std::vector<std::unique_ptr<Comm>> groups_;  // indexed by ParallelDim
  bool mpi_ = false;
  int local_rank_ = 0;
};

}  // namespace meg
