// The vocabulary's index of ids by token text.
#include <string>
#include <vector>

#include "catch.hpp"
#include "core/hash.hpp"
#include "tokenizer/token_index.hpp"

using meg::TokenIndex;

TEST_CASE("TokenIndex finds every token through growth, and only tokens", "[tokenize]") {
  TokenIndex index;
  std::vector<std::string> tokens;
  for (int i = 0; i < 70000; ++i) tokens.push_back(std::to_string(int64_t(i) * 104729) + std::string(i % 23, '#'));
  for (size_t i = 0; i < tokens.size(); ++i) REQUIRE(index.insert(tokens[i], int32_t(i)));
  CHECK(index.size() == tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) CHECK(index.find(tokens[i]) == int32_t(i));
  CHECK(index.find("x") == -1);
  CHECK(index.find(tokens[5] + "#") == -1);
  CHECK(index.find(tokens[5].substr(1)) == -1);
}

TEST_CASE("TokenIndex: the empty token, duplicates, reserve", "[tokenize]") {
  TokenIndex index;
  index.reserve(1000);
  CHECK(index.find("") == -1);
  CHECK(index.insert("", 7));
  CHECK(index.find("") == 7);
  CHECK(index.insert("a", 1));
  CHECK_FALSE(index.insert("a", 2));  // the first id stays
  CHECK(index.find("a") == 1);
  CHECK(index.size() == 2);
}

TEST_CASE("short_string_hash tells apart strings of every short length", "[tokenize]") {
  // Each length up to 24, and each byte of each, changes the hash.
  for (size_t n = 0; n <= 24; ++n) {
    const std::string base(n, 'a');
    const uint64_t h = meg::short_string_hash(base);
    CHECK((h & 1) == 1);
    CHECK(h != meg::short_string_hash(base + "a"));
    for (size_t i = 0; i < n; ++i) {
      std::string other = base;
      other[i] = 'b';
      CHECK(meg::short_string_hash(other) != h);
    }
  }
}
