// meg-index: token streams to a Megatron-compatible indexed dataset (PREFIX.bin + PREFIX.idx);
// also describes, verifies and merges such datasets.
#include <chrono>

#include "core/cli.hpp"
#include "core/cli_groups.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stdout.hpp"
#include "core/progress.hpp"
#include "data/dataset_tools.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Build, describe, verify or merge Megatron-compatible indexed datasets (.bin/.idx).", "meg-index"};
  std::vector<std::string> args;
  std::string output;
  bool info = false, verify = false, merge = false, json = false, entropy = false;
  uint64_t vocab_size = 0;

  app.add_option("inputs", args, "Token streams to index (default: stdin), or dataset prefixes");
  app.add_option("-o,--output", output, "Output prefix: writes PREFIX.bin and PREFIX.idx");
  auto* info_flag = app.add_flag("--info", info, "Describe the datasets PREFIX...");
  auto* verify_flag = app.add_flag("--verify", verify, "Check the datasets PREFIX... in full");
  auto* merge_flag = app.add_flag("--merge", merge, "Concatenate the datasets PREFIX... into -o OUT");
  info_flag->excludes(verify_flag)->excludes(merge_flag);
  verify_flag->excludes(merge_flag);
  app.add_flag("--json", json, "--info: print JSON (one object per line)");
  app.add_flag("--entropy", entropy, "--info: also the unigram entropy of the tokens (reads them all)");
  app.add_option("--vocab-size", vocab_size, "--verify: also check every token is below this")
      ->check(meg::cli::whole_number(1, UINT32_MAX));
  meg::cli::add_common_options(app, "meg-tokenize --tokenizer spm.model --append-eod docs.jsonl | meg-index -o data/docs");

  return meg::cli::run_tool(app, argc, argv, [&] {
    const auto start = std::chrono::steady_clock::now();
    if (info || verify) {
      if (args.empty()) meg::input_error("--{} needs at least one dataset prefix", info ? "info" : "verify");
      for (const auto& prefix : args) {
        const meg::IndexedDataset dataset(prefix);
        if (verify) {
          dataset.verify(vocab_size);
          meg::log::info("{}: ok ({} documents, {} tokens)", prefix, dataset.num_documents(), dataset.num_tokens());
        } else {
          const auto description = meg::describe_dataset(dataset, entropy);
          meg::write_stdout(json ? description.dump() + "\n" : meg::format_description(description));
        }
      }
      return 0;
    }

    if (output.empty()) meg::input_error("-o PREFIX is required");
    meg::IndexStats stats;
    if (merge) {
      stats = meg::merge_datasets(args, output);
    } else {
      if (args.empty()) args.push_back("-");
      stats = meg::index_streams(args, output);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    meg::log::info("wrote {}.bin and {}.idx: {} documents, {} {} tokens in {:.2f} s", output, output,
                   stats.documents, stats.tokens, meg::dtype_name(stats.dtype), secs);
    return 0;
  });
}
