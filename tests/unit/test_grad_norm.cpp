// The gradient norm's ranges (optim/grad_norm.hpp): which parts of a rank's flat array are split
// over the tensor-parallel group and which are replicated, merged, cut to a shard, with tensors
// left out; and the one-process sum.
#include <string>
#include <vector>

#include "catch.hpp"
#include "model/config.hpp"
#include "model/gpt.hpp"
#include "model/tensor_parallel.hpp"
#include "optim/grad_norm.hpp"

using namespace meg;

namespace {

ModelConfig gpt_config() {
  ModelConfig c = ModelConfig::preset("tiny");
  c.vocab_size = 300;
  c.pad_vocab(2);
  c.validate();
  return c;
}

// The kind of each element of [begin, end) by the ranges: 's' split, 'r' replicated, '-' neither.
std::string kinds(const GradNormRanges& r, size_t begin, size_t end) {
  std::string k(end - begin, '-');
  for (const auto& g : r.split)
    for (size_t i = g.begin; i < g.end; ++i) k[i - begin] = k[i - begin] == '-' ? 's' : '!';
  for (const auto& g : r.replicated)
    for (size_t i = g.begin; i < g.end; ++i) k[i - begin] = k[i - begin] == '-' ? 'r' : '!';
  return k;
}

}  // namespace

TEST_CASE("grad_norm_ranges classes every tensor once, by its tensor-parallel split", "[parallel]") {
  const ModelConfig c = gpt_config();
  const auto table = gpt_parameter_table(c, 2);
  const size_t n = table.back().offset + table.back().numel;
  const GradNormRanges r = grad_norm_ranges(table, true, 0, n);
  const std::string k = kinds(r, 0, n);
  for (const auto& t : table) {
    const bool split = tp_split_of(t).split != TpSplit::replicated;
    INFO(t.name);
    CHECK(k.substr(t.offset, t.numel) == std::string(t.numel, split ? 's' : 'r'));
  }
  // Neighbours of one kind are merged: no two ranges of a kind touch.
  for (const auto* list : {&r.split, &r.replicated})
    for (size_t i = 1; i < list->size(); ++i) CHECK((*list)[i - 1].end < (*list)[i].begin);
  // Without tensor parallelism everything counts once, as one range.
  const auto whole = gpt_parameter_table(c);
  const size_t m = whole.back().offset + whole.back().numel;
  const GradNormRanges one = grad_norm_ranges(whole, false, 0, m);
  CHECK(one.split.empty());
  REQUIRE(one.replicated.size() == 1);
  CHECK(one.replicated[0].begin == 0);
  CHECK(one.replicated[0].end == m);
}

TEST_CASE("grad_norm_ranges cuts to a shard and leaves out what it is told to", "[parallel]") {
  const ModelConfig c = gpt_config();
  const auto table = gpt_parameter_table(c, 2);
  const size_t n = table.back().offset + table.back().numel;
  const std::string all = kinds(grad_norm_ranges(table, true, 0, n), 0, n);
  const size_t begin = n / 3, end = 2 * n / 3;  // a shard that starts and ends inside tensors
  CHECK(kinds(grad_norm_ranges(table, true, begin, end), begin, end) == all.substr(begin, end - begin));

  const auto wte = [](const ParamTensor& t) { return t.name == "embedding.word_embeddings.weight"; };
  const std::string without = kinds(grad_norm_ranges(table, true, 0, n, wte), 0, n);
  for (const auto& t : table) {
    INFO(t.name);
    CHECK(without.substr(t.offset, t.numel) ==
          (wte(t) ? std::string(t.numel, '-') : all.substr(t.offset, t.numel)));
  }
}

TEST_CASE("global_sum_squares in one process is the split and replicated sums' total", "[parallel]") {
  CHECK(global_sum_squares(2.5, 4.0, nullptr, nullptr, nullptr) == 6.5);
  CHECK(global_sum_squares(0.0, 1.0, nullptr, nullptr, nullptr) == 1.0);
}
