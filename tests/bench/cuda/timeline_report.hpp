// bench_generate --timeline's report: one decode step's launches as their blocks stamped them
// (kernels/kernel_timeline.cuh), each averaged over the model's layers at its place in a layer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ops/cuda/kernel_timeline.hpp"

namespace meg::bench {

// One launch's stamps summarised over its blocks, in ns (0 where none stamped that field).
struct LaunchSummary {
  int kind = 0, blocks = 0;
  double first_start = 0, median_start = 0, first_wait = 0, last_staged = 0, median_end = 0, last_end = 0;
};

inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline LaunchSummary summarise(const cuda::LaunchStamps& l) {
  LaunchSummary s;
  s.kind = l.kind;
  std::vector<double> starts, waits, staged, ends;
  for (const auto& b : l.blocks) {
    if (b.start == 0) continue;
    ++s.blocks;
    starts.push_back(double(b.start));
    if (b.wait) waits.push_back(double(b.wait));
    if (b.staged) staged.push_back(double(b.staged));
    if (b.end) ends.push_back(double(b.end));
  }
  if (starts.empty()) return s;
  s.first_start = *std::min_element(starts.begin(), starts.end());
  s.median_start = median_of(starts);
  s.first_wait = waits.empty() ? 0 : *std::min_element(waits.begin(), waits.end());
  s.last_staged = staged.empty() ? 0 : *std::max_element(staged.begin(), staged.end());
  s.median_end = median_of(ends);
  s.last_end = ends.empty() ? 0 : *std::max_element(ends.begin(), ends.end());
  return s;
}

inline const char* kind_name(int kind) {
  static const char* names[] = {"cached attention", "linear", "linear, GELU", "linear, SwiGLU",
                                "linear, residual", "linear, KV append"};
  return kind >= 0 && kind < 6 ? names[kind] : "?";
}

// Prints, for each place in a layer (the launch before the attention first), the averages over the
// layers of: when its median block started, its first wait returned and its last block ended,
// each after the previous launch's last block ended; its last block's input staged after its first
// wait; its tail (last block's end after the median's). A layer's time is the sum of the last.
inline void print_timeline(const std::string& label, const std::vector<cuda::LaunchStamps>& stamps) {
  std::vector<LaunchSummary> launches;
  for (const auto& l : stamps) launches.push_back(summarise(l));
  std::sort(launches.begin(), launches.end(),
            [](const LaunchSummary& a, const LaunchSummary& b) { return a.first_start < b.first_start; });
  std::vector<uint64_t> times;
  for (const auto& l : stamps)
    for (const auto& b : l.blocks)
      for (uint64_t t : {b.start, b.wait, b.staged, b.end})
        if (t) times.push_back(t);
  std::sort(times.begin(), times.end());
  uint64_t resolution = 0;
  for (size_t i = 1; i < times.size(); ++i)
    if (times[i] != times[i - 1] && (resolution == 0 || times[i] - times[i - 1] < resolution))
      resolution = times[i] - times[i - 1];
  std::vector<size_t> attention;
  for (size_t i = 0; i < launches.size(); ++i)
    if (launches[i].kind == int(cuda::TimelineKind::cached_attention)) attention.push_back(i);
  std::printf("\n%s: %zu launches stamped, the timer's smallest step %llu ns\n", label.c_str(), launches.size(),
              static_cast<unsigned long long>(resolution));
  if (attention.size() < 2 || attention[0] == 0) {
    std::printf("(no layers to average: the attention launches were not stamped)\n");
    return;
  }
  const size_t period = attention[1] - attention[0], first = attention[0] - 1;
  const size_t layers = std::min(attention.size(), (launches.size() - first) / period);
  std::printf("us after the previous launch's last block ended, averaged over %zu layers:\n", layers);
  std::printf("| place | kernel | blocks | median start | first wait | input staged | last end | tail |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  double layer = 0;
  for (size_t p = 0; p < period; ++p) {
    double started = 0, waited = 0, staged = 0, ended = 0, tail = 0;
    int counted = 0;
    for (size_t l = 0; l < layers; ++l) {
      const size_t i = first + l * period + p;
      if (i == 0 || i >= launches.size()) continue;
      const LaunchSummary &s = launches[i], &prev = launches[i - 1];
      started += s.median_start - prev.last_end;
      waited += s.first_wait - prev.last_end;
      staged += s.last_staged ? s.last_staged - prev.last_end : 0;
      ended += s.last_end - prev.last_end;
      tail += s.last_end - s.median_end;
      ++counted;
    }
    if (counted == 0) continue;
    const double n = counted * 1e3;
    const LaunchSummary& s = launches[first + p];
    char staged_us[16] = "-";
    if (staged != 0) std::snprintf(staged_us, sizeof(staged_us), "%.2f", staged / n);
    std::printf("| %zu | %s | %d | %.2f | %.2f | %s | %.2f | %.2f |\n", p, kind_name(s.kind), s.blocks, started / n,
                waited / n, staged_us, ended / n, tail / n);
    layer += ended / n;
  }
  const double step = (launches.back().last_end - launches.front().first_start) * 1e-3;
  std::printf("a layer: %.2f us; the stamped launches, first start to last end: %.1f us\n", layer, step);
}

}  // namespace meg::bench
