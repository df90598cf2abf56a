#include "train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "ckpt/checkpoint.hpp"
#include "ckpt/sharded_checkpoint.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "core/mapped_file.hpp"
#include "data/blend_cache.hpp"
#include "tokenizer/tokenizer.hpp"
#include "train/resolved_options.hpp"
#include "train/signals.hpp"

namespace meg {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t file_xxh64(const std::string& path) {
  const MappedFile file(path);
  return xxh64(file.data(), file.size());
}

// The checkpoint the run starts from (an iter_* directory, or "" for none), as the ranks compare
// it: its directory (which names the iteration) and the XXH64 of its record, which holds the
// checksum of every file.
std::string checkpoint_identity(const std::string& dir) {
  if (dir.empty()) return "no checkpoint";
  const std::string record = (std::filesystem::path(dir) / kCheckpointRecordFile).string();
  return fmt::format("{}, record {}", std::filesystem::path(dir).filename().string(), hex64(file_xxh64(record)));
}

std::vector<uint64_t> shape_of(const ParamTensor& t) {
  return {t.shape.begin(), t.shape.end()};
}

// The first key whose value differs between two model configs, as "key A vs B".
std::string first_difference(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b) {
  for (const auto& [key, value] : a.items()) {
    if (!b.contains(key)) return key + " missing";
    if (b[key] != value) return fmt::format("{} {} vs {}", key, value.dump(), b[key].dump());
  }
  for (const auto& [key, value] : b.items())
    if (!a.contains(key)) return key + " " + value.dump() + " not in the checkpoint";
  return "unknown field";
}

// The layout as the settings and checkpoint records hold it: the group sizes and the virtual
// stages, which decide what each pipeline rank's shard holds.
nlohmann::ordered_json parallel_json(const ParallelLayout& layout, int virtual_stages) {
  nlohmann::ordered_json j = layout.to_json();
  j["virtual_stages"] = virtual_stages;
  return j;
}

}  // namespace

Trainer::Trainer(TrainOptions options) : opt_(std::move(options)) {
  world_ = &World::init();
  if (world_->rank() != 0) {  // rank 0 speaks for the job; the others report only their errors
    log::set_errors_only(true);
    log::set_program(fmt::format("{} (rank {})", log::program(), world_->rank()));
  }
  run_ = std::make_unique<ResolvedRun>(resolve_train_options(opt_, world_->size()));
  layout_ = run_->layout;

  uint64_t tokenizer_fingerprint = 0;
  if (!opt_.tokenizer.empty()) {
    const auto tokenizer = load_tokenizer(opt_.tokenizer, opt_.merges);
    tokenizer_vocab_ = tokenizer->vocab_size();
    tokenizer_fingerprint = tokenizer->fingerprint();
    tokenizer_ = KeptTokenizer({opt_.tokenizer, opt_.merges}, run_->tokenizer_in_checkpoint);
    if (run_->start == RunStart::resume && tokenizer_.differs_from(run_->checkpoint_json))
      log::warn("{}: --tokenizer {} is not the tokenizer the checkpoint keeps: the run will not repeat an "
                "uninterrupted one",
                run_->record_path(), opt_.tokenizer);
  }
  open_data();
  const auto blend_seq = static_cast<int64_t>(data_->seq_length());
  if (opt_.overrides.seq_length && *opt_.overrides.seq_length != blend_seq)
    input_error("--seq-length {} differs from the sequence length {} of {}", *opt_.overrides.seq_length,
                blend_seq, opt_.data);
  config_ = resolve_train_model(opt_, *run_, tokenizer_vocab_, blend_seq);
  if (opt_.sequence_parallel && (opt_.micro_batch * blend_seq) % layout_.tp != 0)
    input_error("--sequence-parallel: the {} x {} positions of a micro-batch do not divide over {} ranks",
                opt_.micro_batch, blend_seq, layout_.tp);

  // Everything above is this rank's alone; from here on the ranks work together, so first they
  // make sure they were started alike.
  check_ranks_agree(world_->world(), shared_settings(tokenizer_fingerprint));
  world_->set_layout(layout_);
  dp_group_ = &world_->group(ParallelDim::dp);
  const ParallelGroups groups{dp_group_,
                              &world_->group(ParallelDim::tp),
                              &world_->group(ParallelDim::pp),
                              opt_.distributed_optimizer,
                              opt_.sequence_parallel,
                              opt_.virtual_stages};
  backend_ = opt_.device == "cuda"
                 ? make_cuda_backend(config_, opt_.adam, opt_.seed, run_->precision, opt_.recompute, groups)
                 : make_cpu_backend(config_, opt_.adam, opt_.seed, groups);
  if (opt_.time_communication) backend_->set_communication_timing(true);
  opt_.lr.train_iters = opt_.iters;
  schedule_ = std::make_unique<LrSchedule>(opt_.lr);

  const size_t T = data_->seq_length();
  const size_t BT = static_cast<size_t>(opt_.micro_batch) * T;
  sample_.resize(T + 1);
  tokens_.resize(BT);
  targets_.resize(BT);

  if (run_->start != RunStart::fresh) load_start();
  const uint64_t held = data_->num_samples(Split::kTrain), needed = train_samples_needed(opt_, *run_);
  if (held == 0) input_error("{}: no train samples", opt_.data);
  if (needed > held)
    log::info("{}: {} train samples, and the run reads {} to --iters {}: the sample index wraps ({:.2f} epochs of the "
              "blend)",
              opt_.data, held, needed, opt_.iters, static_cast<double>(needed) / static_cast<double>(held));

}

void Trainer::open_data() {
  if (opt_.data_path.empty()) {
    data_ = std::make_unique<GptDataset>(opt_.data);
    return;
  }
  // Megatron's sample counts: what training reads, and what evaluation does (the same
  // --eval-iters micro-batches each time); no test samples.
  const int64_t seq_length = train_seq_length(opt_, *run_);
  if (seq_length < 2) input_error("--data-path: the model's sequence length is {}; give --seq-length", seq_length);
  BlendOptions blend;
  blend.seq_length = static_cast<uint64_t>(seq_length);
  blend.seed = static_cast<uint32_t>(opt_.seed);
  blend.split = opt_.split;
  const bool evaluates = opt_.eval_interval > 0 && opt_.eval_iters > 0;
  blend.samples = {train_samples_needed(opt_, *run_),
                   static_cast<uint64_t>(evaluates ? opt_.eval_iters * opt_.micro_batch : 0), uint64_t{0}};
  const std::string cache = opt_.data_cache_path.empty()
                                ? (std::filesystem::path(opt_.save) / "data-cache").string()
                                : opt_.data_cache_path;
  const auto inputs = parse_data_path(opt_.data_path);
  // Rank 0 builds it; the others find it in the cache.
  CachedBlend cached;
  if (world_->rank() == 0) cached = cached_blend(inputs, blend, cache);
  world_->world().barrier();
  if (world_->rank() != 0) cached = cached_blend(inputs, blend, cache);
  opt_.data = cached.path;
  data_ = std::make_unique<GptDataset>(opt_.data);
  log::info("{} {} from --data-path: {} train, {} valid samples of {}+1 tokens from {} input{}",
            cached.built ? "built" : "reusing", opt_.data, data_->num_samples(Split::kTrain),
            data_->num_samples(Split::kValid), seq_length, inputs.size(), inputs.size() == 1 ? "" : "s");
}

Trainer::~Trainer() = default;

nlohmann::ordered_json Trainer::settings() const {
  nlohmann::ordered_json j;
  j["options"] = opt_.to_json();
  j["model"] = config_.to_json();
  j["parameters"] = config_.num_parameters();
  j["data"] = {{"blend", opt_.data},
               {"seq_length", data_->seq_length()},
               {"train_samples", data_->num_samples(Split::kTrain)},
               {"valid_samples", data_->num_samples(Split::kValid)},
               {"fingerprint", hex64(data_->fingerprint())}};
  j["backend"] = backend_->describe();
  j["parallel"] = parallel_json(layout_, opt_.virtual_stages);
  j["start_iteration"] = iteration_;
  return j;
}

// Every option but --metrics and --tensorboard-dir, which only rank 0 writes, and the resolved
// model (what the model options, the model config file and the tokenizer's vocabulary made of it,
// which stands for the model options). The files that
// options name go by their content, since each rank may reach the same file by another path: the
// blend by its fingerprint (its options and its inputs' indices), the tokenizer by its own, and
// the checkpoint by checkpoint_identity().
std::vector<RankSetting> Trainer::shared_settings(uint64_t tokenizer_fingerprint) const {
  std::vector<RankSetting> out;
  const auto add = [&out](const std::string& name, const nlohmann::ordered_json& value) {
    out.push_back({name, value.is_string() ? value.get<std::string>() : value.dump(), {}});
  };
  const nlohmann::ordered_json options = opt_.to_json(), model = config_.to_json();
  const nlohmann::ordered_json model_options = ModelOverrides{}.to_json();
  for (const auto& [key, value] : options.items())
    if (key != "metrics" && key != "tensorboard-dir" && key != "data" && key != "data-path" &&
        key != "data-cache-path" && key != "tokenizer" && key != "merges" && key != "model-config" && key != "load" &&
        key != "pretrained-checkpoint" && !model_options.contains(key) && key != "hidden-dropout" &&
        key != "attention-dropout")
      add("--" + key, value);
  for (const auto& [key, value] : model.items()) add("the model's " + key, value);
  const auto file = [&out](const std::string& option, const std::string& path, const auto& fingerprint) {
    out.push_back({option, path.empty() ? "none" : fingerprint(), path});
  };
  file("--data", opt_.data, [&] { return hex64(data_->fingerprint()); });
  file("--tokenizer", opt_.tokenizer, [&] { return hex64(tokenizer_fingerprint); });  // with --merges
  file("--load", opt_.load.empty() ? opt_.pretrained_checkpoint : opt_.load,
       [&] { return checkpoint_identity(run_->checkpoint); });
  return out;
}

RunLogOptions Trainer::run_log_options() const {
  RunLogOptions o;
  o.start_iteration = iteration_;
  o.iters = opt_.iters;
  o.log_interval = opt_.log_interval;
  o.tokens_per_iter = static_cast<double>(opt_.global_batch) * static_cast<double>(data_->seq_length());
  o.flops_per_token = static_cast<double>(config_.flops_per_token(config_.seq_length));
  o.world_size = world_->size();
  o.time_communication = opt_.time_communication;
  o.device_numbers = [this] { return DeviceNumbers{backend_->peak_memory(), backend_->take_communication_ms()}; };
  if (world_->rank() != 0) return o;  // rank 0 writes the files
  o.metrics = opt_.metrics;
  if (o.metrics.empty() && !opt_.save.empty()) {
    std::filesystem::create_directories(opt_.save);
    o.metrics = (std::filesystem::path(opt_.save) / "metrics.jsonl").string();
  }
  o.tensorboard_dir = opt_.tensorboard_dir;
  return o;
}

RunFacts Trainer::run_facts(const RunLogOptions& log) const {
  RunFacts f;
  f.model_source = !opt_.model_config.empty() ? opt_.model_config : opt_.model;
  f.model = config_;
  f.layout = layout_;
  f.virtual_stages = opt_.virtual_stages;
  f.distributed_optimizer = opt_.distributed_optimizer;
  f.sequence_parallel = opt_.sequence_parallel;
  f.backend = backend_->describe();
  f.micro_batch = opt_.micro_batch;
  f.global_batch = opt_.global_batch;
  f.seq_length = static_cast<int64_t>(data_->seq_length());
  f.start_iteration = iteration_;
  f.iters = opt_.iters;
  f.blend = opt_.data;
  f.blend_train_samples = data_->num_samples(Split::kTrain);
  for (size_t k = 0; k < data_->blend().num_inputs(); ++k)
    f.train_tokens_per_epoch += data_->blend().input(k).splits[int(Split::kTrain)].tokens;
  f.lr = schedule_->options();
  f.save = opt_.save;
  f.save_interval = opt_.save_interval;
  f.keep = opt_.keep;
  f.metrics = log.metrics;
  f.tensorboard_dir = log.tensorboard_dir;
  return f;
}

StepStats Trainer::train_step() {
  const int B = static_cast<int>(opt_.micro_batch), T = static_cast<int>(data_->seq_length());
  const int64_t D = layout_.dp, r = world_->coords().dp;
  const int64_t micro_batches = opt_.global_batch / (opt_.micro_batch * D);  // this rank's
  backend_->begin_step();
  for (int64_t m = 0; m < micro_batches; ++m) {
    const int64_t micro = m * D + r;  // the micro-batch's number in the global batch
    for (int j = 0; j < B; ++j) {
      const auto index = static_cast<uint64_t>(consumed_samples_ + micro * opt_.micro_batch + j);
      data_->sample(Split::kTrain, index % data_->num_samples(Split::kTrain), sample_.data());  // epochs wrap
      std::memcpy(tokens_.data() + static_cast<size_t>(j) * T, sample_.data(), sizeof(int32_t) * T);
      std::memcpy(targets_.data() + static_cast<size_t>(j) * T, sample_.data() + 1, sizeof(int32_t) * T);
    }
    backend_->micro_batch(tokens_.data(), targets_.data(), B, T, opt_.seed, static_cast<uint64_t>(iteration_),
                          static_cast<uint64_t>(micro), micro_batches);
  }
  const StepStats s = backend_->end_step(schedule_->lr_at(iteration_), opt_.clip_grad);
  if (!s.skipped && (!std::isfinite(s.grad_norm) || !std::isfinite(s.loss)))
    input_error("iteration {}: the loss ({}) or gradient norm ({}) is not finite; lower --lr", iteration_ + 1,
                s.loss, s.grad_norm);
  if (s.skipped) log::warn("iteration {}: fp16 gradients overflowed; step skipped, loss scale lowered", iteration_ + 1);
  consumed_samples_ += opt_.global_batch;
  return s;
}

double Trainer::evaluate() {
  const uint64_t n = data_->num_samples(Split::kValid);
  const int B = static_cast<int>(opt_.micro_batch), T = static_cast<int>(data_->seq_length());
  // The data-parallel ranks share the validation batches (rank r takes every D-th) and add up.
  double sum = 0;
  for (int64_t k = world_->coords().dp; k < opt_.eval_iters; k += layout_.dp) {
    for (int j = 0; j < B; ++j) {
      data_->sample(Split::kValid, static_cast<uint64_t>(k * B + j) % n, sample_.data());
      std::memcpy(tokens_.data() + static_cast<size_t>(j) * T, sample_.data(), sizeof(int32_t) * T);
      std::memcpy(targets_.data() + static_cast<size_t>(j) * T, sample_.data() + 1, sizeof(int32_t) * T);
    }
    sum += backend_->eval_loss(tokens_.data(), targets_.data(), B, T);  // no dropout
  }
  dp_group_->all_reduce_sum(&sum, 1);
  return sum / static_cast<double>(opt_.eval_iters);
}

nlohmann::ordered_json Trainer::checkpoint_record() const {
  nlohmann::ordered_json record;
  record["model"] = config_.to_json();
  record["options"] = opt_.to_json();
  record["iteration"] = iteration_;
  record["consumed_samples"] = consumed_samples_;
  record["optimizer_step"] = backend_->optimizer_step();
  record["backend_state"] = nlohmann::ordered_json::parse(backend_->extra_state());
  record["blend_fingerprint"] = hex64(data_->fingerprint());
  record["blend_source_fingerprint"] = hex64(data_->source_fingerprint());
  record["seed"] = opt_.seed;
  record["parallel"] = parallel_json(layout_, opt_.virtual_stages);
  record["sharded"] = sharded_state();
  record["distributed_optimizer"] = opt_.distributed_optimizer && layout_.dp > 1;
  if (const auto tokenizer = tokenizer_.record(); !tokenizer.is_null()) record["tokenizer"] = tokenizer;
  return record;
}

bool Trainer::sharded_state() const {
  return layout_.tp > 1 || layout_.pp > 1 || (opt_.distributed_optimizer && layout_.dp > 1);
}

void Trainer::save_checkpoint_now() {
  if (opt_.save.empty() || last_saved_ == iteration_) return;
  const auto start = Clock::now();
  // Replacing a checkpoint of the same iteration is this run's own doing (resolved_options.hpp
  // refuses a directory of another run's, unless --overwrite).
  const CheckpointSaveOptions save{.keep = opt_.keep, .overwrite = true, .attachments = tokenizer_.attachments()};
  std::string path;
  if (sharded_state()) {  // every rank writes its part (ckpt/sharded_checkpoint.hpp)
    LocalState local;
    backend_->get_local_state(local);
    path = save_sharded_checkpoint(opt_.save, iteration_, checkpoint_record(), save, *world_, local);
  } else if (world_->rank() == 0) {  // the data-parallel replicas hold what rank 0 writes
    std::vector<float> params, m, v;
    backend_->get_state(params, m, v);
    std::vector<CheckpointTensor> model_tensors, optim_tensors;
    for (const auto& t : backend_->tensors()) {
      model_tensors.push_back({t.name, SafetensorsDtype::kF32, shape_of(t), params.data() + t.offset});
      optim_tensors.push_back({"exp_avg." + t.name, SafetensorsDtype::kF32, shape_of(t), m.data() + t.offset});
      optim_tensors.push_back({"exp_avg_sq." + t.name, SafetensorsDtype::kF32, shape_of(t), v.data() + t.offset});
    }
    path = save_checkpoint(opt_.save, iteration_, checkpoint_record(),
                           {{"model.safetensors", model_tensors}, {"optimizer.safetensors", optim_tensors}}, save);
    world_->world().barrier();  // the others wait for the checkpoint to be complete
  } else {
    world_->world().barrier();
  }
  last_saved_ = iteration_;
  if (!path.empty()) tokenizer_.saved_in(path);  // the next checkpoint links this one's copy
  log::info("saved {} in {:.2f} s", path, std::chrono::duration<double>(Clock::now() - start).count());
}

void Trainer::check_resumed_blend(const nlohmann::ordered_json& rec, const std::string& where) const {
  // A checkpoint imported by meg-ckpt-convert (--from hf) holds no data position to continue.
  if (!rec.contains("blend_fingerprint")) return;
  const std::string was = rec["blend_fingerprint"].get<std::string>(), fp = hex64(data_->fingerprint());
  if (was == fp) return;
  const auto consumed = static_cast<uint64_t>(consumed_samples_);
  const std::string at = fmt::format("sample {} of its {} train samples", consumed % data_->num_samples(Split::kTrain),
                                     data_->num_samples(Split::kTrain));
  if (opt_.override_data) {
    log::info("--override-data: the run continues on {} (fingerprint {}; the checkpoint's blend had {}) at {}",
              opt_.data, fp, was, at);
  } else if (rec.value("blend_source_fingerprint", "") == hex64(data_->source_fingerprint())) {
    log::warn("{}: the checkpoint's blend {} was built for other sample counts from the same data, split and seed: "
              "the run continues on {} at {}; from there its samples may differ from an uninterrupted run's",
              where, was, opt_.data, at);
  } else {
    input_error("{}: the checkpoint was trained on a blend with fingerprint {}, but {} has {} (--override-data "
                "continues on it)",
                where, was, opt_.data, fp);
  }
}

void Trainer::load_start() {
  const bool resume = run_->start == RunStart::resume;
  const Checkpoint ck = load_checkpoint(run_->checkpoint);
  const std::string where = run_->record_path();
  const auto& rec = ck.record();
  if (resume) {
    iteration_ = run_->iteration;
    consumed_samples_ = run_->consumed_samples;
  }
  try {
    const ModelConfig saved = ModelConfig::from_json(rec.at("model"), where);
    if (!(saved == config_))
      input_error("{}: the checkpoint's model config differs from the requested one ({})", where,
                  first_difference(saved.to_json(), config_.to_json()));
    if (resume) check_resumed_blend(rec, where);
    if (rec.contains("parallel")) {
      // Checkpoints hold the whole model whatever the data- and tensor-parallel sizes, so those may
      // change (the sums' rounding does); the vocabulary padding, which follows tp, is checked with
      // the model config above.
      const auto& saved = rec["parallel"];
      const auto now = parallel_json(layout_, opt_.virtual_stages);
      for (const char* dim : {"cp", "ep"})
        if (saved.contains(dim) && saved[dim] != now[dim])
          input_error("{}: the checkpoint was written with {} {} and this run has {} {}; convert it first "
                      "(meg-ckpt-convert)",
                      where, dim, saved[dim].dump(), dim, now[dim].dump());
      for (const char* dim : {"dp", "tp", "pp", "virtual_stages"})
        if (resume && saved.contains(dim) && saved[dim] != now[dim])
          log::warn("{}: the checkpoint was written with {} {} and this run has {}: the model is the same, the "
                    "sums' rounding is not",
                    where, dim, saved[dim].dump(), now[dim].dump());
    }
    const size_t n = backend_->num_parameters();
    std::vector<float> params(n), m(n), v(n);
    if (rec.value("sharded", false)) {
      const auto& lay = rec.at("parallel");
      ParallelLayout saved;
      saved.tp = lay.at("tp").get<int>();
      saved.pp = lay.at("pp").get<int>();
      saved.dp = lay.at("dp").get<int>();
      const int virtual_stages = lay.value("virtual_stages", 1);
      if (saved.tp < 1 || saved.pp < 1 || saved.dp < 1 || virtual_stages < 1)
        input_error("{}: bad parallel layout {}", where, lay.dump());
      load_sharded_state(ck, config_, saved, virtual_stages, rec.value("distributed_optimizer", false), params, m, v);
    } else {
      for (const auto& t : backend_->tensors()) {
        const auto shape = shape_of(t);
        const auto copy = [&](const std::string& file, const std::string& name, float* dst) {
          const auto& st = ck.tensor(file, name, SafetensorsDtype::kF32, shape);
          std::memcpy(dst, st.bytes.data(), t.numel * sizeof(float));
        };
        copy("model.safetensors", t.name, params.data() + t.offset);
        copy("optimizer.safetensors", "exp_avg." + t.name, m.data() + t.offset);
        copy("optimizer.safetensors", "exp_avg_sq." + t.name, v.data() + t.offset);
      }
    }
    // The optimizer's state: the AdamW moments and step, and the backend's (fp16's loss scale).
    if (resume && !opt_.no_load_optim) {
      backend_->set_state(params, m, v, rec.at("optimizer_step").get<int64_t>());
      if (rec.contains("backend_state")) backend_->restore_extra_state(rec["backend_state"].dump());
    } else {
      std::fill(m.begin(), m.end(), 0.0f);
      std::fill(v.begin(), v.end(), 0.0f);
      backend_->set_state(params, m, v, 0);
    }
  } catch (const nlohmann::json::exception& e) {
    input_error("{}: malformed record: {}", where, e.what());
  }
  if (!resume) {
    log::info("fine-tuning from {}: its weights, at iteration 0 with a fresh optimizer", ck.path());
    return;
  }
  last_saved_ = iteration_;
  log::info("loaded {} (iteration {}{})", ck.path(), iteration_,
            opt_.no_load_optim ? "; --no-load-optim: fresh AdamW moments" : "");
}

bool Trainer::any_rank(bool flag) {
  int64_t value = flag ? 1 : 0;
  world_->world().all_reduce_max(&value, 1);
  return value != 0;
}

int Trainer::run() {
  install_stop_handlers();
  if (world_->distributed()) {
    const double limit = Watchdog::timeout_seconds();
    watchdog_ = std::make_unique<Watchdog>(limit, [limit] {
      // From the watchdog's thread, which may not call MPI: leaving without MPI_Finalize makes
      // the launcher end every rank.
      log::write_line(fmt::format("no progress for {:g} s: a rank may be stuck in a collective; ending the job "
                                  "(MEG_COLLECTIVE_TIMEOUT)",
                                  limit));
      std::_Exit(kExitInternal);
    });
  }
  const auto kick = [this] {
    if (watchdog_) watchdog_->kick();
  };
  const RunLogOptions log_options = run_log_options();
  RunLog run_log(log_options);
  if (run_->default_global_batch)
    log::info("--global-batch {}: --micro-batch {} x {} data-parallel rank{} (the default)", opt_.global_batch,
              opt_.micro_batch, layout_.dp, layout_.dp == 1 ? "" : "s");
  run_log.start(settings(), run_summary(run_facts(log_options)));
  if (iteration_ >= opt_.iters) {
    log::info("iteration {} already reaches --iters {}: nothing to train", iteration_, opt_.iters);
    return 0;
  }
  const auto start = Clock::now();
  bool stopped = false;
  while (iteration_ < opt_.iters) {
    kick();
    const double lr = schedule_->lr_at(iteration_);
    const StepStats s = train_step();
    ++iteration_;
    run_log.train_step(iteration_, s.loss, lr, s.grad_norm, s.aux_losses);
    if (opt_.eval_interval > 0 && opt_.eval_iters > 0 && iteration_ % opt_.eval_interval == 0) {
      if (data_->num_samples(Split::kValid) == 0) {
        log::warn("{} has no validation samples: no evaluation", opt_.data);
        opt_.eval_interval = 0;
      } else {
        kick();
        run_log.evaluation(iteration_, evaluate());
      }
    }
    kick();
    if (opt_.save_interval > 0 && iteration_ % opt_.save_interval == 0) save_checkpoint_now();
    kick();
    if (any_rank(stop_requested())) {
      if (stop_requested()) log::info("signal {} received: stopping after iteration {}", stop_signal(), iteration_);
      else log::info("another rank received a stop signal: stopping after iteration {}", iteration_);
      stopped = true;
      break;
    }
    if (opt_.exit_interval > 0 && iteration_ % opt_.exit_interval == 0 && iteration_ < opt_.iters) {
      log::info("--exit-interval {} reached: stopping after iteration {}", opt_.exit_interval, iteration_);
      stopped = true;
      break;
    }
    if (opt_.exit_after_minutes > 0 &&
        any_rank(std::chrono::duration<double>(Clock::now() - start).count() >= opt_.exit_after_minutes * 60.0)) {
      log::info("--exit-after-minutes {} reached: stopping after iteration {}", opt_.exit_after_minutes, iteration_);
      stopped = true;
      break;
    }
  }
  save_checkpoint_now();
  if (!stopped) log::info("done: {} iterations", iteration_);
  return 0;
}

}  // namespace meg
