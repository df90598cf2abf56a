// The card's peak memory bandwidth, the ceiling the decode benchmarks measure their steps against:
// two transfers a memory clock over the whole bus, as the device reports them (3.35 TB/s on an H100
// SXM, 4.92 on an H200). Taking it from the card rather than a constant keeps a ratio a measure of
// the code on whichever card runs it.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/check.hpp"

namespace meg::bench {

// DEVICE's peak memory bandwidth in B/s.
inline double peak_bandwidth(int device) {
  int clock_khz = 0, bus_bits = 0;
  MEG_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device));
  MEG_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  return 2.0 * clock_khz * 1e3 * bus_bits / 8;
}

}  // namespace meg::bench
