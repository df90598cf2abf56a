#include "core/parallel.hpp"

#include <atomic>
#include <cstdlib>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.hpp"

namespace meg {

namespace {

// True on a thread while it runs chunks: a parallel_for from there runs inline.
thread_local bool in_parallel = false;

unsigned default_threads() {
  if (const char* env = std::getenv("MEG_NUM_THREADS"); env && *env) {
    char* end = nullptr;
    const unsigned long n = std::strtoul(env, &end, 10);
    if (*end == '\0' && n > 0) return static_cast<unsigned>(std::min(n, 1024ul));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

struct Pool {
  unsigned threads = 0;                // including the caller
  std::unique_ptr<ThreadPool> workers;  // threads - 1 of them; null when threads == 1
};

std::mutex pool_mutex;

Pool& pool() {
  static Pool p;
  return p;
}

// The pool, created on first use.
Pool& get_pool() {
  std::lock_guard<std::mutex> lock(pool_mutex);
  Pool& p = pool();
  if (p.threads == 0) {
    p.threads = default_threads();
    if (p.threads > 1) p.workers = std::make_unique<ThreadPool>(p.threads - 1);
  }
  return p;
}

}  // namespace

unsigned num_threads() { return get_pool().threads; }

void set_num_threads(unsigned n) {
  if (n == 0) n = default_threads();
  std::lock_guard<std::mutex> lock(pool_mutex);
  Pool& p = pool();
  if (p.threads == n) return;
  p.workers.reset();  // joins the old workers
  p.threads = n;
  if (n > 1) p.workers = std::make_unique<ThreadPool>(n - 1);
}

namespace detail {

void run_chunks(size_t chunks, const std::function<void(size_t)>& chunk) {
  Pool& p = get_pool();
  if (in_parallel || p.threads <= 1) {
    for (size_t i = 0; i < chunks; ++i) chunk(i);
    return;
  }

  // Threads take the next chunk from a shared counter: which thread runs a chunk varies from run
  // to run, but what a chunk computes does not.
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;
  size_t error_chunk = chunks;
  auto drain = [&] {
    const bool was_inside = in_parallel;
    in_parallel = true;
    for (size_t i; (i = next.fetch_add(1)) < chunks;) {
      try {
        chunk(i);
      } catch (...) {
        // Keep the lowest chunk's exception, so the error reported does not depend on timing.
        std::lock_guard<std::mutex> lock(error_mutex);
        if (i < error_chunk) {
          error_chunk = i;
          error = std::current_exception();
        }
      }
    }
    in_parallel = was_inside;
  };

  const size_t helpers = std::min<size_t>(p.threads - 1, chunks - 1);
  std::vector<std::future<void>> done;
  done.reserve(helpers);
  for (size_t h = 0; h < helpers; ++h) done.push_back(p.workers->submit(drain));
  drain();
  for (auto& d : done) d.get();  // the helpers reference this frame: wait for every one
  if (error) std::rethrow_exception(error);
}

}  // namespace detail

}  // namespace meg
