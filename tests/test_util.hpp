// Small helpers for the unit tests: temporary folders and files.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "core/error.hpp"

namespace meg {

// A fresh folder under TMPDIR, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "meg-unit.XXXXXX").string();
    root_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(root_); }
  std::string path(const std::string& name) const { return (root_ / name).string(); }

 private:
  std::filesystem::path root_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  // Compressible but not trivial: short runs of a few symbols.
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>("abcdefgh \n"[rng() % 10]);
  return s;
}

// N token ids below VOCAB from a seeded generator.
inline std::vector<int32_t> random_tokens(size_t n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

// The message of the InputError that F must throw (the test fails when F throws none).
template <typename F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("expected an InputError");
  return "";
}

}  // namespace meg
