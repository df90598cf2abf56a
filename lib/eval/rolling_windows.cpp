#include "eval/rolling_windows.hpp"

#include <algorithm>

namespace meg {

std::vector<TokenWindow> rolling_windows(std::span<const int32_t> tokens, int32_t prefix, int max_length) {
  const size_t n = tokens.size(), L = static_cast<size_t>(max_length);
  std::vector<TokenWindow> windows;
  if (n == 0) return windows;
  // The first window: the prefix token, then the document up to L tokens.
  size_t predicted = std::min(L, n);
  windows.push_back({{prefix}, {tokens.begin(), tokens.begin() + predicted}});
  while (predicted < n) {
    const size_t count = std::min(n - predicted, L), end = predicted + count;
    // lm-eval's window is tokens[end - L - 1, end - 1) before make_disjoint_window keeps those
    // that are not predicted: tokens[end - L - 1, end - count).
    windows.push_back({{tokens.begin() + (end - L - 1), tokens.begin() + (end - count)},
                       {tokens.begin() + predicted, tokens.begin() + end}});
    predicted = end;
  }
  return windows;
}

}  // namespace meg
