// Speed of the regex engine (tokenizer/regex.hpp) on pre-tokenizer patterns, on one thread, against
// the hand-written scanner of GPT-2's pattern (gpt2_pretokenize, tokenizer/gpt2_bpe.hpp): GPT-2's
// pattern through both (the pieces must agree), then Llama 3's and cl100k's through the engine.
//
// The text: 4 MB (or MB, the argument) of mixed prose, mostly English words (some capitalised, some with contractions),
// with numbers, punctuation, runs of spaces and newlines, and words of Cyrillic, Greek, Arabic,
// Devanagari and Chinese, and emoji. Each figure is the median of 7 timed runs after one untimed.
//   bench_regex [MB]
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/gpt2_bpe.hpp"
#include "tokenizer/regex.hpp"

namespace {

using namespace meg;

constexpr int kRuns = 7;

std::string mixed_text(size_t bytes) {
  static const char* const kWords[] = {
      "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
      "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you",
      "tokenizer", "international", "pre-training", "hello", "world", "model", "language", "data"};
  static const char* const kForeign[] = {
      "\xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",              // привет
      "\xCE\xBA\xCF\x8C\xCF\x83\xCE\xBC\xCE\xB5",                      // κόσμε
      "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7",                      // مرحبا
      "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87",  // नमस्ते
      "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C",              // 你好世界
      "\xF0\x9F\x98\x80", "caf\xC3\xA9", "na\xC3\xAFve"};
  static const char* const kPunctuation[] = {".", ",", "!", "?", ";", ":", "\"", "(", ")", " - ", "...", "'"};
  static const char* const kContractions[] = {"'s", "'t", "'re", "'ll", "'ve", "'d", "'m"};
  std::mt19937 rng(11);
  const auto pick = [&](const auto& list) { return list[rng() % std::size(list)]; };
  std::string text;
  while (text.size() < bytes) {
    const unsigned r = rng() % 100;
    if (r < 60) {
      std::string w = pick(kWords);
      if (rng() % 8 == 0) w[0] = char(w[0] - 'a' + 'A');
      text += w;
      if (rng() % 20 == 0) text += pick(kContractions);
    } else if (r < 68) {
      text += pick(kForeign);
    } else if (r < 74) {
      text += std::to_string(rng() % 100000);
    } else if (r < 86) {
      text += pick(kPunctuation);
    } else if (r < 90) {
      text += rng() % 2 ? "\n" : "\n\n";
    } else if (r < 92) {
      text += "    ";
    }
    text += ' ';
  }
  return text;
}

template <typename Fn>
double median_mb_per_s(size_t bytes, Fn&& fn) {
  std::vector<double> rates;
  fn();
  for (int run = 0; run < kRuns; ++run) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(double(bytes) / 1e6 / s);
  }
  std::nth_element(rates.begin(), rates.begin() + kRuns / 2, rates.end());
  return rates[kRuns / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const double mb = argc > 1 ? std::atof(argv[1]) : 4;
  if (!(mb > 0)) {
    std::fprintf(stderr, "usage: bench_regex [MB of text, default 4]\n");
    return 1;
  }
  const std::string text = mixed_text(size_t(mb * (1 << 20)));
  std::vector<std::string_view> pieces, reference;
  const auto through_regex = [&](const Regex& re) {
    return [&] {
      pieces.clear();
      re.for_each_match(text, [&](size_t b, size_t e) { pieces.emplace_back(text.data() + b, e - b); });
    };
  };

  const double scanner = median_mb_per_s(text.size(), [&] {
    reference.clear();
    gpt2_pretokenize(text, reference);
  });
  const Regex gpt2(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
  const double engine = median_mb_per_s(text.size(), through_regex(gpt2));
  if (pieces != reference) {
    std::fprintf(stderr, "bench_regex: the engine and the GPT-2 scanner split the text differently\n");
    return 2;
  }
  const size_t gpt2_pieces = pieces.size();
  const Regex llama3(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  const double llama = median_mb_per_s(text.size(), through_regex(llama3));
  const Regex cl100k(
      R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)");
  const double cl100k_rate = median_mb_per_s(text.size(), through_regex(cl100k));

  std::printf("%.1f MB of mixed text, %zu GPT-2 pieces, one thread\n\n", double(text.size()) / 1e6, gpt2_pieces);
  std::printf("| pattern | engine MB/s | GPT-2 scanner MB/s | ratio |\n|---|---:|---:|---:|\n");
  std::printf("| GPT-2 | %.1f | %.1f | %.2f |\n", engine, scanner, engine / scanner);
  std::printf("| Llama 3 | %.1f | %.1f | %.2f |\n", llama, scanner, llama / scanner);
  std::printf("| cl100k | %.1f | %.1f | %.2f |\n", cl100k_rate, scanner, cl100k_rate / scanner);
}
