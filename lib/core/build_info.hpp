// What a binary was built from, for --version and bug reports.
#pragma once

#include <string>

namespace meg {

// The commit of the source tree, from git at build time (every build looks again, so a new
// commit shows without reconfiguring); "unknown" when the sources are not a git checkout (a
// tarball).
std::string build_commit();

// What the build runs on: "CUDA sm_90a" (its CUDA architectures) or "CPU only".
std::string build_target();

// "meg-pretrain 0.1.0 (commit abc1234, CUDA sm_90a)".
std::string version_line(const std::string& tool);

}  // namespace meg
