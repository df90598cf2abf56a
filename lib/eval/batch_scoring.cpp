#include "eval/batch_scoring.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "core/progress.hpp"

namespace meg {
namespace {

// Token I of R's context followed by its continuation.
int32_t token_at(const Request& r, size_t i) {
  const size_t n = r.context_tokens.size();
  return i < n ? r.context_tokens[i] : r.continuation_tokens[i - n];
}

size_t length(const Request& r) { return r.context_tokens.size() + r.continuation_tokens.size(); }

// A request as one row: the tokens the model reads and how many of the last positions are scored.
struct Row {
  std::vector<int32_t> input;  // context + continuation, cut to the last max_length + 1, last dropped
  size_t scored = 0;           // the continuation's length
};

Row make_row(const Request& r, size_t max_length) {
  // build_requests() makes only requests that fit; anything else is a caller's bug.
  if (r.context_tokens.empty() || r.continuation_tokens.empty() || r.continuation_tokens.size() > max_length)
    throw std::invalid_argument(
        "score_requests: a request needs context, and a continuation of 1 to max_length tokens");
  const size_t n = length(r), positions = model_positions(r, max_length);
  Row row{std::vector<int32_t>(positions), r.continuation_tokens.size()};
  for (size_t i = 0; i < positions; ++i) row.input[i] = token_at(r, n - positions - 1 + i);
  return row;
}

// lm-eval's order: the longest request (context and continuation) first, then by their tokens.
std::vector<size_t> scoring_order(std::span<const Request> requests) {
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Request &x = requests[a], &y = requests[b];
    if (length(x) != length(y)) return length(x) > length(y);
    for (size_t i = 0; i < length(x); ++i)
      if (token_at(x, i) != token_at(y, i)) return token_at(x, i) < token_at(y, i);
    return false;
  });
  return order;
}

}  // namespace

size_t model_positions(const Request& r, size_t max_length) { return std::min(length(r), max_length + 1) - 1; }

std::vector<RequestScore> score_requests(Scorer& scorer, std::span<const Request> requests, int batch) {
  if (batch < 1) throw std::invalid_argument("score_requests: batch below 1");
  const size_t rows_per_call = static_cast<size_t>(std::min(batch, scorer.max_batch()));
  const size_t max_length = static_cast<size_t>(scorer.max_length());
  const std::vector<size_t> order = scoring_order(requests);

  uint64_t total = 0;
  for (const Request& r : requests) total += model_positions(r, max_length);
  Progress progress("scored", total, "tok");

  std::vector<RequestScore> scores(requests.size());
  std::vector<int32_t> tokens, targets;
  std::vector<TokenScore> out;
  for (size_t first = 0; first < order.size(); first += rows_per_call) {
    const size_t B = std::min(rows_per_call, order.size() - first);
    std::vector<Row> rows;
    size_t T = 0;
    for (size_t b = 0; b < B; ++b) {
      rows.push_back(make_row(requests[order[first + b]], max_length));
      T = std::max(T, rows.back().input.size());
    }
    // Padding: token 0 and no target after each row's end, which the causal model never looks back at.
    tokens.assign(B * T, 0);
    targets.assign(B * T, -1);
    for (size_t b = 0; b < B; ++b) {
      const Request& r = requests[order[first + b]];
      const Row& row = rows[b];
      std::copy(row.input.begin(), row.input.end(), tokens.begin() + b * T);
      // Position p predicts token p + 1 of the cut sequence, whose last SCORED tokens are the continuation.
      const size_t from = row.input.size() - row.scored;
      std::copy(r.continuation_tokens.begin(), r.continuation_tokens.end(), targets.begin() + b * T + from);
    }
    out.assign(B * T, TokenScore{});
    scorer.score(tokens.data(), targets.data(), static_cast<int>(B), static_cast<int>(T), out.data());
    for (size_t b = 0; b < B; ++b) {
      RequestScore& s = scores[order[first + b]];
      const size_t n = rows[b].input.size();
      for (size_t p = n - rows[b].scored; p < n; ++p) {
        s.loglikelihood += out[b * T + p].logprob;
        s.greedy = s.greedy && out[b * T + p].greedy;
      }
      progress.add(n);
    }
  }
  progress.finish();
  return scores;
}

}  // namespace meg
