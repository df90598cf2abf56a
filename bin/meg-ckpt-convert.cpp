// meg-ckpt-convert: a native checkpoint rewritten in another parallel layout (tensor, pipeline,
// data parallelism, virtual stages, the distributed optimizer's shards), model and optimizer
// state, so that training resumes on another number of ranks; or moved to and from a Hugging Face
// model directory (--to hf, --from hf).
#include <map>
#include <optional>
#include <vector>

#include "convert/hf_checkpoint.hpp"
#include "convert/hf_config.hpp"
#include "convert/reshard.hpp"
#include "core/cli.hpp"
#include "core/cli_groups.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace {

void log_written(const std::string& path, const std::string& what, const std::string& source,
                 const std::string& from, uint64_t bytes, double seconds) {
  meg::log::info("wrote {} ({}) from {} ({}): {:.2f} GB in {:.2f} s, {:.2f} GB/s", path, what, source, from,
                 bytes / 1e9, seconds, seconds > 0 ? bytes / 1e9 / seconds : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Rewrite a meg checkpoint in another parallel layout (model and optimizer state), or move it to and "
               "from a Hugging Face model directory.",
               "meg-ckpt-convert"};
  std::string load, save, to, tokenizer, merges;
  meg::SafetensorsDtype dtype = meg::SafetensorsDtype::kF32;
  std::vector<std::string> from;
  uint64_t max_shard_bytes = meg::HfExportOptions{}.max_shard_bytes;
  int tp = 1, pp = 1, cp = 1, ep = 1, virtual_stages = 1;
  std::optional<int> dp;
  bool distributed_optimizer = false, verify = false;

  meg::cli::add_load_option(app, load);
  app.add_option("--save", save,
                 "The directory to write into: the checkpoint of the same iteration (iteration 0 with --from hf), "
                 "or with --to hf the Hugging Face directory (absent or empty)");
  app.add_option("--to", to, "Write this format instead of a native checkpoint: hf (GPT2LMHeadModel or "
                             "LlamaForCausalLM, parameters only)");
  app.add_option("--from", from, "Read a Hugging Face model directory instead of --load: --from hf DIR")
      ->expected(2)
      ->type_name("hf DIR");
  const std::map<std::string, meg::SafetensorsDtype> dtypes = {
      {"fp32", meg::SafetensorsDtype::kF32}, {"bf16", meg::SafetensorsDtype::kBF16}, {"fp16", meg::SafetensorsDtype::kF16}};
  auto* dtype_option = app.add_option("--dtype", dtype,
                                      "--to hf: the stored dtype, fp32 (default: the checkpoint's values exactly), "
                                      "bf16 or fp16 (half the size, rounded to nearest even)")
                           ->transform(CLI::CheckedTransformer(dtypes).description(""))
                           ->type_name("fp32|bf16|fp16");
  const auto tokenizer_options = meg::cli::add_tokenizer_options(
      app, tokenizer, merges, "copied into it (default: the one the checkpoint keeps)", "--to hf");
  auto* shard_option = app.add_option("--max-shard-size", max_shard_bytes,
                                      "--to hf: bytes per safetensors file before the model is split into shards "
                                      "with an index (as save_pretrained)")
                           ->capture_default_str()
                           ->check(CLI::PositiveNumber);
  const auto layout_options = meg::cli::add_parallel_layout_options(
      app, {.tp = &tp,
            .pp = &pp,
            .dp = &dp,
            .dp_default = "1; it matters with --use-distributed-optimizer",
            .cp = &cp,
            .ep = &ep,
            .virtual_stages = &virtual_stages,
            .distributed_optimizer = &distributed_optimizer});
  app.add_flag("--verify", verify, "Read the output back and compare every tensor with the input before committing");
  meg::cli::add_common_options(app, "meg-ckpt-convert --load runs/64gpu --save runs/8gpu --tp 2 --pp 2 --dp 2 --use-distributed-optimizer\n"
                                    "  meg-ckpt-convert --load runs/a --to hf --dtype bf16 --save gpt2-hf\n"
                                    "  meg-ckpt-convert --from hf gpt2-hf --save runs/b --tp 2");

  return meg::cli::run_tool(app, argc, argv, [&] {
    if (!to.empty() && to != "hf") meg::input_error("--to {}: unknown format (only hf)", to);
    if (!from.empty() && from[0] != "hf") meg::input_error("--from {}: unknown format (only hf DIR)", from[0]);
    if (!to.empty() && !from.empty()) meg::input_error("--to and --from together: one side is always native");
    if (to.empty())
      for (const CLI::Option* o : {dtype_option, tokenizer_options.tokenizer, tokenizer_options.merges, shard_option})
        if (o->count() > 0) meg::input_error("{} applies to --to hf only", o->get_name());

    if (!to.empty()) {
      for (const CLI::Option* o : layout_options)
        if (o->count() > 0) meg::input_error("{}: a Hugging Face directory has no parallel layout", o->get_name());
      const meg::HfExportOptions hf{dtype, max_shard_bytes, tokenizer, merges, {}};
      const auto result = meg::export_checkpoint_to_hf({load, save, hf, verify});
      log_written(result.path, "Hugging Face, " + meg::torch_dtype_name(hf.dtype), result.source,
                  meg::to_string(result.config.family), result.bytes, result.seconds);
      return 0;
    }

    if (cp != 1) meg::input_error("--cp {}: context parallelism is not supported; only --cp 1", cp);
    if (ep != 1) meg::input_error("--ep {}: expert parallelism is not supported; only --ep 1", ep);
    const auto layout = meg::NativeLayout::of(tp, pp, dp.value_or(1), virtual_stages, distributed_optimizer);
    if (!from.empty()) {
      if (!load.empty()) meg::input_error("--load and --from together: --from hf DIR is the input");
      const auto result = meg::import_hf_checkpoint({from[1], save, layout, verify});
      log_written(result.path, layout.describe(), result.source, "Hugging Face", result.bytes, result.seconds);
      return 0;
    }
    const auto result = meg::reshard_checkpoint({load, save, layout, verify});
    log_written(result.path, layout.describe(), result.source, result.from.describe(), result.bytes, result.seconds);
    return 0;
  });
}
