// The option groups several tools share, each declared once so that an option has one name, one
// meaning and one help text in every tool (Megatron's arguments.py groups its arguments the same
// way: checkpointing, tokenizer, mixed precision, distributed). A group binds fields the tool
// already has (TrainOptions, GenerateOptions, or a main's locals), so the values land where the
// library reads them; it validates nothing itself: the library does, with the same messages in
// every tool (device and precision: resolve_device_precision in core/device.hpp). The one check
// here, whole_number(), is of the option text itself, which the library never sees.
//
// CONTEXT, where a group takes one, leads its help texts with when the options apply ("--to hf",
// "embed, query"), as the tools' other mode-bound options are worded. In --help each group's
// options are listed under its own heading.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace meg::cli {

// A count or size option: a whole number from MIN to MAX, refused with one line naming the
// option otherwise. CLI11 reads "-5" into an unsigned option as 2^64 - 5 and into a signed one as
// -5, so every count a user gives goes through this; sizes that depend on the data (whether they
// fit in memory) are the library's to check.
CLI::Validator whole_number(uint64_t min = 0, uint64_t max = UINT64_MAX);

// --load DIR: the checkpoint to read (an iter_* directory, or a directory of them: its latest).
// ROLE, when given, says what the tool makes of it ("the embedder").
CLI::Option* add_load_option(CLI::App& app, std::string& load, const std::string& role = "");

// -t/--tokenizer FILE and --merges FILE (Megatron: --tokenizer-model or --vocab-file, and
// --merge-file). WITHOUT says what the tool does when --tokenizer is not given ("" when it needs
// one).
struct TokenizerOptions {
  CLI::Option* tokenizer = nullptr;
  CLI::Option* merges = nullptr;
};
TokenizerOptions add_tokenizer_options(CLI::App& app, std::string& tokenizer, std::string& merges,
                                       const std::string& without = "", const std::string& context = "");
// Megatron-LM's --tokenizer-type TYPE (declared with the options above) against the files given:
// InputError when TYPE is not a kind meg reads or not the kind of TOKENIZER (and MERGES).
void check_tokenizer_type(const std::string& type, const std::string& tokenizer, const std::string& merges);

// --device cpu|cuda and --precision bf16|fp16|fp32, left empty when not given; Megatron's flags
// --bf16 and --fp16 set the precision too (refused together, or with another --precision).
void add_device_options(CLI::App& app, std::string& device, std::string& precision, const std::string& context = "");

// The parallel layout (parallel/layout.hpp): --tp, --pp, --dp, --cp, --ep, --virtual-stages,
// --use-distributed-optimizer and --sequence-parallel, each bound to its field; a tool offers the
// options whose field it gives. The sizes take Megatron's names too (core/megatron_names.hpp).
struct ParallelLayoutFields {
  int* tp = nullptr;
  int* pp = nullptr;
  std::optional<int>* dp = nullptr;
  std::string dp_default = {};  // what --dp is when not given
  int* cp = nullptr;
  int* ep = nullptr;
  int* virtual_stages = nullptr;
  bool* distributed_optimizer = nullptr;
  bool* sequence_parallel = nullptr;
};
// The options added, in the order above.
std::vector<CLI::Option*> add_parallel_layout_options(CLI::App& app, const ParallelLayoutFields& fields);

}  // namespace meg::cli
