// Comm and World under mpirun -np 4: every collective against sums worked out by hand, the same
// bits on every rank, the groups of several layouts, and the errors. Every rank runs every line,
// so checks that fail never skip a collective the other ranks are waiting in.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "core/error.hpp"
#include "parallel/comm.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr size_t kChunk = size_t{1} << 20;  // floats per MPI call in comm.cpp: sizes below cross it

Comm& world_of_four() {
  Comm& c = World::get().world();
  REQUIRE(c.size() == 4);
  return c;
}

// Small multiples of 1/8: every sum of four is exact, whatever the order.
float v(size_t i, int r) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(r) * 13) % 101) - 50) * 0.125f;
}

}  // namespace

TEST_CASE("all_reduce_sum gives the exact sum, across chunks", "[mpi]") {
  Comm& c = world_of_four();
  const size_t n = 2 * kChunk + 12345;  // three chunks, the last padded
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = v(i, c.rank());
  c.all_reduce_sum(x.data(), n);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += x[i] != v(i, 0) + v(i, 1) + v(i, 2) + v(i, 3);
  CHECK(wrong == 0);

  std::vector<double> y(1001);
  for (size_t i = 0; i < y.size(); ++i) y[i] = (static_cast<double>(i % 17) - 3.0 * c.rank()) * 0.5;
  c.all_reduce_sum(y.data(), y.size());
  wrong = 0;
  for (size_t i = 0; i < y.size(); ++i) wrong += y[i] != (4.0 * static_cast<double>(i % 17) - 18.0) * 0.5;
  CHECK(wrong == 0);
}

TEST_CASE("all_reduce_sum gives every rank the same bits", "[mpi]") {
  Comm& c = world_of_four();
  const size_t n = 300001;
  // Magnitudes over six decades, so that the order of the additions changes the rounding.
  const auto inputs = [n](int r) {
    std::mt19937 gen(1234 + r);
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> decade(-3.0f, 3.0f);
    std::vector<float> x(n);
    for (auto& e : x) e = normal(gen) * std::pow(10.0f, decade(gen));
    return x;
  };
  std::vector<float> x = inputs(c.rank());
  c.all_reduce_sum(x.data(), n);

  std::vector<float> all(4 * n);
  c.all_gather(all.data(), x.data(), n);
  for (int k = 1; k < 4; ++k) CHECK(std::memcmp(all.data(), all.data() + k * n, n * sizeof(float)) == 0);

  std::vector<double> sum(n, 0.0), scale(n, 0.0);
  for (int r = 0; r < 4; ++r) {
    const auto xr = inputs(r);
    for (size_t i = 0; i < n; ++i) {
      sum[i] += xr[i];
      scale[i] += std::fabs(xr[i]);
    }
  }
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += std::fabs(x[i] - sum[i]) > 3 * 0x1p-24 * scale[i];
  CHECK(wrong == 0);
}

TEST_CASE("all_reduce_max", "[mpi]") {
  Comm& c = world_of_four();
  const auto f = [](size_t i, int r) {
    return static_cast<int64_t>((i * 31 + static_cast<size_t>(r) * 1000003) % 977) - 500;
  };
  std::vector<int64_t> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = f(i, c.rank());
  c.all_reduce_max(x.data(), x.size());
  size_t wrong = 0;
  for (size_t i = 0; i < x.size(); ++i) wrong += x[i] != std::max({f(i, 0), f(i, 1), f(i, 2), f(i, 3)});
  CHECK(wrong == 0);
}

TEST_CASE("reduce_scatter_sum: member r gets the sum of block r", "[mpi]") {
  Comm& c = world_of_four();
  const auto f = [](size_t block, size_t i, int r) {
    return static_cast<float>(static_cast<int>((block * 5 + i * 3 + static_cast<size_t>(r) * 11) % 61) - 30) * 0.25f;
  };
  for (size_t n : {size_t{7}, kChunk + 5}) {  // one call; two chunks packed from every block
    INFO("n = " << n);
    std::vector<float> send(4 * n), recv(n, -1.0f);
    for (size_t b = 0; b < 4; ++b)
      for (size_t i = 0; i < n; ++i) send[b * n + i] = f(b, i, c.rank());
    c.reduce_scatter_sum(recv.data(), send.data(), n);
    const auto me = static_cast<size_t>(c.rank());
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += recv[i] != f(me, i, 0) + f(me, i, 1) + f(me, i, 2) + f(me, i, 3);
    CHECK(wrong == 0);
  }
}

TEST_CASE("all_gather: every member's block in member order", "[mpi]") {
  Comm& c = world_of_four();
  const auto g = [](size_t i, int r) {
    return static_cast<float>((i * 3 + static_cast<size_t>(r) * 17) % 1009) + 0.5f * static_cast<float>(r);
  };
  for (size_t n : {size_t{7}, kChunk + 5}) {
    INFO("n = " << n);
    std::vector<float> send(n), recv(4 * n, -1.0f);
    for (size_t i = 0; i < n; ++i) send[i] = g(i, c.rank());
    c.all_gather(recv.data(), send.data(), n);
    size_t wrong = 0;
    for (int k = 0; k < 4; ++k)
      for (size_t i = 0; i < n; ++i) wrong += recv[static_cast<size_t>(k) * n + i] != g(i, k);
    CHECK(wrong == 0);
  }
}

TEST_CASE("broadcast from a member other than 0, across chunks", "[mpi]") {
  Comm& c = world_of_four();
  std::vector<unsigned char> bytes((size_t{4} << 20) + 3, 0);
  const auto b = [](size_t i) { return static_cast<unsigned char>((i * 7 + 3) & 0xff); };
  if (c.rank() == 2)
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = b(i);
  c.broadcast(bytes.data(), bytes.size(), 2);
  size_t wrong = 0;
  for (size_t i = 0; i < bytes.size(); ++i) wrong += bytes[i] != b(i);
  CHECK(wrong == 0);
}

TEST_CASE("send and recv around a ring", "[mpi]") {
  Comm& c = world_of_four();
  const int next = (c.rank() + 1) % 4, prev = (c.rank() + 3) % 4;
  const size_t n = kChunk + 9;
  const auto p = [](size_t i, int r) { return static_cast<float>(r * 4096 + static_cast<int>(i % 4096)); };
  std::vector<float> out(n), in(n, -1.0f);
  for (size_t i = 0; i < n; ++i) out[i] = p(i, c.rank());
  // Even ranks send first and odd ranks receive first, so no two blocking calls wait on each other.
  if (c.rank() % 2 == 0) {
    c.send(out.data(), n, next, 3);
    c.recv(in.data(), n, prev, 3);
  } else {
    c.recv(in.data(), n, prev, 3);
    c.send(out.data(), n, next, 3);
  }
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += in[i] != p(i, prev);
  CHECK(wrong == 0);
}

TEST_CASE("send_recv: every member sends and receives at once, in both directions", "[mpi]") {
  Comm& c = world_of_four();
  const int next = (c.rank() + 1) % 4, prev = (c.rank() + 3) % 4;
  const size_t n = 2 * kChunk + 5, m = 77;  // unequal sizes, several chunks one way
  const auto p = [](size_t i, int r) { return static_cast<float>(r * 4096 + static_cast<int>(i % 4096)); };
  std::vector<float> out(n), in(n, -1.0f), back(m), got_back(m, -1.0f);
  for (size_t i = 0; i < n; ++i) out[i] = p(i, c.rank());
  for (size_t i = 0; i < m; ++i) back[i] = -p(i, c.rank());
  // All ranks at once: forward to NEXT while receiving from PREV, then the reverse.
  c.send_recv(out.data(), n, next, 5, in.data(), n, prev, 5);
  c.send_recv(back.data(), m, prev, 6, got_back.data(), m, next, 6);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += in[i] != p(i, prev);
  for (size_t i = 0; i < m; ++i) wrong += got_back[i] != -p(i, next);
  CHECK(wrong == 0);
}

TEST_CASE("point-to-point errors name the group and the call", "[mpi]") {
  Comm& c = world_of_four();
  std::vector<float> buf(20, 1.0f);
  CHECK_THROWS_WITH(c.send(buf.data(), 1, c.rank()), ContainsSubstring("cannot send to " + std::to_string(c.rank())));
  CHECK_THROWS_WITH(c.recv(buf.data(), 1, 4), ContainsSubstring("cannot receive from 4"));
  if (c.rank() == 0) {
    c.send(buf.data(), 20, 1, 7);  // longer than the receive
    c.send(buf.data(), 5, 1, 8);   // shorter
  } else if (c.rank() == 1) {
    CHECK_THROWS_WITH(c.recv(buf.data(), 10, 0, 7), ContainsSubstring("MPI_Recv on the world group failed"));
    CHECK_THROWS_WITH(c.recv(buf.data(), 10, 0, 8),
                      ContainsSubstring("MPI_Recv on the world group: member 0 sent 5 values where 10 were expected"));
  }
  c.barrier();
}

TEST_CASE("set_layout splits the world in Megatron's order", "[mpi]") {
  world_of_four();
  World& w = World::get();
  const int me = w.rank();
  for (const ParallelLayout& l : {ParallelLayout::resolve(4, 2, 1), ParallelLayout::resolve(4, 2, 2),
                                  ParallelLayout::resolve(4, 1, 1), ParallelLayout::resolve(4, 1, 2, 2)}) {
    INFO(l.to_json().dump());
    w.set_layout(l);
    CHECK(w.layout() == l);
    CHECK(l.rank_of(w.coords()) == me);
    for (ParallelDim d : {ParallelDim::tp, ParallelDim::cp, ParallelDim::ep, ParallelDim::dp, ParallelDim::pp}) {
      INFO(to_string(d));
      Comm& g = w.group(d);
      CHECK(g.name() == to_string(d));
      CHECK(g.size() == l.size(d));
      CHECK(g.rank() == w.coords()[d]);
      // The members, by their world ranks, in member order: exactly the layout's group.
      const float mine = static_cast<float>(me);
      std::vector<float> members(static_cast<size_t>(g.size()));
      g.all_gather(members.data(), &mine, 1);
      std::vector<float> expected;
      for (int r : l.group(me, d)) expected.push_back(static_cast<float>(r));
      CHECK(members == expected);
      float sum = mine;
      g.all_reduce_sum(&sum, 1);
      float expected_sum = 0;
      for (float r : expected) expected_sum += r;
      CHECK(sum == expected_sum);
    }
  }
}

TEST_CASE("set_layout refuses a layout that does not fit the world", "[mpi]") {
  world_of_four();
  World& w = World::get();
  w.set_layout(ParallelLayout::resolve(4, 2, 1));
  CHECK_THROWS_MATCHES(w.set_layout(ParallelLayout{3, 1, 1, 1, 1}), InputError,
                       Catch::Matchers::Message("tp 3 x pp 1 x cp 1 x ep 1 x dp 1 = 3 processes, but the job has 4"));
  CHECK_THROWS_MATCHES(w.set_layout(ParallelLayout{2, 1, 4, 1, 1}), InputError,
                       Catch::Matchers::Message("tp 2 x pp 1 x cp 1 x ep 1 x dp 4 = 8 processes, but the job has 4"));
  CHECK(w.layout() == ParallelLayout::resolve(4, 2, 1));  // the groups before the error stay
  CHECK(w.group(ParallelDim::tp).size() == 2);
}
