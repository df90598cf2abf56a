// Megatron-LM's spellings of meg's options (megatron/training/arguments.py), so that a Megatron
// launch script's options carry over to meg-pretrain and the other tools.
//
// Most are renames: the same value under another name ("--train-iters" is "--iters"). They live
// in one table (megatron_names.cpp) and an option takes them where it is declared:
//   app.add_option(cli::with_megatron_names("--iters"), o.iters, ...)   // "--iters,--train-iters"
// so in --help and in a --config file a Megatron name is one more name of meg's option.
//
// A few are conversions, declared by add_megatron_conversions and applied by
// resolve_megatron_conversions once every option is parsed (a conversion reads other options,
// which a settings file and the command line fill in no fixed order):
//   --num-layers-per-virtual-pipeline-stage N   --virtual-stages = num-layers / pp / N
//   --group-query-attention [--num-query-groups G]   --num-kv-heads G (Megatron's default G is 1;
//                                               Megatron ignores --num-query-groups without the
//                                               flag, meg refuses it)
// The precision flags --bf16 and --fp16 belong to the device options (cli_groups.hpp), and
// --max-position-embeddings is a check of the model (model/config.hpp, ModelOverrides).
// man/meg-pretrain.1 lists them all under MEGATRON-LM OPTION NAMES.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace meg::cli {

// NAMES, a CLI11 name list of one meg option ("-t,--tokenizer"), with the table's Megatron names
// of its long name appended ("-t,--tokenizer,--tokenizer-model,--vocab-file"); NAMES as given
// when Megatron has no other name for it.
std::string with_megatron_names(const std::string& names);

// What Megatron's converted options were given as; resolve_megatron_conversions turns them into
// meg's.
struct MegatronConversions {
  std::optional<int64_t> layers_per_virtual_stage;  // --num-layers-per-virtual-pipeline-stage
  bool group_query_attention = false;               // --group-query-attention
  std::optional<int64_t> num_query_groups;          // --num-query-groups
};

// Declares them, refusing together what Megatron refuses together: --num-query-groups without
// --group-query-attention, the flag with --num-kv-heads, the layers per virtual stage with
// --virtual-stages or without --num-layers. Call after those options are declared.
void add_megatron_conversions(CLI::App& app, MegatronConversions& given);

// The meg fields they set: virtual_stages from NUM_LAYERS and PP (InputError, one line, when the
// layers do not divide), num_kv_heads from the query groups. Fields without a conversion given
// stay as they are.
void resolve_megatron_conversions(const MegatronConversions& given, std::optional<int64_t> num_layers, int pp,
                                  int& virtual_stages, std::optional<int64_t>& num_kv_heads);

}  // namespace meg::cli
