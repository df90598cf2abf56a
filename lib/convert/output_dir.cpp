#include "convert/output_dir.hpp"

#include <algorithm>
#include <filesystem>

#include "core/error.hpp"

namespace meg {

namespace fs = std::filesystem;

void check_output_outside(const std::string& out, const std::string& input) {
  std::error_code ec;
  const fs::path save = fs::weakly_canonical(out, ec);
  const fs::path from = fs::canonical(input, ec);
  if (ec) return;  // an input that does not resolve is refused by its reader
  const auto [end, rest] = std::mismatch(from.begin(), from.end(), save.begin(), save.end());
  if (end == from.end()) input_error("--save {}: inside the input being read ({})", out, input);
}

void write_or_nothing(const std::string& out, const std::function<void()>& write) {
  std::error_code ec;
  const bool created = !fs::exists(out, ec);
  try {
    write();
  } catch (...) {
    if (created) fs::remove_all(out, ec);
    throw;
  }
}

}  // namespace meg
