// The watchdog fires when it is not kicked in time, and not while it is.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "catch.hpp"
#include "core/error.hpp"
#include "parallel/watchdog.hpp"

using meg::Watchdog;

TEST_CASE("watchdog fires when not kicked", "[parallel]") {
  std::atomic<int> fired{0};
  {
    Watchdog dog(0.05, [&] { ++fired; });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  CHECK(fired == 1);
}

TEST_CASE("watchdog stays quiet while kicked", "[parallel]") {
  std::atomic<int> fired{0};
  {
    Watchdog dog(0.2, [&] { ++fired; });
    for (int i = 0; i < 10; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      dog.kick();
    }
  }
  CHECK(fired == 0);
}

TEST_CASE("watchdog time-out from the environment", "[parallel]") {
  setenv("MEG_COLLECTIVE_TIMEOUT", "12.5", 1);
  CHECK(Watchdog::timeout_seconds() == 12.5);
  setenv("MEG_COLLECTIVE_TIMEOUT", "soon", 1);
  CHECK_THROWS_AS(Watchdog::timeout_seconds(), meg::InputError);
  unsetenv("MEG_COLLECTIVE_TIMEOUT");
  CHECK(Watchdog::timeout_seconds() == 1800.0);
}
