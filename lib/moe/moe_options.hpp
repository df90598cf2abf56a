// The command-line options of the MoE settings (moe/moe_config.hpp), Megatron's --num-experts and
// --moe-*: each given option lands in a JSON object under its key, which ModelOverrides applies to
// the model config (so the same reader checks a file's keys and the options).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace meg::cli {

void add_moe_options(CLI::App& app, nlohmann::ordered_json& given);

}  // namespace meg::cli
