// run_generate: the modes of meg-generate over the library's generator.
#include "infer/generate_tool.hpp"

#include <chrono>
#include <memory>

#include "core/byte_stream.hpp"
#include "core/device.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "core/stdout.hpp"
#include "infer/checkpoint_model.hpp"
#include "infer/inference_model.hpp"
#include "infer/outputs.hpp"
#include "parallel/comm.hpp"

namespace meg {

namespace {

// Counts finished prompts for the progress line.
class CountingSink final : public CompletionSink {
 public:
  CountingSink(CompletionSink& inner, Progress& progress) : inner_(inner), progress_(progress) {}
  void text(size_t id, std::string_view text) override { inner_.text(id, text); }
  void done(size_t id, Completion completion) override {
    inner_.done(id, std::move(completion));
    progress_.add(1);
  }

 private:
  CompletionSink& inner_;
  Progress& progress_;
};

// The options that make sense only with others, and the device's defaults.
void resolve(GenerateOptions& o) {
  const bool jsonl = !o.prompts.empty();
  if (jsonl && o.prompt) input_error("--prompt and --prompts together: give one");
  if (!o.output.empty() && !jsonl && !o.json) input_error("--output applies to JSON results (--prompts or --json)");
  if (o.echo && (jsonl || o.json)) input_error("--echo applies to text output; JSON results hold the prompt");
  resolve_device_precision(o.device, o.precision);
  if (!o.batch) o.batch = o.device == "cuda" ? 32 : 1;
  o.settings.validate("command line");
}

// The job's tensor-parallel group: meg-generate runs one, of all the job's processes (replicas of
// the model generating for different prompts are not implemented). Ranks other than 0 report
// only their errors.
Comm& tensor_parallel_group(int tp) {
  World& world = World::init();
  if (tp < 1) input_error("--tp {}: must be at least 1", tp);
  if (tp != world.size())
    input_error("--tp {}: meg-generate runs one process per tensor-parallel rank (mpirun -np {}), this job has {}",
                tp, tp, world.size());
  ParallelLayout layout;
  layout.tp = tp;
  world.set_layout(layout);
  if (world.rank() != 0) {
    log::set_errors_only(true);
    log::set_program(fmt::format("{} (rank {})", log::program(), world.rank()));
  }
  return world.group(ParallelDim::tp);
}

// Rank 0's part: reads the prompts, hands the requests to every rank of TP, writes the results.
GenerationStats answer(const GenerateOptions& o, Generator& generator, const Tokenizer& tokenizer, int max_length,
                       Comm& tp) {
  const auto run = [&](RequestSource& source, CompletionSink& sink) {
    SharedRequestSource shared(&source, tp);
    return generator.run(shared, sink);
  };

  // Where the results go: JSON lines into --output (renamed into place when all is written) or
  // onto stdout, or text onto stdout.
  std::unique_ptr<ByteWriter> file;
  if (!o.output.empty() && o.output != "-") file = std::make_unique<ByteWriter>(o.output);
  std::unique_ptr<PromptOutput> out;
  if (!o.prompts.empty() || o.json)
    out = std::make_unique<JsonlOutput>([&file](std::string_view line) {
      if (file)
        file->write(line.data(), line.size());
      else
        write_stdout(line, true);
    });
  else
    out = std::make_unique<TextOutput>(write_stdout, o.echo);

  GenerationStats stats;
  if (!o.prompts.empty()) {
    PromptFile prompts = read_prompt_file(o.prompts, o.settings, tokenizer, max_length);
    for (size_t i = 0; i < prompts.texts.size(); ++i) out->prompt(i, prompts.texts[i]);
    Progress progress("answered", prompts.requests.size(), "prompts");
    CountingSink counting(*out, progress);
    ListSource source(std::move(prompts.requests));
    stats = run(source, counting);
    progress.finish();
  } else if (o.prompt) {
    std::vector<GenerationRequest> one;
    one.push_back(make_request(*o.prompt, o.settings, tokenizer, max_length, "--prompt"));
    out->prompt(0, *o.prompt);
    ListSource source(std::move(one));
    stats = run(source, *out);
  } else {
    StdinPromptSource source(o.settings, tokenizer, max_length,
                             [&out](size_t id, const std::string& text) { out->prompt(id, text); });
    stats = run(source, *out);
    // The other ranks are done; this error ends the job (meg-generate's failure handler).
    if (source.error()) throw InputError(*source.error());
  }
  if (file) file->commit();
  return stats;
}

// The other ranks' part: the same generation over the requests rank 0 hands out, whose results
// rank 0 writes.
GenerationStats follow(Generator& generator, Comm& tp) {
  struct Discard final : CompletionSink {
    void text(size_t, std::string_view) override {}
    void done(size_t, Completion) override {}
  } discard;
  SharedRequestSource source(nullptr, tp);
  return generator.run(source, discard);
}

}  // namespace

int run_generate(GenerateOptions o) {
  resolve(o);
  Comm& tp = tensor_parallel_group(o.tp);
  std::unique_ptr<InferenceModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  {
    // Each rank reads only its shard; the host copy is freed below, once the model has its own.
    const CheckpointModel checkpoint = load_checkpoint_model(o.load, tp.size(), tp.rank());
    tokenizer = load_model_tokenizer(checkpoint, o.tokenizer, o.merges);
    model = make_inference_model(checkpoint, o.device, parse_precision(o.precision), *o.batch, o.max_length, &tp);
    const ModelConfig& c = checkpoint.config;
    log::info("{}: {} {} x {} ({:.1f} M parameters{}), {}; {} {}, {} sequence(s) of {} tokens{}", checkpoint.path,
              to_string(c.family), c.num_layers, c.hidden_size, c.num_parameters() / 1e6,
              c.windowed() ? fmt::format(", window-size {},0", c.window_size) : "", tokenizer->describe(),
              o.device, o.device == "cuda" ? o.precision : "fp32", model->slots(), model->max_length(),
              o.tp > 1 ? fmt::format(", split over {} tensor-parallel ranks", o.tp) : "");
  }
  Generator generator(*model, *tokenizer);

  const auto start = std::chrono::steady_clock::now();
  const GenerationStats stats =
      tp.rank() == 0 ? answer(o, generator, *tokenizer, model->max_length(), tp) : follow(generator, tp);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log::info("{} prompt(s), {} prompt tokens, {} tokens generated in {:.2f} s, {:.1f} tokens/s", stats.requests,
            stats.prompt_tokens, stats.generated_tokens, seconds, stats.generated_tokens / seconds);
  return 0;
}

}  // namespace meg
