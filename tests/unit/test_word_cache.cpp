// The tokenizers' per-thread word cache.
#include <string>
#include <vector>

#include "catch.hpp"
#include "tokenizer/word_cache.hpp"

using meg::WordCache;

TEST_CASE("WordCache keeps every word's ids through growth", "[tokenize]") {
  WordCache cache;
  std::vector<std::string> words;
  for (int i = 0; i < 50000; ++i) {
    std::string w = std::to_string(i * 7919);
    w.append(i % 40, 'x');
    words.push_back(w);
  }
  for (size_t i = 0; i < words.size(); ++i) {
    const std::vector<int32_t> ids{int32_t(i), int32_t(i % 13), -1};
    cache.insert(words[i], ids);
  }
  CHECK(cache.size() == words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    const auto hit = cache.find(words[i]);
    REQUIRE(hit);
    CHECK(std::vector<int32_t>(hit->begin(), hit->end()) == std::vector<int32_t>{int32_t(i), int32_t(i % 13), -1});
  }
  CHECK_FALSE(cache.find("1"));
  CHECK_FALSE(cache.find(""));
}

TEST_CASE("WordCache: empty ids, duplicates, long words, clear", "[tokenize]") {
  WordCache cache;
  cache.insert("silent", {});
  REQUIRE(cache.find("silent"));
  CHECK(cache.find("silent")->empty());
  const std::vector<int32_t> one{1}, two{2};
  cache.insert("a", one);
  cache.insert("a", two);  // the first answer stays
  CHECK((*cache.find("a"))[0] == 1);
  const std::string long_word(WordCache::kMaxWordBytes + 1, 'z');
  cache.insert(long_word, one);
  CHECK_FALSE(cache.find(long_word));
  cache.clear();
  CHECK(cache.size() == 0);
  CHECK_FALSE(cache.find("a"));
}

TEST_CASE("Each tokenizer instance has its own cache per thread", "[tokenize]") {
  const uint64_t a = WordCache::new_owner_id(), b = WordCache::new_owner_id();
  WordCache::for_thread(a).insert("x", std::vector<int32_t>{1});
  CHECK(WordCache::for_thread(a).find("x"));
  CHECK_FALSE(WordCache::for_thread(b).find("x"));
}
