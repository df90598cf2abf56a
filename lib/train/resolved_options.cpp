#include "train/resolved_options.hpp"

#include <filesystem>
#include <functional>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ckpt/checkpoint.hpp"
#include "ckpt/checkpoint_tokenizer.hpp"
#include "core/device.hpp"
#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/log.hpp"
#include "data/blend.hpp"
#include "model/pipeline.hpp"
#include "model/tensor_parallel.hpp"

namespace meg {
namespace fs = std::filesystem;
namespace {

// How a resumed run takes an option from its checkpoint's record when the user does not give it.
enum class Taken {
  never,      // this job's own: outputs, controls, fine-tuning flags; the model is the record's
  alone,      // on its own
  // With the other options of its group, unless one of them is given:
  data,    // the blend
  device,  // the device and what depends on it (precision, recomputation)
  layout,  // the parallel layout (and only when it fits the job)
};

// One option of the record: its key (the long option name), how it is taken, and its value.
struct OptionField {
  const char* key;
  Taken taken;
  std::function<nlohmann::ordered_json(const TrainOptions&)> get;
  std::function<void(TrainOptions&, const nlohmann::json&)> set;
};

// ACCESS(o) is the field of a TrainOptions (const or not) that KEY holds.
template <typename Access>
OptionField field(const char* key, Taken taken, Access access) {
  return {key, taken, [access](const TrainOptions& o) { return nlohmann::ordered_json(access(o)); },
          [access](TrainOptions& o, const nlohmann::json& j) {
            auto& f = access(o);
            f = j.get<std::decay_t<decltype(f)>>();
          }};
}
template <typename T>
OptionField field(const char* key, Taken taken, T TrainOptions::*member) {
  return field(key, taken, [member](auto& o) -> auto& { return o.*member; });
}

// PATH made absolute (empty stays empty): the checkpoints record the files the run read, which a
// resumed run, meg-eval and meg-generate then open from wherever they run.
std::string absolute_path(const std::string& path) {
  return path.empty() ? path : fs::absolute(path).lexically_normal().string();
}
OptionField path_field(const char* key, Taken taken, std::string TrainOptions::*member) {
  OptionField f = field(key, taken, member);
  f.get = [member](const TrainOptions& o) { return nlohmann::ordered_json(absolute_path(o.*member)); };
  return f;
}

// Every option, in the order of the record and of the start-up settings.
const std::vector<OptionField>& option_fields() {
  using T = TrainOptions;
  static const std::vector<OptionField> fields = [] {
    std::vector<OptionField> f = {
        field("model", Taken::never, &T::model),
        field("model-config", Taken::never, &T::model_config),
        path_field("data", Taken::data, &T::data),
        field("data-path", Taken::data, &T::data_path),
        field("split", Taken::data, &T::split),
        path_field("data-cache-path", Taken::data, &T::data_cache_path),
        field("override-data", Taken::never, &T::override_data),
        // The tokenizer comes from the checkpoint's own copy (ckpt/checkpoint_tokenizer.hpp).
        path_field("tokenizer", Taken::never, &T::tokenizer),
        path_field("merges", Taken::never, &T::merges),
        field("iters", Taken::alone, &T::iters),
        field("micro-batch", Taken::alone, &T::micro_batch),
        field("global-batch", Taken::alone, &T::global_batch),
        field("lr", Taken::alone, [](auto& o) -> auto& { return o.lr.lr; }),
        field("min-lr", Taken::alone, [](auto& o) -> auto& { return o.lr.min_lr; }),
        field("warmup-iters", Taken::alone, [](auto& o) -> auto& { return o.lr.warmup_iters; }),
        field("lr-decay-iters", Taken::alone, [](auto& o) -> auto& { return o.lr.decay_iters; }),
        {"lr-decay", Taken::alone,
         [](const T& o) { return nlohmann::ordered_json(std::string(lr_decay_style_name(o.lr.style))); },
         [](T& o, const nlohmann::json& j) { o.lr.style = parse_lr_decay_style(j.get<std::string>()); }},
        field("weight-decay", Taken::alone, [](auto& o) -> auto& { return o.adam.weight_decay; }),
        field("clip-grad", Taken::alone, &T::clip_grad),
        field("adam-beta1", Taken::alone, [](auto& o) -> auto& { return o.adam.beta1; }),
        field("adam-beta2", Taken::alone, [](auto& o) -> auto& { return o.adam.beta2; }),
        field("adam-eps", Taken::alone, [](auto& o) -> auto& { return o.adam.eps; }),
        field("seed", Taken::alone, &T::seed),  // not with --no-load-rng
        field("eval-interval", Taken::alone, &T::eval_interval),
        field("eval-iters", Taken::alone, &T::eval_iters),
        field("log-interval", Taken::alone, &T::log_interval),
        field("save", Taken::never, &T::save),
        field("save-interval", Taken::alone, &T::save_interval),
        field("keep", Taken::alone, &T::keep),
        field("load", Taken::never, &T::load),
        field("finetune", Taken::never, &T::finetune),
        field("pretrained-checkpoint", Taken::never, &T::pretrained_checkpoint),
        field("no-load-optim", Taken::never, &T::no_load_optim),
        field("no-load-rng", Taken::never, &T::no_load_rng),
        field("overwrite", Taken::never, &T::overwrite),
        field("exit-on-missing-checkpoint", Taken::never, &T::exit_on_missing_checkpoint),
        field("use-checkpoint-opt-param-scheduler", Taken::never, &T::use_checkpoint_opt_param_scheduler),
        field("override-opt-param-scheduler", Taken::never, &T::override_opt_param_scheduler),
        field("metrics", Taken::never, &T::metrics),
        field("tensorboard-dir", Taken::never, &T::tensorboard_dir),
        field("exit-after-minutes", Taken::never, &T::exit_after_minutes),
        field("exit-interval", Taken::never, &T::exit_interval),
        field("device", Taken::device, &T::device),
        field("precision", Taken::device, &T::precision),
        field("recompute", Taken::device, &T::recompute),
        field("tp", Taken::layout, &T::tp),
        field("pp", Taken::layout, &T::pp),
        {"dp", Taken::layout,
         [](const T& o) { return o.dp ? nlohmann::ordered_json(*o.dp) : nlohmann::ordered_json(nullptr); },
         [](T& o, const nlohmann::json& j) { o.dp = j.is_null() ? std::nullopt : std::optional<int>(j.get<int>()); }},
        field("cp", Taken::layout, &T::cp),
        field("ep", Taken::layout, &T::ep),
        field("use-distributed-optimizer", Taken::layout, &T::distributed_optimizer),
        field("sequence-parallel", Taken::layout, &T::sequence_parallel),
        field("virtual-stages", Taken::layout, &T::virtual_stages),
        field("time-communication", Taken::never, &T::time_communication),
    };
    return f;
  }();
  return fields;
}

// The options that change the numbers of a run: given other values than the checkpoint's, the
// resumed run no longer repeats an uninterrupted one.
constexpr const char* kRunNumbers[] = {"global-batch", "iters",     "lr",           "min-lr",     "warmup-iters",
                                       "lr-decay-iters", "lr-decay", "weight-decay", "clip-grad",  "adam-beta1",
                                       "adam-beta2",   "adam-eps",  "seed",         "precision"};

// The options of Megatron-LM's optimizer-parameter scheduler, which its two scheduler flags govern.
bool schedule_option(const std::string& key) {
  return key == "lr" || key == "min-lr" || key == "warmup-iters" || key == "lr-decay-iters" || key == "lr-decay" ||
         key == "weight-decay";
}

std::string layout_text(const TrainOptions& o) {
  return fmt::format("tp {}, pp {}, dp {}, cp {}, ep {}", o.tp, o.pp, o.dp ? std::to_string(*o.dp) : "auto", o.cp,
                     o.ep);
}

// Whether the layout of O fits a job of WORLD processes.
bool layout_fits(const TrainOptions& o, int world) {
  const int64_t model = int64_t{o.tp} * o.pp * o.cp * o.ep;
  if (o.tp < 1 || o.pp < 1 || o.cp < 1 || o.ep < 1 || world % model != 0) return false;
  return !o.dp || model * *o.dp == world;
}

// Takes the options of RECORDED (a checkpoint's) that O's user did not give, as the header of
// resolved_options.hpp says; returns the keys taken.
std::set<std::string> take_recorded(TrainOptions& o, const nlohmann::json& recorded, int world,
                                    const std::string& where) {
  const auto given_any = [&](Taken group) {
    for (const auto& f : option_fields())
      if (f.taken == group && o.given.count(f.key)) return true;
    return false;
  };
  const bool layout_given = given_any(Taken::layout);
  const TrainOptions before = o;
  std::set<std::string> taken;
  try {
    for (const auto& f : option_fields()) {
      if (!recorded.contains(f.key) || f.taken == Taken::never) continue;
      const bool given = o.given.count(f.key) > 0;
      if (given && o.use_checkpoint_opt_param_scheduler && schedule_option(f.key)) {
        const nlohmann::ordered_json was = f.get(o);
        f.set(o, recorded[f.key]);
        if (f.get(o) != was)
          log::info("{}: --use-checkpoint-opt-param-scheduler: --{} is the checkpoint's {}, not {}", where, f.key,
                    f.get(o).dump(), was.dump());
        taken.insert(f.key);
        continue;
      }
      if (given || (f.taken != Taken::alone && given_any(f.taken))) continue;
      if (std::string(f.key) == "seed" && o.no_load_rng) continue;
      f.set(o, recorded[f.key]);
      taken.insert(f.key);
    }
  } catch (const nlohmann::json::exception& e) {
    input_error("{}: malformed recorded options: {}", where, e.what());
  }
  if (!o.data_path.empty()) o.data.clear();  // the blend it names is built again (or found in the cache)
  if (!layout_given && !layout_fits(o, world)) {
    log::info("{}: the checkpoint's layout ({}) does not fit the job's {} process{}: {} instead", where,
              layout_text(o), world, world == 1 ? "" : "es", layout_text(before));
    for (const auto& f : option_fields())
      if (f.taken == Taken::layout) {
        f.set(o, f.get(before));
        taken.erase(f.key);
      }
  }
  return taken;
}

// Warns about each option of kRunNumbers whose value differs from the checkpoint's.
void warn_changed(const TrainOptions& o, const nlohmann::json& recorded, const std::string& where) {
  const nlohmann::json now = o.to_json();  // of the recorded type, so that the two compare
  for (const char* key : kRunNumbers)
    if (recorded.contains(key) && recorded[key] != now[key] && !(o.override_opt_param_scheduler && schedule_option(key)))
      log::warn("{}: --{} was {} and is now {}: the run will not repeat an uninterrupted one", where, key,
                recorded[key].dump(), now[key].dump());
}

// Whether --load LOAD names the checkpoint directory SAVE, or a checkpoint in it.
bool load_names(const std::string& load, const std::string& save) {
  if (load.empty()) return false;
  std::error_code ec;
  if (fs::equivalent(load, save, ec)) return true;
  fs::path l = fs::path(load).lexically_normal();
  if (l.filename().empty()) l = l.parent_path();
  const fs::path parent = l.has_parent_path() ? l.parent_path() : fs::path(".");
  return fs::exists(l / kCheckpointRecordFile, ec) && fs::equivalent(parent, save, ec);
}

// Refuses a --save directory that holds the checkpoints of another run (a second fine-tune would
// replace the first's): --load naming it continues that run there, and --overwrite is the user
// saying so.
void check_save_directory(const TrainOptions& o) {
  if (o.save.empty() || o.overwrite || !holds_checkpoint(o.save) || load_names(o.load, o.save)) return;
  const auto all = list_checkpoints(o.save);
  const auto name = [](const CheckpointEntry& e) { return fs::path(e.path).filename().string(); };
  const std::string what = all.empty()       ? "a `latest` file"
                           : all.size() == 1 ? name(all[0])
                                             : fmt::format("{} checkpoints, {} to {}", all.size(), name(all.front()),
                                                           name(all.back()));
  input_error("--save {}: holds the checkpoints of another run ({}); continue it with --load {}, or give --overwrite "
              "to save there anyway",
              o.save, what, o.save);
}

// The start: the checkpoint of --load, or of --pretrained-checkpoint, or none.
ResolvedRun find_start(const TrainOptions& o) {
  ResolvedRun run;
  std::string from;
  if (!o.load.empty() && holds_checkpoint(o.load)) {
    from = o.load;
    run.start = o.finetune ? RunStart::finetune : RunStart::resume;
  } else {
    // A --load that does not exist is a mistake, unless the job's first launch is to create it:
    // --save names it too, or --pretrained-checkpoint gives the weights until it does.
    const bool first_launch = !o.pretrained_checkpoint.empty() ||
                              (!o.save.empty() && fs::weakly_canonical(o.load) == fs::weakly_canonical(o.save));
    if (!o.load.empty() && !fs::is_directory(o.load) && !first_launch)
      input_error("--load {}: no such directory", o.load);
    const std::string none = o.load.empty() ? "no --load" : "no checkpoint in " + o.load;
    if (!o.pretrained_checkpoint.empty()) {
      if (!holds_checkpoint(o.pretrained_checkpoint))
        input_error("--pretrained-checkpoint {}: no checkpoint there", o.pretrained_checkpoint);
      from = o.pretrained_checkpoint;
      run.start = RunStart::finetune;
      log::info("{}: fine-tuning from --pretrained-checkpoint {}", none, o.pretrained_checkpoint);
    } else if (o.finetune) {
      input_error("--finetune: {} to fine-tune from (--pretrained-checkpoint DIR names one)", none);
    } else if (!o.load.empty()) {
      if (o.exit_on_missing_checkpoint)
        input_error("--load {}: no checkpoint there, and --exit-on-missing-checkpoint is given", o.load);
      log::info("no checkpoint in {}: starting from iteration 0", o.load);
    }
  }
  if (from.empty()) return run;
  if (run.start == RunStart::finetune && from == o.load && !o.save.empty() && load_names(o.load, o.save))
    input_error("--finetune with --load {} and --save {}: the fine-tune would replace the checkpoints it starts "
                "from, and the next launch start again; save elsewhere, or name them with --pretrained-checkpoint",
                o.load, o.save);
  run.checkpoint = checkpoint_to_load(from);
  run.checkpoint_json = read_json_file(run.record_path());
  if (!run.checkpoint_json.is_object() || !run.checkpoint_json.contains("record") ||
      !run.checkpoint_json["record"].is_object())
    input_error("{}: no record object", run.record_path());
  if (run.start == RunStart::resume) {
    try {
      run.iteration = run.record().at("iteration").get<int64_t>();
      run.consumed_samples = run.record().value("consumed_samples", int64_t{0});
    } catch (const nlohmann::json::exception& e) {
      input_error("{}: malformed record: {}", run.record_path(), e.what());
    }
  }
  return run;
}

// The checks of single values and of the batch against the layout.
void check_values(const TrainOptions& o, const ParallelLayout& layout) {
  const auto not_yet = [](const char* what, const char* option, int size) {
    if (size > 1)
      input_error("{} {}: {} is not implemented yet; use data parallelism (more ranks, or --dp)", option, size, what);
  };
  not_yet("context parallelism", "--cp", layout.cp);
  not_yet("expert parallelism", "--ep", layout.ep);
  if (o.sequence_parallel && layout.tp == 1)
    input_error("--sequence-parallel splits the tensor-parallel regions: it needs --tp above 1");
  if (o.iters <= 0) input_error("--iters must be positive, got {}", o.iters);
  if (o.micro_batch <= 0) input_error("--micro-batch must be positive, got {}", o.micro_batch);
  if (o.global_batch <= 0 || o.global_batch % (o.micro_batch * layout.dp) != 0)
    input_error("--global-batch {} must be a positive multiple of --micro-batch {} times the {} data-parallel ranks",
                o.global_batch, o.micro_batch, layout.dp);
  if (o.log_interval <= 0) input_error("--log-interval must be positive, got {}", o.log_interval);
  if (o.eval_interval < 0) input_error("--eval-interval must not be negative, got {}", o.eval_interval);
  if (o.eval_iters < 0) input_error("--eval-iters must not be negative, got {}", o.eval_iters);
  if (o.save_interval < 0) input_error("--save-interval must not be negative, got {}", o.save_interval);
  if (o.keep < 0) input_error("--keep must not be negative, got {}", o.keep);
  if (o.exit_after_minutes < 0) input_error("--exit-after-minutes must not be negative, got {}", o.exit_after_minutes);
  if (o.exit_interval < 0) input_error("--exit-interval must not be negative, got {}", o.exit_interval);
  if (o.save_interval > 0 && o.save.empty() && o.given.count("save-interval"))
    input_error("--save-interval needs --save DIR");
  if (o.virtual_stages != 1) {
    if (layout.pp == 1) input_error("--virtual-stages needs --pp above 1");
    const int64_t micro_batches = o.global_batch / (o.micro_batch * layout.dp);  // each replica's
    if (micro_batches % layout.pp != 0)
      input_error("--virtual-stages {}: the interleaved schedule needs each replica's micro-batches (--global-batch "
                  "{} / (--micro-batch {} x {} data-parallel ranks) = {}) to be a multiple of --pp {}",
                  o.virtual_stages, o.global_batch, o.micro_batch, layout.dp, micro_batches, layout.pp);
  }
  if (!o.data_path.empty() && o.data_cache_path.empty() && o.save.empty())
    input_error("--data-path: the blend it builds is kept in --data-cache-path DIR or --save DIR; give one");
}

}  // namespace

nlohmann::ordered_json TrainOptions::to_json() const {
  nlohmann::ordered_json j;
  for (const auto& f : option_fields()) {
    j[f.key] = f.get(*this);
    // The model options follow the model's, null where not given: never taken by a resumed run
    // (it takes the checkpoint's model whole), but a record given to --config repeats the run.
    if (std::string_view(f.key) == "model-config") {
      j.update(overrides.to_json());
      j["hidden-dropout"] = json_or_null(hidden_dropout);
      j["attention-dropout"] = json_or_null(attention_dropout);
    }
  }
  return j;
}

std::string ResolvedRun::record_path() const { return (fs::path(checkpoint) / kCheckpointRecordFile).string(); }

ResolvedRun resolve_train_options(TrainOptions& o, int world) {
  const auto given = [&o](const char* key) { return o.given.count(key) > 0; };
  if (given("data") && given("data-path"))
    input_error("--data and --data-path together: give the blend file, or the datasets to build one from");
  if (o.use_checkpoint_opt_param_scheduler && o.override_opt_param_scheduler)
    input_error("--use-checkpoint-opt-param-scheduler and --override-opt-param-scheduler together: the schedule "
                "is either the checkpoint's or the command line's");
  ResolvedRun run = find_start(o);

  std::set<std::string> taken;
  const bool recorded = run.start == RunStart::resume && run.record().contains("options") &&
                        run.record()["options"].is_object();
  if (recorded) taken = take_recorded(o, run.record()["options"], world, run.record_path());
  // The device and precision as the record holds them: resolved.
  const auto [device, precision] = resolve_device_precision(o.device, o.precision);
  run.precision = precision;
  if (device == Device::cpu) checked_device(o.device, precision);  // its precision; the backend checks for a GPU
  if (device == Device::cpu && o.recompute != "none")
    input_error("--recompute {}: recomputation is for the GPU's memory; the CPU path keeps its activations",
                o.recompute);
  if (recorded) warn_changed(o, run.record()["options"], run.record_path());
  if (run.start != RunStart::fresh && !given("tokenizer") && !given("merges")) {
    const TokenizerFiles kept = checkpoint_tokenizer(run.checkpoint, run.checkpoint_json);
    if (!kept.in_checkpoint) require_recorded_tokenizer(kept, run.checkpoint);
    o.tokenizer = kept.tokenizer;
    o.merges = kept.merges;
    run.tokenizer_in_checkpoint = kept.in_checkpoint;
  }

  const auto has = [&](const char* key) { return given(key) || taken.count(key) > 0; };
  std::vector<std::string> missing;
  if (run.start == RunStart::fresh && o.model.empty() && o.model_config.empty())
    missing.push_back("--model (or --model-config)");
  if (o.data.empty() && o.data_path.empty()) missing.push_back("--data (or --data-path)");
  if (!has("iters")) missing.push_back("--iters");
  if (!has("lr")) missing.push_back("--lr");
  if (!missing.empty()) input_error("missing: {}", fmt::join(missing, ", "));

  run.layout = ParallelLayout::resolve(world, o.tp, o.pp, o.cp, o.ep, o.dp);
  if (!has("global-batch")) {
    o.global_batch = o.micro_batch * run.layout.dp;
    run.default_global_batch = true;
  }
  check_values(o, run.layout);
  check_save_directory(o);
  if (!o.data_path.empty()) {  // recorded as it is read: weights, absolute prefixes
    std::vector<std::string> words;
    for (const auto& in : parse_data_path(o.data_path)) {
      words.push_back(fmt::format("{}", in.weight));
      words.push_back(in.prefix);
    }
    o.data_path = words;
  }
  return run;
}

namespace {

bool model_from_checkpoint(const TrainOptions& o, const ResolvedRun& run) {
  return run.start != RunStart::fresh && o.model.empty() && o.model_config.empty();
}

// The model before the options apply: the checkpoint's, the config file's (over --model's preset)
// or the preset's; not validated. *FIXED_VOCAB: whether it sets the vocabulary on purpose (a
// checkpoint's, or a config file's own vocab-size) rather than by its preset.
ModelConfig base_model(const TrainOptions& o, const ResolvedRun& run, bool* fixed_vocab) {
  *fixed_vocab = true;
  if (model_from_checkpoint(o, run)) {
    if (!run.record().contains("model")) input_error("{}: no model in the checkpoint's record", run.record_path());
    return ModelConfig::from_json(run.record()["model"], run.record_path());
  }
  if (!o.model_config.empty()) {
    nlohmann::json j = read_json_file(o.model_config);
    if (j.is_object() && !o.model.empty() && !j.contains("preset")) j["preset"] = o.model;
    *fixed_vocab = j.is_object() && j.contains("vocab-size");
    return ModelConfig::from_json(j, o.model_config);
  }
  *fixed_vocab = false;
  return o.model.empty() ? ModelConfig{} : ModelConfig::preset(o.model);
}

}  // namespace

int64_t train_seq_length(const TrainOptions& o, const ResolvedRun& run) {
  bool fixed = false;
  return o.overrides.seq_length.value_or(base_model(o, run, &fixed).seq_length);
}

ModelConfig resolve_train_model(const TrainOptions& o, const ResolvedRun& run, int64_t tokenizer_vocab,
                                int64_t seq_length) {
  ModelOverrides overrides = o.overrides;
  overrides.seq_length = seq_length;
  bool fixed_by_base = false;
  const ModelConfig base = base_model(o, run, &fixed_by_base);
  const bool fixed = fixed_by_base || overrides.vocab_size.has_value();
  ModelConfig config;
  if (model_from_checkpoint(o, run)) {
    config = resolve_model_config_json(run.record()["model"], run.record_path(), overrides);
  } else {
    // The tokenizer's vocabulary replaces the preset's unless the user fixed one, as Megatron-LM
    // takes the vocabulary from the tokenizer.
    if (tokenizer_vocab > 0 && !fixed) {
      overrides.vocab_size = tokenizer_vocab;
      if (base.vocab_size != 0 && base.vocab_size != tokenizer_vocab)
        log::info("{}: the tokenizer's vocabulary of {} replaces the model's {} (--vocab-size keeps another)",
                  o.model_config.empty() ? "--model " + o.model : o.model_config, tokenizer_vocab, base.vocab_size);
    }
    config = resolve_model_config(o.model, o.model_config, overrides);
  }
  if (o.hidden_dropout || o.attention_dropout) {
    if (o.hidden_dropout) config.hidden_dropout = *o.hidden_dropout;
    if (o.attention_dropout) config.attention_dropout = *o.attention_dropout;
    config.validate("--hidden-dropout/--attention-dropout");
  }
  if (tokenizer_vocab > 0) config.set_vocab_from_tokenizer(tokenizer_vocab);
  if (run.layout.pp > 1) check_pipeline_parallel(config, run.layout.pp, o.virtual_stages);
  if (run.layout.tp > 1) {
    config.pad_vocab(run.layout.tp);  // Megatron pads the vocabulary to a multiple of 128 * tp
    check_tensor_parallel(config, run.layout.tp);
  }
  return config;
}

uint64_t train_samples_needed(const TrainOptions& o, const ResolvedRun& run) {
  const int64_t steps = std::max<int64_t>(0, o.iters - run.iteration);
  return static_cast<uint64_t>(run.consumed_samples + steps * o.global_batch);
}

}  // namespace meg
