// How much memory this process may use, for refusing sizes before allocating them.
#pragma once

#include <cstdint>

namespace meg {

// The smallest of the physical memory and the address-space and data limits (ulimit -v, -d):
// an allocation beyond it cannot succeed, or would push the machine into swap.
uint64_t usable_memory();

}  // namespace meg
