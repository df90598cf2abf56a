#include "core/build_info.hpp"

#include <sstream>

namespace meg {

std::string build_target() {
#ifdef MEG_CUDA_ARCHITECTURES
  // CMake's list, comma-separated ("80,90a-real"): each an sm_ target, a -virtual one PTX for
  // compute_; "native" or "all" as they are.
  std::istringstream list(MEG_CUDA_ARCHITECTURES);
  std::string out = "CUDA", arch;
  for (char sep = ' '; std::getline(list, arch, ','); sep = ',') {
    std::string name = arch.substr(0, arch.find('-'));
    const std::string kind = arch.size() > name.size() ? arch.substr(name.size() + 1) : "";
    if (!name.empty() && name[0] >= '0' && name[0] <= '9') name = (kind == "virtual" ? "compute_" : "sm_") + name;
    out += sep + name;
  }
  return out;
#else
  return "CPU only";
#endif
}

std::string version_line(const std::string& tool) {
  return tool + " " + MEG_VERSION + " (commit " + build_commit() + ", " + build_target() + ")";
}

}  // namespace meg
