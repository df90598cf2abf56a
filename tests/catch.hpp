// One include for Catch2 2.x (Debian 12) and 3.x (Ubuntu 24.04): tests include this, never Catch2.
// Tests use Catch2 3's names; the few that 2.x spells differently are mapped here.
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
using Catch::Approx;  // 2.x has it at global scope
#else
#include <catch2/catch.hpp>
#include <string>
namespace Catch::Matchers {
inline auto ContainsSubstring(const std::string& s) { return Contains(s); }
}  // namespace Catch::Matchers
#endif

// A test case that cannot check anything here (too few GPUs, too little memory) calls
// SKIP(message): Catch2 3.3 and later report it as skipped; older versions, which cannot, say so
// in a warning and leave the rest of the case unrun.
#ifndef SKIP
#define SKIP(...)                         \
  do {                                    \
    WARN("skipped: " << __VA_ARGS__);     \
    return;                               \
  } while (false)
#endif
