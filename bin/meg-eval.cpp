// meg-eval: a checkpoint scored on an evaluation task as lm-evaluation-harness scores it:
// perplexity over documents (rolling windows), LAMBADA's last word, or multiple choice; the
// results as a table or as JSON, and optionally every request's log-likelihood.
#include "core/cli.hpp"
#include "core/cli_groups.hpp"
#include "core/device.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stdout.hpp"
#include "eval/report.hpp"
#include "eval/runner.hpp"
#include "eval/scorer.hpp"
#include "infer/checkpoint_model.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "Evaluate a meg checkpoint on a perplexity, LAMBADA or multiple-choice task, as lm-evaluation-harness "
      "scores them.",
      "meg-eval"};
  meg::EvalOptions o;
  std::string load, task_type, device, precision, tokenizer, merges, per_example;
  bool json = false;

  meg::cli::add_load_option(app, load)->required();
  app.add_option("--task", o.task,
                 "The task's JSONL file (- for stdin), or with --task-type perplexity an indexed dataset's PREFIX "
                 "(PREFIX.bin, PREFIX.idx)")
      ->required();
  app.add_option("--task-type", task_type, "perplexity, lambada or multiple-choice")->required();
  app.add_flag("--json", json, "Print the results as one JSON object instead of a table");
  app.add_option("--per-example", per_example,
                 "Write every request's tokens, log-likelihood and is_greedy to this JSON-lines file");
  app.add_option("--num-fewshot", o.num_fewshot, "Examples before each prompt, drawn from the task's file")
      ->capture_default_str();
  app.add_option("--fewshot-file", o.fewshot_file, "Draw the examples from this JSONL file instead (a training split)");
  app.add_option("--fewshot-seed", o.fewshot_seed, "Seed of the examples' draw (lm-eval's)")->capture_default_str();
  app.add_option("--limit", o.limit, "Score only the first N documents (0: all)")->capture_default_str();
  app.add_option("--batch", o.batch, "Rows (requests) per forward pass")->capture_default_str();
  meg::cli::add_device_options(app, device, precision);
  meg::cli::add_tokenizer_options(app, tokenizer, merges, "default: the one the checkpoint keeps");
  meg::cli::add_common_options(app,
                               "meg-eval --load runs/gpt --task lambada_openai.jsonl --task-type lambada --json\n"
                               "  meg-eval --load runs/gpt --task hellaswag.jsonl --task-type multiple-choice "
                               "--num-fewshot 10 --batch 32\n"
                               "  meg-eval --load runs/gpt --task data/valid_text_document --task-type perplexity");

  return meg::cli::run_tool(app, argc, argv, [&] {
    o.type = meg::parse_task_type(task_type);
    const meg::Precision p = meg::resolve_device_precision(device, precision).precision;
    meg::Evaluation e = meg::prepare_evaluation(o);  // bad task files fail before the model loads

    const meg::CheckpointModel checkpoint = meg::load_checkpoint_model(load);
    const auto tok = meg::load_model_tokenizer(checkpoint, tokenizer, merges);
    const auto scorer = meg::make_scorer(checkpoint, device, p, o.batch);
    meg::log::info("{}: {}, {} parameters, {} on {}", checkpoint.path, meg::to_string(checkpoint.config.family),
                   checkpoint.config.num_parameters(), meg::precision_name(p), device);
    meg::run_evaluation(e, *scorer, *tok);

    if (!per_example.empty()) meg::write_per_example(per_example, e);
    if (json) {
      const meg::RunInfo run{.checkpoint = checkpoint.path,
                             .config = checkpoint.config,
                             .tokenizer = tok->describe(),
                             .device = device,
                             .precision = meg::precision_name(p),
                             .max_length = scorer->max_length()};
      meg::write_stdout(meg::results_json(e, run).dump(2) + "\n");
    } else {
      meg::write_stdout(meg::results_table(e));
    }
    return 0;
  });
}
