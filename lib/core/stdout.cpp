#include "core/stdout.hpp"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "core/error.hpp"

namespace meg {

void write_stdout(std::string_view text, bool flush) {
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || (flush && std::fflush(stdout) != 0))
    stdout_failed(errno);
}

void stdout_failed(int err) {
  if (err == EPIPE) {
    // SIGPIPE was ignored (an MPI launcher may do that): end as its default action would.
    std::signal(SIGPIPE, SIG_DFL);
    std::raise(SIGPIPE);
    std::_Exit(128 + SIGPIPE);  // SIGPIPE blocked: the status a shell gives a process it killed
  }
  errno = err != 0 ? err : EIO;  // a failure whose errno a later call overwrote
  system_error("<stdout>", "write failed");
}

void close_stdout() {
  errno = 0;
  std::cout.flush();  // synced with stdio (the default), this is fflush(stdout): keep its errno
  const int flush_error = errno;
  const bool failed = std::cout.fail() || std::ferror(stdout) != 0;
  errno = 0;
  const bool closed = std::fclose(stdout) == 0;
  const int close_error = errno;
  // A tool started with stdout closed (`>&-`) that wrote nothing has lost nothing.
  if (!closed && close_error == EBADF && !failed) return;
  if (failed) stdout_failed(flush_error != 0 ? flush_error : close_error);
  if (!closed) stdout_failed(close_error);
}

}  // namespace meg
