// One include for Catch2 2.x (Debian 12) and 3.x (Ubuntu 24.04): tests include this, never Catch2.
// Tests use Catch2 3's names; the few that 2.x spells differently are mapped here.
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#include <string>
namespace Catch::Matchers {
inline auto ContainsSubstring(const std::string& s) { return Contains(s); }
}  // namespace Catch::Matchers
#endif
