// A deterministic parallel-for for the CPU ops.
//
// parallel_for(n, grain, f) calls f(begin, end) over the fixed chunks [0,grain), [grain,2 grain),
// ... of [0,n). The chunk boundaries depend only on n and grain, never on the number of threads,
// and every chunk is run by exactly one thread; so as long as f writes each output from one chunk
// only (or reductions add per-chunk partials in chunk order afterwards), the results are
// bit-identical whatever the thread count. Exact resume and reproducible runs depend on that.
//
// The threads come from one process-wide pool of num_threads() - 1 workers; the calling thread
// works too. Its size is the number of cores, or MEG_NUM_THREADS when that is set, or whatever
// set_num_threads() last asked for. A call with a single chunk, or made from inside a chunk (a
// nested parallel_for), runs inline on the calling thread, so nesting cannot deadlock.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>

namespace meg {

// Threads parallel_for uses (callers included); at least 1.
unsigned num_threads();

// Resizes the pool: n threads in all, 0 for the default (MEG_NUM_THREADS, else the core count).
// Must not be called while a parallel_for is running.
void set_num_threads(unsigned n);

namespace detail {
// Runs chunk(0) .. chunk(chunks - 1), each once, spread over the pool. Rethrows the exception of
// the lowest-numbered chunk that threw, after every chunk has finished or been skipped.
void run_chunks(size_t chunks, const std::function<void(size_t)>& chunk);
}  // namespace detail

template <typename Fn>
void parallel_for(size_t n, size_t grain, Fn&& f) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  const size_t chunks = (n + grain - 1) / grain;
  if (chunks == 1) {
    f(size_t(0), n);
    return;
  }
  detail::run_chunks(chunks, [&](size_t i) { f(i * grain, std::min(n, (i + 1) * grain)); });
}

}  // namespace meg
