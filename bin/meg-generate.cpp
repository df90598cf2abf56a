// meg-generate: text from a trained model, with a KV cache and continuous batching; prompts from
// the command line, a JSONL file or stdin, answers streamed as text or written as JSON lines; one
// process, or the model split over tensor-parallel ranks under mpirun.
#include <string>

#include "core/cli.hpp"
#include "core/cli_groups.hpp"
#include "infer/generate_tool.hpp"
#include "parallel/comm.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Generate text with a trained model: --prompt TEXT, --prompts FILE.jsonl, or one prompt per line of "
               "stdin (answers streamed as they are produced).",
               "meg-generate"};
  meg::GenerateOptions o;
  auto& s = o.settings;

  meg::cli::add_load_option(app, o.load)->required();
  meg::cli::add_tokenizer_options(app, o.tokenizer, o.merges, "default: the one the checkpoint keeps");
  app.add_option("--prompt", o.prompt, "Answer this one prompt (streamed; default: one prompt per line of stdin)");
  app.add_option("--prompts", o.prompts,
                 "JSONL file of prompts ('-': stdin), each line {\"prompt\": ...} with optional settings of its own; "
                 "writes one JSON result per line");
  app.add_option("-o,--output", o.output, "File for the JSON results (default: stdout)");
  app.add_flag("--json", o.json, "--prompt and stdin: write JSON results instead of text");
  app.add_flag("--echo", o.echo, "Text output: print each prompt before its completion");

  app.add_option("--max-tokens", s.max_tokens, "Tokens to generate at most per prompt")->capture_default_str();
  app.add_option("--temperature", s.sampling.temperature, "Sampling temperature; 0 is greedy decoding")
      ->capture_default_str();
  app.add_option("--top-k", s.sampling.top_k, "Sample among the K most likely tokens only (0: off)")
      ->capture_default_str();
  app.add_option("--top-p", s.sampling.top_p, "Sample among the most likely tokens of total probability P (1: off)")
      ->capture_default_str();
  app.add_option("--repetition-penalty", s.sampling.repetition_penalty,
                 "Divide the positive logits of tokens already present by R, multiply the others (1: off)")
      ->capture_default_str();
  app.add_option("--stop", s.stop, "Stop when the completion contains STRING, which is cut off (repeatable)")
      ->allow_extra_args(false)
      ->type_name("STRING");
  s.sampling.seed = 1234;
  app.add_option("--seed", s.sampling.seed, "Seed of the sampling")->capture_default_str();

  app.add_option("--batch", o.batch, "Sequences decoded at once (default: 1 on cpu, 32 on cuda)");
  app.add_option("--max-length", o.max_length,
                 "Tokens a sequence holds, prompt included (default: the model's sequence length; GPT-2 models "
                 "cannot go beyond it)");
  meg::cli::add_device_options(app, o.device, o.precision);
  meg::cli::add_parallel_layout_options(app, {.tp = &o.tp});
  meg::cli::add_common_options(app, "meg-generate --load ckpt --prompt 'Once upon a time' --max-tokens 50\n"
                                    "  meg-generate --load ckpt --prompts questions.jsonl --temperature 0.8 "
                                    "--top-p 0.95 -o answers.jsonl\n"
                                    "  cut -f2 titles.tsv | meg-generate --load ckpt --stop $'\\n' > texts.txt\n"
                                    "  mpirun -np 2 meg-generate --tp 2 --load big-ckpt --prompts questions.jsonl "
                                    "-o answers.jsonl");

  return meg::cli::run_tool(
      app, argc, argv, [&] { return meg::run_generate(o); },
      // One rank failing ends the job: the others would wait for it in a collective forever.
      [](int status) {
        if (meg::World::initialized() && meg::World::get().distributed()) meg::World::get().abort(status);
      });
}
