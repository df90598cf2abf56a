// Throughput of Unicode normalization and lowercase (tokenizer/unicode_normalization.hpp) on one
// thread, on 8 MB of: English ASCII; mixed text (Latin with precomposed accents, Greek, Cyrillic,
// CJK, Hangul, emoji), mostly normalized already, as real text is; and the same mixed text in NFD,
// so that every accent and syllable has to be composed again. The reference is copying the text
// (a std::string copy): the ratio says how close to a copy the fast path runs. Each figure is the
// median of 9 timed runs after 2 untimed ones.
//   bench_unicode_normalization
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "tokenizer/unicode_normalization.hpp"

namespace {

using namespace meg;

constexpr size_t kBytes = size_t(8) << 20;
constexpr int kRuns = 9, kWarmup = 2;

std::string repeat(const std::string& piece) {
  std::string s;
  while (s.size() < kBytes) s += piece;
  return s;
}

double median_mb_per_s(const std::string& text, const std::function<std::string(const std::string&)>& fn) {
  std::vector<double> rates;
  size_t sink = 0;
  for (int run = 0; run < kWarmup + kRuns; ++run) {
    const auto start = std::chrono::steady_clock::now();
    sink += fn(text).size();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (run >= kWarmup) rates.push_back(double(text.size()) / s / 1e6);
  }
  std::nth_element(rates.begin(), rates.begin() + kRuns / 2, rates.end());
  if (sink == 0) std::printf("(empty)\n");
  return rates[kRuns / 2];
}

}  // namespace

int main() {
  const std::string ascii = repeat("The quick brown fox jumps over the lazy dog; it's 42 degrees.\n\tSee you  soon!\n");
  const std::string mixed = repeat(
      "Caf\u00e9 na\u00efve \u00fcber Stra\u00dfe, \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac, "
      "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u044f\u0437\u044b\u043a, \u4e2d\u6587\u6587\u672c, "
      "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8, emoji \U0001F600 and plain English words in between.\n");
  const std::string decomposed = normalize(mixed, NormalizationForm::kNFD);

  const auto copy = [](const std::string& t) { return std::string(t); };
  std::printf("| text | operation | MB/s | copy MB/s | ratio |\n|---|---|---:|---:|---:|\n");
  const struct {
    const char* name;
    const std::string& text;
  } texts[] = {{"ASCII", ascii}, {"mixed", mixed}, {"mixed, NFD", decomposed}};
  const struct {
    const char* name;
    std::function<std::string(const std::string&)> fn;
  } ops[] = {
      {"NFC", [](const std::string& t) { return normalize(t, NormalizationForm::kNFC); }},
      {"NFD", [](const std::string& t) { return normalize(t, NormalizationForm::kNFD); }},
      {"NFKC", [](const std::string& t) { return normalize(t, NormalizationForm::kNFKC); }},
      {"NFKD", [](const std::string& t) { return normalize(t, NormalizationForm::kNFKD); }},
      {"lowercase", [](const std::string& t) { return lowercase(t); }},
  };
  for (const auto& text : texts) {
    const double reference = median_mb_per_s(text.text, copy);
    for (const auto& op : ops) {
      const double rate = median_mb_per_s(text.text, op.fn);
      std::printf("| %s | %s | %.0f | %.0f | %.2f |\n", text.name, op.name, rate, reference, rate / reference);
    }
  }
  return 0;
}
