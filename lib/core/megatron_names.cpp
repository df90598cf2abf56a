#include "core/megatron_names.hpp"

#include <array>
#include <string_view>

#include "core/error.hpp"

namespace meg::cli {
namespace {

struct Rename {
  std::string_view meg;       // meg's long name
  std::string_view megatron;  // Megatron's names of the same option, CLI11's comma list
};

// The renames: the same value and meaning under Megatron's name. Where Megatron's default
// differs, meg's holds (man/meg-pretrain.1 lists them with notes).
constexpr std::array<Rename, 16> kRenames{{
    {"--iters", "--train-iters"},
    {"--micro-batch", "--micro-batch-size"},
    {"--global-batch", "--global-batch-size"},
    {"--tp", "--tensor-model-parallel-size"},
    {"--pp", "--pipeline-model-parallel-size"},
    // The first is Megatron's older name, the second its current one.
    {"--virtual-stages", "--virtual-pipeline-model-parallel-size,--num-virtual-stages-per-pipeline-rank"},
    {"--cp", "--context-parallel-size"},
    {"--ep", "--expert-model-parallel-size"},
    {"--num-heads", "--num-attention-heads"},
    {"--lr-decay", "--lr-decay-style"},
    {"--warmup-iters", "--lr-warmup-iters"},
    {"--tokenizer", "--tokenizer-model,--vocab-file"},
    {"--merges", "--merge-file"},
    {"--init-std", "--init-method-std"},
    {"--recompute", "--recompute-granularity"},
    {"--exit-after-minutes", "--exit-duration-in-mins"},
}};

}  // namespace

std::string with_megatron_names(const std::string& names) {
  const auto at = names.find("--");
  const std::string_view long_name = std::string_view(names).substr(at == std::string::npos ? names.size() : at);
  for (const Rename& r : kRenames)
    if (long_name.substr(0, long_name.find(',')) == r.meg) return names + "," + std::string(r.megatron);
  return names;
}

void add_megatron_conversions(CLI::App& app, MegatronConversions& given) {
  auto* per_stage =
      app.add_option("--num-layers-per-virtual-pipeline-stage", given.layers_per_virtual_stage,
                     "Megatron's way to give --virtual-stages: blocks per model chunk, so --virtual-stages is "
                     "--num-layers / --pp / N")
          ->type_name("N")
          ->needs("--num-layers")
          ->excludes("--virtual-stages");
  auto* groups = app.add_option("--num-query-groups", given.num_query_groups,
                                "Megatron's --num-kv-heads, with --group-query-attention");
  auto* gqa = app.add_flag("--group-query-attention", given.group_query_attention,
                           "Megatron's grouped-query attention: --num-kv-heads is --num-query-groups (default 1)")
                  ->excludes("--num-kv-heads");
  groups->needs(gqa);
  for (CLI::Option* o : {per_stage, groups, gqa}) o->group("Megatron-LM conversions");
}

void resolve_megatron_conversions(const MegatronConversions& given, std::optional<int64_t> num_layers, int pp,
                                  int& virtual_stages, std::optional<int64_t>& num_kv_heads) {
  if (given.group_query_attention) num_kv_heads = given.num_query_groups.value_or(1);
  if (!given.layers_per_virtual_stage) return;
  const int64_t per_chunk = *given.layers_per_virtual_stage, layers = num_layers.value_or(0);
  if (layers < 1 || pp < 1) return;  // the model config and the layout refuse these, naming them
  if (per_chunk < 1)
    input_error("--num-layers-per-virtual-pipeline-stage {}: a model chunk holds at least one block", per_chunk);
  if (layers % pp != 0)
    input_error("--num-layers-per-virtual-pipeline-stage {}: --num-layers {} does not divide over --pp {} stages",
                per_chunk, layers, pp);
  if ((layers / pp) % per_chunk != 0)
    input_error("--num-layers-per-virtual-pipeline-stage {}: the {} blocks of each of the --pp {} stages do not "
                "divide into chunks of {}",
                per_chunk, layers / pp, pp, per_chunk);
  virtual_stages = static_cast<int>(layers / pp / per_chunk);
}

}  // namespace meg::cli
