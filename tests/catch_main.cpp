// Catch2 2.x builds its main here; 3.x links Catch2::Catch2WithMain instead (tests/CMakeLists.txt).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
