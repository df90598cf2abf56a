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

// One launch's stamps over its blocks, in ns (0 where no block stamped that field).
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

// A place in a layer (the launch before the attention first), averaged over the layers, in us
// after the previous launch's last block ended: when its median block started, its first wait
// returned, its last block was staged (none: 0) and its last block ended; and its tail, its last
// block's end after its median block's. A layer's time is the sum of the places' `ended`.
struct PlaceTimes {
  int kind = 0, blocks = 0;
  double started = 0, waited = 0, staged = 0, ended = 0, tail = 0;
};

// STAMPS' launches in start order, at their places in the layers (the attention's launches mark
// them); empty where fewer than two attention launches were stamped. LAYERS: the layers averaged.
inline std::vector<PlaceTimes> layer_places(const std::vector<cuda::LaunchStamps>& stamps, size_t& layers) {
  std::vector<LaunchSummary> launches;
  for (const auto& l : stamps) launches.push_back(summarise(l));
  std::sort(launches.begin(), launches.end(),
            [](const LaunchSummary& a, const LaunchSummary& b) { return a.first_start < b.first_start; });
  std::vector<size_t> attention;
  for (size_t i = 0; i < launches.size(); ++i)
    if (launches[i].kind == int(cuda::TimelineKind::cached_attention)) attention.push_back(i);
  layers = 0;
  if (attention.size() < 2 || attention[0] == 0) return {};
  const size_t period = attention[1] - attention[0], first = attention[0] - 1;
  layers = std::min(attention.size(), (launches.size() - first) / period);
  std::vector<PlaceTimes> places(period);
  for (size_t p = 0; p < period; ++p) {
    PlaceTimes& t = places[p];
    t.kind = launches[first + p].kind;
    t.blocks = launches[first + p].blocks;
    int counted = 0;
    for (size_t l = 0; l < layers; ++l) {
      const size_t i = first + l * period + p;
      if (i == 0) continue;  // no launch before it was stamped
      const LaunchSummary &s = launches[i], &prev = launches[i - 1];
      t.started += s.median_start - prev.last_end;
      t.waited += s.first_wait - prev.last_end;
      if (s.last_staged) t.staged += s.last_staged - prev.last_end;
      t.ended += s.last_end - prev.last_end;
      t.tail += s.last_end - s.median_end;
      ++counted;
    }
    const double us = counted * 1e3;
    if (counted == 0) continue;
    t.started /= us, t.waited /= us, t.staged /= us, t.ended /= us, t.tail /= us;
  }
  return places;
}

// The smallest step between two different stamps: the timer's resolution, as far as it shows.
inline uint64_t timer_step(const std::vector<cuda::LaunchStamps>& stamps) {
  std::vector<uint64_t> times;
  for (const auto& l : stamps)
    for (const auto& b : l.blocks)
      for (uint64_t t : {b.start, b.wait, b.staged, b.end})
        if (t) times.push_back(t);
  std::sort(times.begin(), times.end());
  uint64_t step = 0;
  for (size_t i = 1; i < times.size(); ++i)
    if (times[i] != times[i - 1] && (step == 0 || times[i] - times[i - 1] < step))
      step = times[i] - times[i - 1];
  return step;
}

inline void print_timeline(const std::string& label, const std::vector<cuda::LaunchStamps>& stamps) {
  size_t layers = 0;
  const std::vector<PlaceTimes> places = layer_places(stamps, layers);
  std::printf("\n%s: %zu launches stamped, the timer's smallest step %llu ns\n", label.c_str(), stamps.size(),
              static_cast<unsigned long long>(timer_step(stamps)));
  if (places.empty()) {
    std::printf("(no layers to average: fewer than two attention launches stamped)\n");
    return;
  }
  std::printf("us after the previous launch's last block ended, averaged over %zu layers (staged: a product's\n"
              "input, the attention's own keys attended):\n", layers);
  std::printf("| place | kernel | blocks | median start | first wait | last staged | last end | tail |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  double layer = 0;
  for (size_t p = 0; p < places.size(); ++p) {
    const PlaceTimes& t = places[p];
    char staged[16] = "-";
    if (t.staged != 0) std::snprintf(staged, sizeof(staged), "%.2f", t.staged);
    std::printf("| %zu | %s | %d | %.2f | %.2f | %s | %.2f | %.2f |\n", p, cuda::timeline_kind_name(t.kind), t.blocks, t.started,
                t.waited, staged, t.ended, t.tail);
    layer += t.ended;
  }
  std::printf("a layer: %.2f us\n", layer);
}

}  // namespace meg::bench
