// meg-blend: Megatron's GPT sample indices and blend for weighted datasets, in one file that
// training maps; --dump describes such a file.
#include <chrono>
#include <optional>

#include "core/cli.hpp"
#include "core/cli_groups.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stdout.hpp"
#include "data/blend.hpp"
#include "data/gpt_dataset.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Build the train/valid/test sample indices of a weighted blend of indexed datasets.", "meg-blend"};
  std::vector<std::string> args;
  std::string output, dump;
  bool json = false;
  meg::BlendOptions options;
  std::optional<uint64_t> samples, valid_samples, test_samples;

  app.add_option("inputs", args, "WEIGHT PREFIX pairs: each dataset's weight and .bin/.idx prefix");
  app.add_option("-o,--output", output, "The blend file to write");
  app.add_option("--seq-length", options.seq_length, "Tokens per sample T (samples hold T+1)")
      ->check(meg::cli::whole_number());
  app.add_option("--samples", samples, "Training samples to draw from the blend")->check(meg::cli::whole_number());
  app.add_option("--valid-samples", valid_samples, "Validation samples (default: one epoch of the split)")
      ->check(meg::cli::whole_number());
  app.add_option("--test-samples", test_samples, "Test samples (default: one epoch of the split)")
      ->check(meg::cli::whole_number());
  app.add_option("--seed", options.seed, "Seed of the shuffles (numpy RandomState)")->capture_default_str();
  app.add_option("--split", options.split, "Train,valid,test weights of each dataset's documents")->capture_default_str();
  auto* dump_opt = app.add_option("--dump", dump, "Describe the blend file BLEND instead of building one");
  app.add_flag("--json", json, "--dump: print JSON");
  meg::cli::add_common_options(app, "meg-blend --seq-length 1024 --samples 1000000 -o data/run.blend 0.7 data/web 0.3 data/books");

  return meg::cli::run_tool(app, argc, argv, [&] {
    if (*dump_opt) {
      if (!args.empty()) meg::input_error("--dump takes only the blend file, not '{}'", args.front());
      const meg::BlendFile blend(dump);
      const auto info = meg::describe_blend(blend);
      meg::write_stdout(json ? info.dump(2) + "\n" : meg::format_blend_description(info));
      return 0;
    }
    if (output.empty()) meg::input_error("-o BLEND is required");
    if (options.seq_length == 0) meg::input_error("--seq-length is required");
    if (!samples) meg::input_error("--samples is required");
    options.samples = {samples, valid_samples, test_samples};

    const auto start = std::chrono::steady_clock::now();
    const auto inputs = meg::parse_blend_arguments(args);
    const auto stats = meg::build_blend(inputs, options, output);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    meg::log::info("wrote {}: {} train, {} valid, {} test samples of {}+1 tokens from {} inputs ({} bytes) in {:.2f} s",
                   output, stats.samples[0], stats.samples[1], stats.samples[2], options.seq_length, inputs.size(),
                   stats.bytes, secs);
    return 0;
  });
}
