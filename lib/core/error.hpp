// Errors and the exit-status convention shared by every tool.
//
//   0  done
//   1  bad input or usage: one line naming the file, the place and the problem
//   2  internal error (a bug, or the system failing under us)
//
// Library code throws InputError for anything a user can fix (a malformed file, a wrong option) and
// lets everything else propagate; run_tool() in core/cli.hpp turns both into the right exit status.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace meg {

enum ExitStatus : int { kExitOk = 0, kExitBadInput = 1, kExitInternal = 2 };

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& what) : std::runtime_error(what) {}
};

// InputError with a "FILE:PLACE: message" prefix, the form every diagnostic takes.
template <typename... Args>
[[noreturn]] void input_error(fmt::format_string<Args...> f, Args&&... args) {
  throw InputError(fmt::format(f, std::forward<Args>(args)...));
}

// A system call failed on PATH; errno says why. Missing and unreadable files are the user's to fix,
// so this is an InputError too.
[[noreturn]] void system_error(const std::string& path, const std::string& what);

}  // namespace meg
