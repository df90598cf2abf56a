// Megatron-LM's option names (core/megatron_names.hpp): the renames a declaration takes from the
// one table, the conversions to meg's fields and their refusals, and the precision flags of the
// device group (core/cli_groups.hpp).
#include <cstdint>
#include <optional>
#include <string>

#include "catch.hpp"
#include "core/cli_groups.hpp"
#include "core/error.hpp"
#include "core/megatron_names.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("Megatron names: a declaration takes the table's names of its long name", "[cli]") {
  CHECK(cli::with_megatron_names("--iters") == "--iters,--train-iters");
  CHECK(cli::with_megatron_names("-t,--tokenizer") == "-t,--tokenizer,--tokenizer-model,--vocab-file");
  CHECK(cli::with_megatron_names("--virtual-stages") ==
        "--virtual-stages,--virtual-pipeline-model-parallel-size,--num-virtual-stages-per-pipeline-rank");
  CHECK(cli::with_megatron_names("--lr") == "--lr");      // the same name in Megatron
  CHECK(cli::with_megatron_names("--tpx") == "--tpx");    // a name is matched whole
  CHECK(cli::with_megatron_names("-o") == "-o");          // no long name

  CLI::App app;
  int64_t iters = 0;
  app.add_option(cli::with_megatron_names("--iters"), iters);
  app.parse("--train-iters 7");
  CHECK(iters == 7);
  CHECK(app.get_option("--iters") == app.get_option("--train-iters"));
}

namespace {

// The fields the conversions set, after parsing ARGS and resolving.
struct Converted {
  int virtual_stages = 1;
  std::optional<int64_t> num_kv_heads;
};

Converted convert(const std::string& args) {
  CLI::App app;
  std::optional<int64_t> num_layers, num_kv_heads;
  int pp = 1, virtual_stages = 1;
  app.add_option("--num-layers", num_layers);
  app.add_option("--num-kv-heads", num_kv_heads);
  app.add_option("--pp", pp);
  app.add_option("--virtual-stages", virtual_stages);
  cli::MegatronConversions given;
  cli::add_megatron_conversions(app, given);
  app.parse(args);
  cli::resolve_megatron_conversions(given, num_layers, pp, virtual_stages, num_kv_heads);
  return {virtual_stages, num_kv_heads};
}

}  // namespace

TEST_CASE("Megatron names: the conversions, and what they refuse", "[cli]") {
  CHECK(convert("").virtual_stages == 1);
  CHECK_FALSE(convert("").num_kv_heads);
  // Layers per virtual stage: 8 layers over 2 stages are 4 each, in chunks of 2 or of 1.
  CHECK(convert("--num-layers 8 --pp 2 --num-layers-per-virtual-pipeline-stage 2").virtual_stages == 2);
  CHECK(convert("--num-layers 8 --pp 2 --num-layers-per-virtual-pipeline-stage 1").virtual_stages == 4);
  CHECK(convert("--num-layers 8 --pp 2 --num-layers-per-virtual-pipeline-stage 4").virtual_stages == 1);
  CHECK(input_error_of([] { convert("--num-layers 8 --pp 2 --num-layers-per-virtual-pipeline-stage 3"); }) ==
        "--num-layers-per-virtual-pipeline-stage 3: the 4 blocks of each of the --pp 2 stages do not divide into "
        "chunks of 3");
  CHECK(input_error_of([] { convert("--num-layers 9 --pp 2 --num-layers-per-virtual-pipeline-stage 1"); }) ==
        "--num-layers-per-virtual-pipeline-stage 1: --num-layers 9 does not divide over --pp 2 stages");
  CHECK_THAT(input_error_of([] { convert("--num-layers 8 --pp 2 --num-layers-per-virtual-pipeline-stage 0"); }),
             ContainsSubstring("a model chunk holds at least one block"));
  CHECK_THROWS_AS(convert("--pp 2 --num-layers-per-virtual-pipeline-stage 1"), CLI::RequiresError);
  CHECK_THROWS_AS(convert("--num-layers 8 --pp 2 --virtual-stages 2 --num-layers-per-virtual-pipeline-stage 1"),
                  CLI::ExcludesError);

  // Grouped-query attention: Megatron's default is one group; the groups without the flag are
  // refused (Megatron would ignore them), the flag beside --num-kv-heads too.
  CHECK(convert("--group-query-attention --num-query-groups 4").num_kv_heads == 4);
  CHECK(convert("--group-query-attention").num_kv_heads == 1);
  CHECK(convert("--num-kv-heads 2").num_kv_heads == 2);
  CHECK_THROWS_AS(convert("--num-query-groups 4"), CLI::RequiresError);
  CHECK_THROWS_AS(convert("--group-query-attention --num-kv-heads 2"), CLI::ExcludesError);
}

TEST_CASE("Megatron names: --bf16 and --fp16 set --precision, and refuse to disagree", "[cli]") {
  const auto precision_of = [](const std::string& args) {
    CLI::App app;
    std::string device, precision;
    cli::add_device_options(app, device, precision);
    app.parse(args);
    return precision;
  };
  CHECK(precision_of("--bf16") == "bf16");
  CHECK(precision_of("--fp16") == "fp16");
  CHECK(precision_of("--fp16 --precision fp16") == "fp16");
  CHECK(precision_of("").empty());
  CHECK_THROWS_WITH(precision_of("--bf16 --fp16"), "--bf16: conflicts with --fp16");
  CHECK_THROWS_WITH(precision_of("--precision fp32 --bf16"), "--bf16: conflicts with --precision fp32");
}
