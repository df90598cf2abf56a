#include "core/cli_groups.hpp"

#include <cctype>
#include <charconv>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/megatron_names.hpp"

namespace meg::cli {
namespace {

// TEXT led by CONTEXT ("--to hf: the tokenizer ..."), or as it is without one.
std::string in_context(const std::string& context, std::string text) {
  if (context.empty()) return text;
  text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return context + ": " + text;
}

// TEXT, then the tool's NOTE after a semicolon when it has one.
std::string with_note(std::string text, const std::string& note) {
  return note.empty() ? text : text + "; " + note;
}

}  // namespace

CLI::Validator whole_number(uint64_t min, uint64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        if (!text.empty() && text[0] == '-') return fmt::format("{} is negative: a count or size is expected", text);
        uint64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [at, ec] = std::from_chars(text.data(), end, v);
        if (ec == std::errc::result_out_of_range) return fmt::format("{} is too large", text);
        if (ec != std::errc() || at != end) return fmt::format("'{}' is not a whole number", text);
        if (v < min) return fmt::format("{} is below the least allowed, {}", v, min);
        if (v > max) return fmt::format("{} is above the most allowed, {}", v, max);
        return {};
      },
      "");
}

CLI::Option* add_load_option(CLI::App& app, std::string& load, const std::string& role) {
  return app
      .add_option("--load", load,
                  with_note("The checkpoint: an iter_* directory, or a directory of them (its latest)", role))
      ->type_name("DIR")
      ->group("Checkpoint");
}

TokenizerOptions add_tokenizer_options(CLI::App& app, std::string& tokenizer, std::string& merges,
                                       const std::string& note, const std::string& context) {
  TokenizerOptions added;
  added.tokenizer =
      app.add_option(with_megatron_names("-t,--tokenizer"), tokenizer,
                     in_context(context, with_note("The tokenizer: a SentencePiece .model, a GPT-2 vocab.json "
                                                   "(with --merges), a Hugging Face tokenizer.json, or a model "
                                                   "directory holding one",
                                                   note)))
          ->type_name("FILE")
          ->group("Tokenizer");
  added.merges = app.add_option(with_megatron_names("--merges"), merges,
                                in_context(context, "The GPT-2 tokenizer's merges.txt, with --tokenizer vocab.json"))
                     ->type_name("FILE")
                     ->group("Tokenizer");
  // Megatron-LM's --tokenizer-type names the kind that --tokenizer's file already is: a check, run
  // once the files are parsed (options' callbacks run in the order they are declared).
  app.add_option_function<std::string>(
         "--tokenizer-type",
         [&tokenizer, &merges](const std::string& type) { check_tokenizer_type(type, tokenizer, merges); },
         "Megatron-LM's name of the tokenizer's kind, checked against --tokenizer: GPT2BPETokenizer, "
         "SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer or HuggingFaceTokenizer")
      ->type_name("TYPE")
      ->group("Tokenizer");
  return added;
}

void check_tokenizer_type(const std::string& type, const std::string& tokenizer, const std::string& merges) {
  const bool sentencepiece = type == "SentencePieceTokenizer" || type == "GPTSentencePieceTokenizer" ||
                             type == "Llama2Tokenizer";
  if (type != "GPT2BPETokenizer" && type != "HuggingFaceTokenizer" && !sentencepiece)
    input_error("--tokenizer-type {}: not a kind meg reads (GPT2BPETokenizer, SentencePieceTokenizer, "
                "GPTSentencePieceTokenizer, Llama2Tokenizer, HuggingFaceTokenizer)",
                type);
  if (tokenizer.empty()) return;  // the checkpoint's, which is what it is
  std::error_code ec;
  const bool hf = merges.empty() && (tokenizer.ends_with(".json") || std::filesystem::is_directory(tokenizer, ec));
  const char* is = !merges.empty() ? "a GPT-2 vocab.json with its merges" : hf ? "a Hugging Face tokenizer.json"
                                                                             : "a SentencePiece model";
  if ((type == "GPT2BPETokenizer" && merges.empty()) || (type == "HuggingFaceTokenizer" && !hf) ||
      (sentencepiece && (hf || !merges.empty())))
    input_error("--tokenizer-type {}: --tokenizer {} is {}", type, tokenizer, is);
}

void add_device_options(CLI::App& app, std::string& device, std::string& precision, const std::string& context) {
  const char* heading = "Device and precision";
  app.add_option("--device", device, in_context(context, "cpu or cuda (default: cuda when a GPU is present)"))
      ->type_name("cpu|cuda")
      ->group(heading);
  app.add_option("--precision", precision,
                 in_context(context, "bf16 (the default on cuda), fp16 or fp32; the CPU computes in fp32 only"))
      ->type_name("bf16|fp16|fp32")
      ->group(heading);
  // Megatron's precision flags. A flag's callback runs once --precision holds what the command
  // line or the settings file gave it (CLI11 runs them in the order declared), so a flag that
  // disagrees with it is seen here.
  for (const std::string value : {"bf16", "fp16"}) {
    const std::string flag = "--" + value, other = value == "bf16" ? "--fp16" : "--bf16";
    app.add_flag_callback(
           flag,
           [&app, &precision, value, flag, other] {
             if (app.count(other) > 0) throw CLI::ValidationError(flag, "conflicts with " + other);
             if (!precision.empty() && precision != value)
               throw CLI::ValidationError(flag, "conflicts with --precision " + precision);
             precision = value;
           },
           in_context(context, "Same as --precision " + value + " (Megatron-LM's flag)"))
        ->group(heading);
  }
}

std::vector<CLI::Option*> add_parallel_layout_options(CLI::App& app, const ParallelLayoutFields& f) {
  std::vector<CLI::Option*> added;
  const auto size = [&](const char* name, int* field, const std::string& help) {
    if (field != nullptr)
      added.push_back(app.add_option(with_megatron_names(name), *field, help)->capture_default_str());
  };
  const auto flag = [&](const char* name, bool* field, const std::string& help) {
    if (field != nullptr) added.push_back(app.add_flag(name, *field, help));
  };
  size("--tp", f.tp, "Tensor-parallel size: the ranks each layer's weights are split over");
  size("--pp", f.pp,
       "Pipeline-parallel size: the stages the blocks are split over, trained by the 1F1B schedule "
       "(interleaved with --virtual-stages)");
  if (f.dp != nullptr) added.push_back(app.add_option("--dp", *f.dp, "Data-parallel size (default: " + f.dp_default + ")"));
  size("--cp", f.cp, "Context-parallel size (only 1: not implemented yet)");
  size("--ep", f.ep, "Expert-parallel size (only 1: not implemented yet)");
  size("--virtual-stages", f.virtual_stages, "Model chunks per pipeline rank: the interleaved schedule (with --pp)");
  flag("--use-distributed-optimizer", f.distributed_optimizer,
       "Shard the optimizer state (the AdamW moments, and the fp32 master weights of bf16/fp16 training on "
       "GPUs) over the data-parallel ranks");
  flag("--sequence-parallel", f.sequence_parallel,
       "Split the residual stream by rows over the tensor-parallel ranks (with --tp)");
  for (CLI::Option* o : added) o->group("Parallel layout");
  return added;
}

}  // namespace meg::cli
