// Requests scored in batches, as lm-evaluation-harness's _loglikelihood_tokens does it: each
// request is one row, its context and continuation cut to the last max_length + 1 tokens and the
// last dropped (the model sees at most max_length tokens and predicts each continuation token
// from those before it); rows are sorted longest first (ties by their tokens) so that a batch
// holds rows of similar length, and each batch is padded to its longest row. The results come
// back in the requests' order: the sum of the continuation's log-probabilities, and whether every
// continuation token is the greedy one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "eval/requests.hpp"
#include "eval/scorer.hpp"

namespace meg {

struct RequestScore {
  double loglikelihood = 0;
  bool greedy = true;
};

// The positions the model runs for R: its context and continuation, cut to MAX_LENGTH + 1 tokens,
// less the last.
size_t model_positions(const Request& r, size_t max_length);

// BATCH (>= 1) rows per scorer call at most (and no more than the scorer's max_batch()). Progress on
// stderr, in tokens.
std::vector<RequestScore> score_requests(Scorer& scorer, std::span<const Request> requests, int batch);

}  // namespace meg
