// libmeg core: streams, zstd, atomic output, hashing, the Philox generator, the thread pool.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "catch.hpp"
#include "core/byte_stream.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/mapped_file.hpp"
#include "core/philox.hpp"
#include "core/thread_pool.hpp"
#include "test_util.hpp"

using namespace meg;

TEST_CASE("XXH64 matches the reference values", "[core]") {
  // Values of the reference implementation (xxhsum -H64).
  CHECK(xxh64("", 0) == 0xef46db3751d8e999ULL);
  CHECK(xxh64("a", 1) == 0xd24ec4f1a98c6e5bULL);
  CHECK(xxh64("abc", 3) == 0x44bc2cf5ad770999ULL);
  const std::string fox = "The quick brown fox jumps over the lazy dog";
  CHECK(xxh64(fox.data(), fox.size()) == 0x0b242d361fda71bcULL);
  CHECK(hex64(0x0b242d361fda71bcULL) == "0b242d361fda71bc");
}

TEST_CASE("XXH64 streaming equals one-shot for any split", "[core]") {
  std::mt19937 rng(7);
  std::string data(1000, '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  const uint64_t whole = xxh64(data.data(), data.size(), 42);
  for (size_t cut : {0, 1, 31, 32, 33, 500, 999}) {
    Hasher h(42);
    h.update(data.data(), cut);
    h.update(data.data() + cut, data.size() - cut);
    CHECK(h.digest() == whole);
  }
}

TEST_CASE("Philox4x32-10 matches Random123's known answers", "[core]") {
  // Random123's tests/kat_vectors, the "philox4x32 10" lines: counter, key, result.
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) == PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("ByteWriter writes atomically and ByteReader reads plain and zstd alike", "[core]") {
  TempDir dir;
  const std::string payload = random_bytes(3 << 20, 1);  // several buffers' worth
  for (int level : {0, 3}) {
    const std::string path = dir.path("out.bin");
    {
      ByteWriter w(path, level);
      w.write(payload.data(), payload.size() / 2);
      CHECK_FALSE(std::filesystem::exists(path));  // nothing under the final name before commit
      w.write(payload.data() + payload.size() / 2, payload.size() - payload.size() / 2);
      w.commit();
    }
    REQUIRE(std::filesystem::exists(path));
    ByteReader r(path);
    CHECK(r.compressed() == (level > 0));
    std::string back(payload.size() + 10, '\0');
    CHECK(r.read(back.data(), back.size()) == payload.size());
    back.resize(payload.size());
    CHECK(back == payload);
    CHECK(r.at_end());
    std::filesystem::remove(path);
  }
}

TEST_CASE("ByteWriter without commit leaves nothing behind", "[core]") {
  TempDir dir;
  {
    ByteWriter w(dir.path("never.bin"));
    w.write("abc", 3);
  }
  CHECK(std::filesystem::is_empty(dir.path("")));
}

TEST_CASE("ByteReader refuses truncated and corrupt zstd", "[core]") {
  TempDir dir;
  const std::string payload = random_bytes(1 << 20, 2);
  {
    ByteWriter w(dir.path("z"), 3);
    w.write(payload.data(), payload.size());
    w.commit();
  }
  const std::string z = read_file(dir.path("z"));
  write_file(dir.path("cut"), z.substr(0, z.size() / 2));
  std::string z2 = z;
  z2[z2.size() / 2] ^= 0x5a;
  z2[z2.size() / 2 + 1] ^= 0x5a;
  write_file(dir.path("flipped"), z2);
  std::string buf(payload.size(), '\0');
  ByteReader cut(dir.path("cut"));
  CHECK_THROWS_AS(cut.read(buf.data(), buf.size()), InputError);
  ByteReader flipped(dir.path("flipped"));
  CHECK_THROWS_AS(flipped.read(buf.data(), buf.size()), InputError);
}

TEST_CASE("Missing files are InputErrors naming the file", "[core]") {
  CHECK_THROWS_WITH(ByteReader("/nonexistent/x"), Catch::Matchers::ContainsSubstring("/nonexistent/x: cannot open"));
  CHECK_THROWS_AS(MappedFile("/nonexistent/y"), InputError);
}

TEST_CASE("MappedFile maps whole files, empty ones too", "[core]") {
  TempDir dir;
  write_file(dir.path("a"), "hello");
  write_file(dir.path("empty"), "");
  MappedFile a(dir.path("a"));
  CHECK(std::string(reinterpret_cast<const char*>(a.data()), a.size()) == "hello");
  MappedFile e(dir.path("empty"));
  CHECK(e.size() == 0);
}

TEST_CASE("ThreadPool runs every task and carries exceptions", "[core]") {
  ThreadPool pool(3);
  std::vector<std::future<int>> results;
  for (int i = 0; i < 100; ++i) results.push_back(pool.submit([i] { return i * i; }));
  for (int i = 0; i < 100; ++i) CHECK(results[i].get() == i * i);
  auto bad = pool.submit([]() -> int { throw InputError("boom"); });
  CHECK_THROWS_AS(bad.get(), InputError);
}
