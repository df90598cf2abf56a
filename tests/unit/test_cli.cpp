// The option groups the tools share (core/cli_groups.hpp): command lines parsed through each group,
// its defaults, a value, and the message of a bad value; and the one device and precision policy.
#include <optional>
#include <string>

#include "catch.hpp"
#include "core/cli_groups.hpp"
#include "core/device.hpp"
#include "core/error.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("The checkpoint group: --load, required where the tool says so", "[cli]") {
  CLI::App app;
  std::string load;
  cli::add_load_option(app, load, "the embedder");
  app.parse("");
  CHECK(load.empty());
  app.parse("--load runs/gpt");
  CHECK(load == "runs/gpt");
  CHECK(app.get_option("--load")->get_description() ==
        "The checkpoint: an iter_* directory, or a directory of them (its latest); the embedder");

  CLI::App strict;
  cli::add_load_option(strict, load)->required();
  CHECK_THROWS_AS(strict.parse(""), CLI::RequiredError);
}

TEST_CASE("The tokenizer group: -t/--tokenizer and --merges, one wording in every context", "[cli]") {
  CLI::App app;
  std::string tokenizer, merges;
  const auto added = cli::add_tokenizer_options(app, tokenizer, merges, "default: the one the checkpoint records");
  app.parse("");
  CHECK(tokenizer.empty());
  CHECK(merges.empty());
  app.parse("-t vocab.json --merges merges.txt");
  CHECK(tokenizer == "vocab.json");
  CHECK(merges == "merges.txt");
  app.parse("--tokenizer spm.model");
  CHECK(tokenizer == "spm.model");
  CHECK(added.tokenizer->get_name() == "--tokenizer");  // what "applies to" messages name
  CHECK(added.tokenizer->get_description() ==
        "The tokenizer: a SentencePiece .model, a GPT-2 vocab.json (with --merges), a Hugging Face "
        "tokenizer.json, or a model directory holding one; default: the one the checkpoint records");

  CLI::App convert;
  const auto to_hf = cli::add_tokenizer_options(convert, tokenizer, merges, "copied into it", "--to hf");
  CHECK(to_hf.tokenizer->get_description() ==
        "--to hf: the tokenizer: a SentencePiece .model, a GPT-2 vocab.json (with --merges), a Hugging Face "
        "tokenizer.json, or a model directory holding one; copied into it");
  CHECK(to_hf.merges->get_description() == "--to hf: the GPT-2 tokenizer's merges.txt, with --tokenizer vocab.json");
}

TEST_CASE("The device group: empty until resolved by the one policy", "[cli]") {
  CLI::App app;
  std::string device, precision;
  cli::add_device_options(app, device, precision);
  app.parse("");
  CHECK(device.empty());
  CHECK(precision.empty());

  SECTION("defaults: bf16 on cuda, fp32 on the CPU") {
    std::string cpu = "cpu", cpu_precision, cuda = "cuda", cuda_precision;
    CHECK(resolve_device_precision(cpu, cpu_precision).precision == Precision::fp32);
    CHECK(cpu_precision == "fp32");
    const auto on_cuda = resolve_device_precision(cuda, cuda_precision);
    CHECK(on_cuda.device == Device::cuda);
    CHECK(on_cuda.precision == Precision::bf16);
    CHECK(cuda_precision == "bf16");
    const auto fallback = resolve_device_precision(device, precision);  // whatever this machine has
    CHECK(device == default_device());
    CHECK(precision == (device == "cuda" ? "bf16" : "fp32"));
    CHECK(fallback.device == parse_device(device));
  }
  SECTION("a value given is kept") {
    app.parse("--device cuda --precision fp16");
    CHECK(resolve_device_precision(device, precision).precision == Precision::fp16);
    CHECK(device == "cuda");
    CHECK(precision == "fp16");
  }
  SECTION("a bad value: the device's message first, then the precision's") {
    app.parse("--device tpu --precision fp8");
    CHECK_THROWS_WITH(resolve_device_precision(device, precision), "--device 'tpu': expected cpu or cuda");
    device = "cpu";
    CHECK_THROWS_WITH(resolve_device_precision(device, precision), "--precision 'fp8': expected bf16, fp16 or fp32");
  }
}

TEST_CASE("The parallel layout group: the options whose fields a tool gives", "[cli]") {
  int tp = 1, pp = 1, cp = 1, ep = 1, virtual_stages = 1;
  std::optional<int> dp;
  bool distributed_optimizer = false, sequence_parallel = false;

  SECTION("training's whole layout") {
    CLI::App app;
    const auto added = cli::add_parallel_layout_options(app, {.tp = &tp,
                                                              .pp = &pp,
                                                              .dp = &dp,
                                                              .dp_default = "the ranks over the others",
                                                              .cp = &cp,
                                                              .ep = &ep,
                                                              .virtual_stages = &virtual_stages,
                                                              .distributed_optimizer = &distributed_optimizer,
                                                              .sequence_parallel = &sequence_parallel});
    CHECK(added.size() == 8);
    app.parse("");
    CHECK(tp == 1);
    CHECK(pp == 1);
    CHECK_FALSE(dp);
    CHECK_FALSE(sequence_parallel);
    app.parse("--tp 2 --pp 4 --dp 3 --virtual-stages 2 --use-distributed-optimizer --sequence-parallel");
    CHECK(tp == 2);
    CHECK(pp == 4);
    CHECK(dp == 3);
    CHECK(virtual_stages == 2);
    CHECK(distributed_optimizer);
    CHECK(sequence_parallel);
    CHECK(app.get_option("--dp")->get_description() == "Data-parallel size (default: the ranks over the others)");
    CHECK_THROWS_WITH(app.parse("--tp two"), ContainsSubstring("--tp") && ContainsSubstring("two"));
  }
  SECTION("one option: the others are unknown") {
    CLI::App app;
    CHECK(cli::add_parallel_layout_options(app, {.tp = &tp}).size() == 1);
    app.parse("--tp 4");
    CHECK(tp == 4);
    CHECK_THROWS_AS(app.parse("--pp 2"), CLI::ExtrasError);
  }
}
