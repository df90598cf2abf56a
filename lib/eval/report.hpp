// An evaluation's results for people (a table) and for scripts (one JSON object), and its
// per-request log-likelihoods (JSON lines), the format man/meg-eval.1 documents.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "eval/runner.hpp"
#include "model/config.hpp"

namespace meg {

// What the results say about the run besides the task.
struct RunInfo {
  std::string checkpoint;  // the iteration directory read
  ModelConfig config;
  std::string tokenizer;  // Tokenizer::describe()
  std::string device, precision;
  int max_length = 0;
};

nlohmann::ordered_json results_json(const Evaluation& e, const RunInfo& run);
std::string results_table(const Evaluation& e);

// One JSON object per request, in document order, to PATH ("-": stdout).
void write_per_example(const std::string& path, const Evaluation& e);

}  // namespace meg
