// What every fuzz target shares.
//
// The readers take paths, as the tools do, so an input is written to a file of this process first
// (the same path every time, under TMPDIR, removed at exit). A reader may refuse an input only by
// throwing InputError, which a tool turns into one line and exit 1: any other exception aborts,
// and libFuzzer reports it as a crash, like a fault or a sanitizer finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>

#include "core/error.hpp"

namespace meg::fuzz {

// A directory of this process for input files, made on first use.
const std::string& work_dir();

// Writes BYTES to work_dir()/NAME, replacing what was there; returns the path.
std::string write_file(const std::string& name, std::span<const uint8_t> bytes);

// Copies SOURCE (a file of tests/data) to work_dir()/NAME once; returns the path.
std::string copy_fixture(const std::string& source, const std::string& name);

// Runs READ, letting only InputError through as a clean refusal. Any other exception is caught
// here rather than left to escape, so that the scopes it leaves have put back what they changed
// (a silenced stderr) before it is reported, and the process aborts as on a crash.
template <typename F>
int refuse_only_with_input_error(F&& read) {
  try {
    read();
  } catch (const InputError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: not an InputError: %s\n", e.what());
    std::abort();
  }
  return 0;
}

}  // namespace meg::fuzz
