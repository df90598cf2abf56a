#include "core/error.hpp"

#include <cerrno>
#include <cstring>

namespace meg {

void system_error(const std::string& path, const std::string& what) {
  const int err = errno;
  throw InputError(fmt::format("{}: {}: {}", path, what, std::strerror(err)));
}

}  // namespace meg
