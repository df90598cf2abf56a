#include "eval/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/byte_stream.hpp"

namespace meg {

nlohmann::ordered_json results_json(const Evaluation& e, const RunInfo& run) {
  nlohmann::ordered_json metrics = nlohmann::ordered_json::object();
  for (const Metric& m : e.metrics) {
    metrics[m.name] = m.value;
    if (m.standard_error) metrics[m.name + "_stderr"] = *m.standard_error;
  }
  nlohmann::ordered_json j;
  j["task"] = e.task.path;
  j["task_type"] = task_type_name(e.task.type);
  j["source"] = e.task.tokenized ? "indexed-dataset" : "jsonl";
  j["num_fewshot"] = e.options.num_fewshot;
  if (e.options.num_fewshot > 0) {
    j["fewshot_file"] = e.options.fewshot_file.empty() ? e.task.path : e.options.fewshot_file;
    j["fewshot_seed"] = e.options.fewshot_seed;
  }
  j["limit"] = e.options.limit;
  j["documents"] = e.task.scored;
  j["requests"] = e.requests.size();
  j["tokens"] = e.tokens;
  j["metrics"] = std::move(metrics);
  j["model"] = {{"checkpoint", run.checkpoint},
                {"family", to_string(run.config.family)},
                {"parameters", run.config.num_parameters()},
                {"vocab_size", run.config.vocab_size},
                {"max_length", run.max_length}};
  j["tokenizer"] = run.tokenizer;
  j["device"] = run.device;
  j["precision"] = run.precision;
  j["batch"] = e.options.batch;
  j["seconds"] = e.seconds;
  return j;
}

std::string results_table(const Evaluation& e) {
  // A Markdown table, one row per metric, as lm-eval prints its results.
  std::vector<std::vector<std::string>> rows = {{"task", "type", "n-shot", "documents", "metric", "value", "stderr"}};
  for (size_t i = 0; i < e.metrics.size(); ++i) {
    const Metric& m = e.metrics[i];
    const bool first = i == 0;
    rows.push_back({first ? std::filesystem::path(e.task.path).filename().string() : "",
                    first ? task_type_name(e.task.type) : "", first ? std::to_string(e.options.num_fewshot) : "",
                    first ? std::to_string(e.task.scored) : "", m.name, fmt::format("{:.4f}", m.value),
                    m.standard_error ? fmt::format("{:.4f}", *m.standard_error) : ""});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  const auto numeric = [](size_t c) { return c == 2 || c == 3 || c == 5 || c == 6; };
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t c = 0; c < rows[r].size(); ++c)
      out += numeric(c) ? fmt::format("|{:>{}}", rows[r][c], width[c]) : fmt::format("|{:<{}}", rows[r][c], width[c]);
    out += "|\n";
    if (r == 0) {
      for (size_t c = 0; c < width.size(); ++c) {
        out += '|';
        out.append(width[c] - (numeric(c) ? 1 : 0), '-');
        if (numeric(c)) out += ':';
      }
      out += "|\n";
    }
  }
  return out;
}

void write_per_example(const std::string& path, const Evaluation& e) {
  ByteWriter out(path);
  for (size_t i = 0; i < e.requests.size(); ++i) {
    const Request& r = e.requests[i];
    nlohmann::ordered_json j;
    j["doc"] = r.doc;
    j["line"] = e.task.docs[r.doc].line;
    j["index"] = r.index;
    if (e.task.type != TaskType::perplexity) {  // rolling windows have no text of their own
      j["context"] = r.context;
      j["continuation"] = r.continuation;
    }
    if (e.task.type == TaskType::multiple_choice) j["gold"] = e.task.docs[r.doc].gold;
    j["context_tokens"] = r.context_tokens;
    j["continuation_tokens"] = r.continuation_tokens;
    j["loglikelihood"] = e.scores[i].loglikelihood;
    j["is_greedy"] = e.scores[i].greedy;
    const std::string line = j.dump() + "\n";
    out.write(line.data(), line.size());
  }
  out.commit();
}

}  // namespace meg
