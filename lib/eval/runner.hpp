// A whole evaluation: the task read and checked (before any model is loaded, so that bad input
// fails fast), its requests built, scored in batches, and its metrics computed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.hpp"
#include "eval/batch_scoring.hpp"
#include "eval/fewshot.hpp"
#include "eval/metrics.hpp"
#include "eval/requests.hpp"
#include "eval/scorer.hpp"
#include "eval/task.hpp"

namespace meg {

struct EvalOptions {
  std::string task;  // a JSONL file, or (perplexity) an indexed dataset's prefix
  TaskType type = TaskType::perplexity;
  int64_t limit = 0;  // score the first LIMIT documents (0: all)
  int num_fewshot = 0;
  std::string fewshot_file;  // draw the examples from this JSONL file instead of the task's
  int64_t fewshot_seed = kFewshotSeed;
  int batch = 8;  // rows per scorer call
};

struct Evaluation {
  EvalOptions options;
  Task task;
  Task fewshot_docs;  // --fewshot-file's documents (unread without one)
  std::vector<Request> requests;
  std::vector<RequestScore> scores;
  std::vector<Metric> metrics;
  uint64_t tokens = 0;  // positions the model ran, padding aside
  double seconds = 0;   // building and scoring the requests
};

// Checks OPTIONS and reads the task; InputError on either.
Evaluation prepare_evaluation(const EvalOptions& options);

// Scores E's task with SCORER, its texts tokenized by TOKENIZER (whose end-of-document token is
// the prefix of rolling windows and of empty contexts), and fills in the rest of E.
void run_evaluation(Evaluation& e, Scorer& scorer, const Tokenizer& tokenizer);

}  // namespace meg
