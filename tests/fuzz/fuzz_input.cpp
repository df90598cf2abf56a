#include "fuzz_input.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace meg::fuzz {

namespace fs = std::filesystem;

const std::string& work_dir() {
  // Never destroyed: the exit handler that removes the directory runs after static destructors.
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    fs::path d = fs::path(tmp && *tmp ? tmp : "/tmp") / ("meg-fuzz." + std::to_string(getpid()));
    fs::create_directories(d);
    std::atexit([] { std::error_code ec; fs::remove_all(work_dir(), ec); });
    return new std::string(d.string());
  }();
  return *dir;
}

std::string write_file(const std::string& name, std::span<const uint8_t> bytes) {
  const std::string path = work_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!out.flush()) std::abort();  // the fuzzer's own disk, not the reader under test
  return path;
}

std::string copy_fixture(const std::string& source, const std::string& name) {
  const std::string path = work_dir() + "/" + name;
  if (!fs::exists(path)) fs::copy_file(source, path);
  return path;
}

}  // namespace meg::fuzz
