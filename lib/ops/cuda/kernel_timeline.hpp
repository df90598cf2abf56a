// The stamps of the decode kernels' blocks (kernels/kernel_timeline.cuh), in builds with the CMake
// option MEG_KERNEL_TIMELINE: what `bench_generate --timeline` reads after one step.
#pragma once

#include <cstdint>
#include <vector>

namespace meg::cuda {

// A block's global times in nanoseconds (0: not stamped): its start, the return of its wait for
// the previous kernel, the end of its staging (small_linear: its input staged; the cached
// attention: its own keys attended, before the merge of the splits), its last warp's end.
struct BlockStamps {
  uint64_t start, wait, staged, end;
};

// The kernels that stamp: the cached attention, and small_linear by its epilogue.
enum class TimelineKind {
  cached_attention,
  linear_store,
  linear_gelu,
  linear_swiglu,
  linear_residual,
  linear_kv_append,
  linear_argmax
};

// KIND's name in reports ("?" for none of them).
inline const char* timeline_kind_name(int kind) {
  static const char* const names[] = {"cached attention", "linear", "linear, GELU", "linear, SwiGLU",
                                      "linear, residual", "linear, KV append", "linear, argmax"};
  return kind >= 0 && kind <= int(TimelineKind::linear_argmax) ? names[kind] : "?";
}

// One launch: its key (a pointer it alone has within a step), kind, and its blocks' stamps.
struct LaunchStamps {
  uint64_t key;
  int kind;  // a TimelineKind
  std::vector<BlockStamps> blocks;
};

// Whether this build stamps (MEG_KERNEL_TIMELINE).
bool kernel_timeline_built();
// Clears every table (after the device's queued work).
void reset_kernel_timeline();
// The launches stamped since the last reset, in no order.
std::vector<LaunchStamps> read_kernel_timeline();

}  // namespace meg::cuda
