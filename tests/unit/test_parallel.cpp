// The deterministic parallel-for, and what it is for: the CPU model's loss and gradients are
// bit-identical with one thread and with several. The settings check of the ranks in a world of
// one (tests/mpi/test_rank_agreement.cpp checks it on four).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "test_util.hpp"
#include "core/parallel.hpp"
#include "model/config.hpp"
#include "model/gpt.hpp"
#include "parallel/comm.hpp"
#include "parallel/rank_agreement.hpp"

using namespace meg;

namespace {

// Restores the default pool size when a test ends, whatever it set.
struct ThreadsGuard {
  ~ThreadsGuard() { set_num_threads(0); }
};

// The (begin, end) chunks parallel_for hands out, sorted.
std::vector<std::pair<size_t, size_t>> chunks_of(size_t n, size_t grain) {
  std::mutex m;
  std::vector<std::pair<size_t, size_t>> chunks;
  parallel_for(n, grain, [&](size_t begin, size_t end) {
    std::lock_guard<std::mutex> lock(m);
    chunks.emplace_back(begin, end);
  });
  std::sort(chunks.begin(), chunks.end());
  return chunks;
}

}  // namespace

TEST_CASE("parallel_for: fixed chunks, every index once, any thread count", "[core]") {
  ThreadsGuard guard;
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(64), size_t(1000), size_t(4099)}) {
    for (size_t grain : {size_t(1), size_t(3), size_t(64), size_t(5000)}) {
      INFO("n " << n << " grain " << grain);
      std::vector<std::vector<std::pair<size_t, size_t>>> seen;
      for (unsigned threads : {1u, 2u, 4u, 7u}) {
        set_num_threads(threads);
        CHECK(num_threads() == threads);
        std::vector<std::atomic<int>> hits(n);
        parallel_for(n, grain, [&](size_t begin, size_t end) {
          for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        });
        for (size_t i = 0; i < n; ++i) CHECK(hits[i].load() == 1);
        seen.push_back(chunks_of(n, grain));
      }
      // The boundaries are [k grain, min(n, (k+1) grain)) whatever the number of threads.
      std::vector<std::pair<size_t, size_t>> expected;
      for (size_t b = 0; b < n; b += grain) expected.emplace_back(b, std::min(n, b + grain));
      for (const auto& s : seen) CHECK(s == expected);
    }
  }
}

TEST_CASE("parallel_for: nested calls run inline, exceptions reach the caller", "[core]") {
  ThreadsGuard guard;
  set_num_threads(4);
  std::vector<std::atomic<int>> hits(64 * 64);
  parallel_for(64, 1, [&](size_t b0, size_t b1) {
    for (size_t i = b0; i < b1; ++i)
      parallel_for(64, 4, [&](size_t j0, size_t j1) {
        for (size_t j = j0; j < j1; ++j) hits[i * 64 + j].fetch_add(1);
      });
  });
  for (auto& h : hits) CHECK(h.load() == 1);

  // The lowest failing chunk's exception is the one rethrown, whichever thread ran it.
  for (int rep = 0; rep < 20; ++rep) {
    try {
      parallel_for(100, 1, [](size_t begin, size_t) {
        if (begin % 10 == 3) throw std::runtime_error("chunk " + std::to_string(begin));
      });
      FAIL("no exception");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "chunk 3");
    }
  }
}

TEST_CASE("gpt model: loss and gradients are bit-identical with 1 and 4 threads", "[model]") {
  ThreadsGuard guard;
  for (const std::string name : {"tiny", "tiny-llama"}) {
    INFO(name);
    ModelConfig c = ModelConfig::preset(name);
    c.set_vocab_from_tokenizer(1000);
    const int B = 8, T = 64;  // enough rows, heads and elements for many chunks in every op
    const auto tokens = random_tokens(size_t(B) * T, 1000, 21);
    auto targets = random_tokens(size_t(B) * T, 1000, 22);
    targets[5] = -1;  // an ignored position

    auto run = [&](unsigned threads, double& loss, std::vector<float>& grads,
                   std::vector<float>& logits) {
      set_num_threads(threads);
      GptModel<float> m(c);
      m.init(42);
      m.zero_grad();
      loss = m.forward(tokens.data(), targets.data(), B, T);
      logits.assign(m.logits(), m.logits() + size_t(B) * T * c.padded_vocab_size);
      m.backward();
      m.backward();  // accumulation into existing gradients, too
      grads.assign(m.grads(), m.grads() + m.num_parameters());
    };
    double loss1 = 0, loss4 = 0;
    std::vector<float> grads1, grads4, logits1, logits4;
    run(1, loss1, grads1, logits1);
    run(4, loss4, grads4, logits4);
    CHECK(std::memcmp(&loss1, &loss4, sizeof loss1) == 0);
    REQUIRE(logits1.size() == logits4.size());
    CHECK(std::memcmp(logits1.data(), logits4.data(), logits1.size() * sizeof(float)) == 0);
    REQUIRE(grads1.size() == grads4.size());
    CHECK(std::memcmp(grads1.data(), grads4.data(), grads1.size() * sizeof(float)) == 0);
    // Not trivially so: the gradients are there.
    CHECK(std::any_of(grads1.begin(), grads1.end(), [](float g) { return g != 0.0f; }));
  }
}

TEST_CASE("check_ranks_agree: a process on its own agrees with itself, without MPI", "[core]") {
  Comm& world = World::init().world();
  REQUIRE(world.size() == 1);
  const std::vector<RankSetting> settings{{"--iters", "300", {}}, {"--data", "0123", "a.blend"}};
  CHECK(rank_disagreement(world, settings).empty());
  CHECK_NOTHROW(check_ranks_agree(world, settings));
}
