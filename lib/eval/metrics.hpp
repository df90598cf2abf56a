// The task's metrics from its requests' scores, named and computed as lm-evaluation-harness does:
//
//   perplexity       word_perplexity = exp(-sum ll / sum words), byte_perplexity = exp(-sum ll /
//                    sum bytes), bits_per_byte = -sum ll / sum bytes / ln 2, with ll a document's
//                    log-likelihood (the sum over its windows) and words and bytes counted on its
//                    text; and meg's token_perplexity = exp(-sum ll / tokens scored), the only one
//                    for an indexed dataset (no text)
//   lambada          acc = mean over documents of is_greedy (every target token the argmax),
//                    perplexity = exp(-mean ll)
//   multiple choice  acc: the choice of highest ll is the gold one; acc_norm: the same with ll
//                    divided by the choice's length in characters (code points); ties go to the
//                    first choice, as numpy's argmax
// acc and acc_norm come with their standard error, lm-eval's sqrt(sample variance / n).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "eval/batch_scoring.hpp"
#include "eval/requests.hpp"
#include "eval/task.hpp"

namespace meg {

struct Metric {
  std::string name;
  double value = 0;
  std::optional<double> standard_error;  // acc and acc_norm with 2 documents or more
};

// REQUESTS as build_requests() makes them (document by document) and their SCORES.
std::vector<Metric> compute_metrics(const Task& task, std::span<const Request> requests,
                                    std::span<const RequestScore> scores);

}  // namespace meg
