// One include for Catch2 2.x (Debian 12) and 3.x (Ubuntu 24.04): tests include this, never Catch2.
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif
