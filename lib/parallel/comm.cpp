// Comm and World over MPI. Only this file includes mpi.h; the rest of libmeg sees Comm::handle().
//
// Every call is checked: the communicators return errors (MPI_ERRORS_RETURN) instead of aborting,
// and a failure throws std::runtime_error naming the group and the call. MPI counts are int, so
// each call moves at most kChunkBytes (4 MiB: already full bandwidth, and small enough for the
// staging copies below) and longer buffers go in several calls.
#include "parallel/comm.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>

// AddressSanitizer's leak check normally runs at exit, after MPI_Finalize has unloaded Open MPI's
// components: what they keep for the life of the process then looks leaked, from code that is no
// longer mapped (no module to suppress it by); MPI_Init also unloads the components it does not
// pick, orphaning what they allocated. So sanitizer builds ignore what MPI_Init allocates and
// check for leaks just before finalizing, when everything MPI holds is still reachable.
#if defined(__SANITIZE_ADDRESS__)
#define MEG_LEAK_CHECK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEG_LEAK_CHECK 1
#endif
#endif
#ifdef MEG_LEAK_CHECK
#include <sanitizer/lsan_interface.h>
#endif

namespace meg {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 22;

World* g_world = nullptr;

// MPI_Comm (and MPI_Request) is a pointer in Open MPI and an int in MPICH; both fit an intptr_t,
// and neither is 0 for a real communicator, so 0 means "no MPI" (a world of one).
template <typename C = MPI_Comm>
intptr_t to_handle(C c) {
  if constexpr (std::is_pointer_v<C>) return reinterpret_cast<intptr_t>(c);
  else return static_cast<intptr_t>(c);
}
template <typename C = MPI_Comm>
C to_comm(intptr_t h) {
  if constexpr (std::is_pointer_v<C>) return reinterpret_cast<C>(h);
  else return static_cast<C>(h);
}

void check(int rc, const std::string& group, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  const std::string why = MPI_Error_string(rc, text, &len) == MPI_SUCCESS ? std::string(text, static_cast<size_t>(len))
                                                                          : fmt::format("error {}", rc);
  throw std::runtime_error(fmt::format("{} on the {} group failed: {}", call, group, why));
}

template <typename T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, unsigned char>) return MPI_BYTE;
  else static_assert(sizeof(T) == 0, "no MPI type");
}

template <typename T>
constexpr size_t kChunk = kChunkBytes / sizeof(T);

// Sum over the group into DATA, the same bits on every member. Not MPI_Allreduce: its algorithms
// may add the partial sums in a different order on each member (recursive doubling does), and
// data-parallel replicas whose gradients differ in the last bit drift apart. Here each element is
// summed on exactly one member (reduce-scatter) and copied to the others (all-gather), which also
// spreads the work evenly, as a ring all-reduce does. Each chunk is padded with zeros to a multiple
// of the group size.
template <typename T>
void sum_everywhere(const Comm& c, T* data, size_t n) {
  if (c.size() == 1 || n == 0) return;
  const MPI_Comm comm = to_comm(c.handle());
  const size_t p = static_cast<size_t>(c.size());
  std::vector<T> work, mine;
  for (size_t off = 0; off < n; off += kChunk<T>) {
    const size_t len = std::min(kChunk<T>, n - off);
    const size_t block = (len + p - 1) / p;
    work.assign(block * p, T(0));
    std::copy(data + off, data + off + len, work.begin());
    mine.resize(block);
    const int count = static_cast<int>(block);
    check(MPI_Reduce_scatter_block(work.data(), mine.data(), count, mpi_type<T>(), MPI_SUM, comm), c.name(),
          "MPI_Reduce_scatter_block");
    check(MPI_Allgather(mine.data(), count, mpi_type<T>(), work.data(), count, mpi_type<T>(), comm), c.name(),
          "MPI_Allgather");
    std::copy(work.begin(), work.begin() + static_cast<std::ptrdiff_t>(len), data + off);
  }
}

// Launchers announce themselves in the environment of the processes they start:
//   Open MPI's mpirun               OMPI_COMM_WORLD_SIZE
//   MPICH's (and Intel MPI's) Hydra PMI_SIZE and PMI_RANK
//   PMIx launchers (srun --mpi=pmix) PMIX_RANK
//   Slurm's srun                    SLURM_PROCID with SLURM_STEP_NUM_TASKS > 1
// Slurm's rule uses the step's task count, which only srun sets: a batch script or an salloc shell
// also carries SLURM_NTASKS (the allocation's, possibly > 1) and may carry SLURM_PROCID=0, yet is
// one process that must not wait for peers. An srun step of one task is a world of one too.
bool launched_by_mpi() {
  const auto set = [](const char* name) { return std::getenv(name) != nullptr; };
  if (set("OMPI_COMM_WORLD_SIZE") || (set("PMI_SIZE") && set("PMI_RANK")) || set("PMIX_RANK")) return true;
  const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");
  return set("SLURM_PROCID") && tasks != nullptr && std::atoi(tasks) > 1;
}

}  // namespace

Comm::~Comm() {
  if (handle_ == 0) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Comm comm = to_comm(handle_);
  MPI_Comm_free(&comm);
}

void Comm::all_reduce_sum(float* data, size_t n) { sum_everywhere(*this, data, n); }
void Comm::all_reduce_sum(double* data, size_t n) { sum_everywhere(*this, data, n); }

// A maximum is exact, so MPI's own all-reduce gives every member the same values.
template <typename T>
void all_reduce_max_impl(Comm& c, T* data, size_t n) {
  if (c.size() == 1) return;
  for (size_t off = 0; off < n; off += kChunk<T>) {
    const int count = static_cast<int>(std::min(kChunk<T>, n - off));
    check(MPI_Allreduce(MPI_IN_PLACE, data + off, count, mpi_type<T>(), MPI_MAX, to_comm(c.handle())), c.name(),
          "MPI_Allreduce");
  }
}

void Comm::all_reduce_max(int64_t* data, size_t n) { all_reduce_max_impl(*this, data, n); }
void Comm::all_reduce_max(double* data, size_t n) { all_reduce_max_impl(*this, data, n); }

template <typename T>
void reduce_scatter_sum_impl(Comm& c, T* recv, const T* send, size_t n) {
  if (c.size() == 1) {
    std::copy(send, send + n, recv);
    return;
  }
  // A chunk takes the same columns of every member's block: packed into WORK unless it is all of N.
  std::vector<T> work;
  for (size_t off = 0; off < n; off += kChunk<T>) {
    const size_t len = std::min(kChunk<T>, n - off);
    const T* src = send;
    if (len < n) {
      work.resize(len * static_cast<size_t>(c.size()));
      for (size_t r = 0; r < static_cast<size_t>(c.size()); ++r)
        std::copy(send + r * n + off, send + r * n + off + len, work.begin() + static_cast<std::ptrdiff_t>(r * len));
      src = work.data();
    }
    check(MPI_Reduce_scatter_block(src, recv + off, static_cast<int>(len), mpi_type<T>(), MPI_SUM, to_comm(c.handle())),
          c.name(), "MPI_Reduce_scatter_block");
  }
}

template <typename T>
void all_gather_impl(Comm& c, T* recv, const T* send, size_t n) {
  if (c.size() == 1) {
    std::copy(send, send + n, recv);
    return;
  }
  // As reduce_scatter_sum: a chunk short of N lands in WORK, then in each member's block of RECV.
  std::vector<T> work;
  for (size_t off = 0; off < n; off += kChunk<T>) {
    const size_t len = std::min(kChunk<T>, n - off);
    const int count = static_cast<int>(len);
    if (len == n) {
      check(MPI_Allgather(send, count, mpi_type<T>(), recv, count, mpi_type<T>(), to_comm(c.handle())), c.name(), "MPI_Allgather");
      continue;
    }
    work.resize(len * static_cast<size_t>(c.size()));
    check(MPI_Allgather(send + off, count, mpi_type<T>(), work.data(), count, mpi_type<T>(), to_comm(c.handle())), c.name(),
          "MPI_Allgather");
    for (size_t r = 0; r < static_cast<size_t>(c.size()); ++r)
      std::copy(work.begin() + static_cast<std::ptrdiff_t>(r * len),
                work.begin() + static_cast<std::ptrdiff_t>((r + 1) * len), recv + r * n + off);
  }
}

void Comm::reduce_scatter_sum(float* recv, const float* send, size_t n) { reduce_scatter_sum_impl(*this, recv, send, n); }
void Comm::reduce_scatter_sum(double* recv, const double* send, size_t n) {
  reduce_scatter_sum_impl(*this, recv, send, n);
}
void Comm::all_gather(float* recv, const float* send, size_t n) { all_gather_impl(*this, recv, send, n); }
void Comm::all_gather(double* recv, const double* send, size_t n) { all_gather_impl(*this, recv, send, n); }
void Comm::all_gather_bytes(void* recv, const void* send, size_t bytes) {
  all_gather_impl(*this, static_cast<unsigned char*>(recv), static_cast<const unsigned char*>(send), bytes);
}

void Comm::broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= size_)
    throw std::invalid_argument(fmt::format("broadcast on the {} group: no member {} of {}", name_, root, size_));
  if (size_ == 1) return;
  auto* p = static_cast<char*>(data);
  for (size_t off = 0; off < bytes; off += kChunkBytes) {
    const int count = static_cast<int>(std::min(kChunkBytes, bytes - off));
    check(MPI_Bcast(p + off, count, MPI_BYTE, root, to_comm(handle_)), name_, "MPI_Bcast");
  }
}

void Comm::send(const float* data, size_t n, int dest, int tag) {
  if (dest < 0 || dest >= size_ || dest == rank_)
    throw std::invalid_argument(fmt::format("send on the {} group: member {} of {} cannot send to {}", name_, rank_,
                                            size_, dest));
  for (size_t off = 0; off < n; off += kChunk<float>) {
    const int count = static_cast<int>(std::min(kChunk<float>, n - off));
    check(MPI_Send(data + off, count, MPI_FLOAT, dest, tag, to_comm(handle_)), name_, "MPI_Send");
  }
}

void Comm::recv(float* data, size_t n, int source, int tag) {
  if (source < 0 || source >= size_ || source == rank_)
    throw std::invalid_argument(fmt::format("recv on the {} group: member {} of {} cannot receive from {}", name_,
                                            rank_, size_, source));
  for (size_t off = 0; off < n; off += kChunk<float>) {
    const int count = static_cast<int>(std::min(kChunk<float>, n - off));
    MPI_Status status;
    check(MPI_Recv(data + off, count, MPI_FLOAT, source, tag, to_comm(handle_), &status), name_, "MPI_Recv");
    int got = 0;
    check(MPI_Get_count(&status, MPI_FLOAT, &got), name_, "MPI_Get_count");
    if (got != count)  // a longer message fails in MPI_Recv itself (truncation)
      throw std::runtime_error(fmt::format("MPI_Recv on the {} group: member {} sent {} values where {} were expected",
                                           name_, source, got, count));
  }
}

void Comm::send_recv(const float* send, size_t send_n, int dest, int send_tag, float* recv, size_t recv_n, int source,
                     int recv_tag) {
  for (const int peer : {dest, source})
    if (peer < 0 || peer >= size_ || peer == rank_)
      throw std::invalid_argument(fmt::format("send_recv on the {} group: member {} of {} cannot exchange with {}",
                                              name_, rank_, size_, peer));
  // Every chunk of both directions posted at once, then waited for: neither side can block the other.
  std::vector<MPI_Request> requests;
  for (size_t off = 0; off < recv_n; off += kChunk<float>) {
    requests.emplace_back();
    check(MPI_Irecv(recv + off, static_cast<int>(std::min(kChunk<float>, recv_n - off)), MPI_FLOAT, source, recv_tag,
                    to_comm(handle_), &requests.back()),
          name_, "MPI_Irecv");
  }
  for (size_t off = 0; off < send_n; off += kChunk<float>) {
    requests.emplace_back();
    check(MPI_Isend(send + off, static_cast<int>(std::min(kChunk<float>, send_n - off)), MPI_FLOAT, dest, send_tag,
                    to_comm(handle_), &requests.back()),
          name_, "MPI_Isend");
  }
  check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), name_, "MPI_Waitall");
}

CommRequest Comm::isend(const float* data, size_t n, int dest, int tag) {
  if (dest < 0 || dest >= size_ || dest == rank_)
    throw std::invalid_argument(fmt::format("isend on the {} group: member {} of {} cannot send to {}", name_, rank_,
                                            size_, dest));
  CommRequest request;
  for (size_t off = 0; off < n; off += kChunk<float>) {
    MPI_Request r;
    check(MPI_Isend(data + off, static_cast<int>(std::min(kChunk<float>, n - off)), MPI_FLOAT, dest, tag,
                    to_comm(handle_), &r),
          name_, "MPI_Isend");
    request.pending_.push_back(to_handle(r));
  }
  return request;
}

bool Comm::done(CommRequest& request) {
  while (!request.pending_.empty()) {
    MPI_Request r = to_comm<MPI_Request>(request.pending_.back());
    int complete = 0;
    check(MPI_Test(&r, &complete, MPI_STATUS_IGNORE), name_, "MPI_Test");
    if (!complete) return false;
    request.pending_.pop_back();
  }
  return true;
}

void Comm::wait(CommRequest& request) {
  std::vector<MPI_Request> requests;
  for (const intptr_t r : request.pending_) requests.push_back(to_comm<MPI_Request>(r));
  check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), name_, "MPI_Waitall");
  request.pending_.clear();
}

void Comm::barrier() {
  if (size_ == 1) return;
  check(MPI_Barrier(to_comm(handle_)), name_, "MPI_Barrier");
}

World::World() {
  if (!launched_by_mpi()) {
    world_.reset(new Comm(0, 0, 1, "world"));
    return;
  }
  int provided = 0;  // FUNNELED: only the main thread calls MPI; worker threads never do
#ifdef MEG_LEAK_CHECK
  __lsan_disable();
#endif
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "world", "MPI_Init_thread");
#ifdef MEG_LEAK_CHECK
  __lsan_enable();
#endif
  mpi_ = true;
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "world", "MPI_Comm_set_errhandler");
  // Our own copy of the world, so no other library's messages can match ours.
  MPI_Comm comm;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "world", "MPI_Comm_dup");
  int rank = 0, size = 0;
  check(MPI_Comm_rank(comm, &rank), "world", "MPI_Comm_rank");
  check(MPI_Comm_size(comm, &size), "world", "MPI_Comm_size");
  world_.reset(new Comm(to_handle(comm), rank, size, "world"));
  // The rank among the processes of this node, whatever the launcher: the ranks that share memory.
  MPI_Comm node;
  check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node), "world",
        "MPI_Comm_split_type");
  check(MPI_Comm_rank(node, &local_rank_), "node", "MPI_Comm_rank");
  check(MPI_Comm_free(&node), "node", "MPI_Comm_free");
}

World::~World() {
  groups_.clear();
  world_.reset();
  g_world = nullptr;
  if (!mpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
#ifdef MEG_LEAK_CHECK
  __lsan_do_leak_check();
#endif
  MPI_Finalize();
}

World& World::init() {
  static World world;  // destroyed after main returns, which finalizes MPI
  g_world = &world;
  return world;
}

World& World::get() {
  if (g_world == nullptr) throw std::logic_error("World::get() before World::init()");
  return *g_world;
}

bool World::initialized() { return g_world != nullptr; }

void World::set_layout(const ParallelLayout& layout) {
  // resolve() checks every size and that the grid holds exactly this job's processes.
  const ParallelLayout l = ParallelLayout::resolve(size(), layout.tp, layout.pp, layout.cp, layout.ep, layout.dp);
  const RankCoords me = l.coords(rank());
  std::vector<std::unique_ptr<Comm>> groups;
  for (ParallelDim d : {ParallelDim::tp, ParallelDim::cp, ParallelDim::ep, ParallelDim::dp, ParallelDim::pp}) {
    const std::string name = to_string(d);
    if (!mpi_) {
      groups.emplace_back(new Comm(0, 0, 1, name));
      continue;
    }
    // One color per group (its first member's rank); the key orders members by their coordinate.
    const int color = l.group(rank(), d).front();
    MPI_Comm comm;
    check(MPI_Comm_split(to_comm(world_->handle()), color, me[d], &comm), name, "MPI_Comm_split");
    check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), name, "MPI_Comm_set_errhandler");
    int rank = 0, size = 0;
    check(MPI_Comm_rank(comm, &rank), name, "MPI_Comm_rank");
    check(MPI_Comm_size(comm, &size), name, "MPI_Comm_size");
    groups.emplace_back(new Comm(to_handle(comm), rank, size, name));
  }
  groups_ = std::move(groups);  // a later call replaces the groups, collectively as well
  layout_ = l;
  coords_ = me;
}

Comm& World::group(ParallelDim d) {
  if (groups_.empty()) throw std::logic_error("World::group() before World::set_layout()");
  return *groups_[static_cast<size_t>(d)];
}

void World::abort(int status) {
  std::fflush(nullptr);
  if (mpi_) MPI_Abort(MPI_COMM_WORLD, status);
  std::exit(status);
}

}  // namespace meg
