// The caching device allocator: freed blocks are handed out again without the driver, use and
// peak are counted, and running out of memory is an InputError that says what to try.
#include <string>

#include "catch.hpp"
#include "core/error.hpp"
#include "ops/cuda/device_memory.hpp"

using meg::cuda::DeviceAllocator;

TEST_CASE("caching allocator reuses freed blocks and counts use and peak", "[gpu][memory]") {
  DeviceAllocator alloc;
  void* a = alloc.allocate(1000);
  CHECK(alloc.in_use() == DeviceAllocator::round_size(1000));
  void* b = alloc.allocate(3 << 20);
  const size_t both = alloc.in_use();
  alloc.deallocate(a);
  CHECK(alloc.cached() == DeviceAllocator::round_size(1000));
  void* c = alloc.allocate(900);  // same rounded size: the cached block comes back
  CHECK(c == a);
  CHECK(alloc.cached() == 0);
  alloc.deallocate(b);
  void* d = alloc.allocate(64);  // a small request never takes a much larger cached block
  CHECK(d != b);
  CHECK(alloc.peak() == both);  // a and b together were the most in use at once
  alloc.deallocate(c);
  alloc.deallocate(d);
  CHECK(alloc.in_use() == 0);
  alloc.release_cached();
  CHECK(alloc.cached() == 0);
  CHECK_THROWS_AS(alloc.deallocate(reinterpret_cast<void*>(0x1000)), std::logic_error);
}

TEST_CASE("running out of GPU memory is an InputError with a hint", "[gpu][memory]") {
  DeviceAllocator alloc;
  try {
    alloc.allocate(size_t(1) << 50);  // a petabyte
    FAIL("allocated a petabyte");
  } catch (const meg::InputError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Matchers::ContainsSubstring("out of GPU memory"));
    CHECK_THAT(what, Catch::Matchers::ContainsSubstring("--micro-batch"));
  }
  void* p = alloc.allocate(1 << 20);  // the allocator still works afterwards
  CHECK(p != nullptr);
  alloc.deallocate(p);
}
