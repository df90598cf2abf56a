#include "eval/runner.hpp"

#include <chrono>
#include <memory>

#include "core/error.hpp"
#include "core/log.hpp"

namespace meg {

Evaluation prepare_evaluation(const EvalOptions& options) {
  if (options.batch < 1) input_error("--batch must be at least 1, got {}", options.batch);
  if (options.limit < 0) input_error("--limit must not be negative, got {}", options.limit);
  if (options.num_fewshot < 0) input_error("--num-fewshot must not be negative, got {}", options.num_fewshot);
  if (options.num_fewshot > 0 && options.type == TaskType::perplexity)
    input_error("--num-fewshot {}: perplexity scores whole documents, without examples", options.num_fewshot);
  if (!options.fewshot_file.empty() && options.num_fewshot == 0)
    input_error("--fewshot-file {} needs --num-fewshot above 0", options.fewshot_file);
  Evaluation e;
  e.options = options;
  e.task = read_task(options.task, options.type, static_cast<size_t>(options.limit));
  if (!options.fewshot_file.empty()) e.fewshot_docs = read_task(options.fewshot_file, options.type, 0);
  return e;
}

void run_evaluation(Evaluation& e, Scorer& scorer, const Tokenizer& tokenizer) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<FewshotSampler> fewshot;
  if (e.options.num_fewshot > 0) {
    const bool same_file = e.options.fewshot_file.empty();
    const Task& population = same_file ? e.task : e.fewshot_docs;
    fewshot = std::make_unique<FewshotSampler>(population.docs, e.options.num_fewshot, same_file,
                                               e.options.fewshot_seed, population.path);
  }
  e.requests = build_requests(e.task, tokenizer, fewshot.get(), scorer.max_length(), scorer.config().vocab_size);
  log::info("{}: {} documents, {} requests of {} ({}-shot)", e.task.path, e.task.scored, e.requests.size(),
            task_type_name(e.task.type), e.options.num_fewshot);
  e.scores = score_requests(scorer, e.requests, e.options.batch);
  e.metrics = compute_metrics(e.task, e.requests, e.scores);
  e.tokens = 0;
  for (const Request& r : e.requests) e.tokens += model_positions(r, scorer.max_length());
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace meg
