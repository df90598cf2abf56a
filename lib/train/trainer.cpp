#include "train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "ckpt/checkpoint.hpp"
#include "ckpt/sharded_checkpoint.hpp"
#include "core/device.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/json_file.hpp"
#include "core/log.hpp"
#include "core/mapped_file.hpp"
#include "data/tokenizer.hpp"
#include "model/pipeline.hpp"
#include "model/tensor_parallel.hpp"
#include "train/signals.hpp"

namespace meg {
namespace {

using Clock = std::chrono::steady_clock;

// Whether --load DIR names a checkpoint (DIR itself) or a directory holding some.
bool has_checkpoint(const std::string& dir) {
  const std::filesystem::path d(dir);
  return std::filesystem::exists(d / kCheckpointRecordFile) || std::filesystem::exists(d / kCheckpointLatestFile) ||
         !list_checkpoints(dir).empty();
}

// The checkpoint.json of the checkpoint --load DIR resumes from (has_checkpoint(DIR) must hold).
std::string checkpoint_record_path(const std::string& dir) {
  const std::filesystem::path own = std::filesystem::path(dir) / kCheckpointRecordFile;
  if (std::filesystem::exists(own)) return own.string();
  return (std::filesystem::path(find_latest(dir)) / kCheckpointRecordFile).string();
}

uint64_t file_xxh64(const std::string& path) {
  const MappedFile file(path);
  return xxh64(file.data(), file.size());
}

// The checkpoint --load DIR resumes from, as the ranks compare it: its directory (which names the
// iteration) and the XXH64 of its record, which holds the checksum of every file.
std::string checkpoint_identity(const std::string& dir) {
  if (dir.empty() || !has_checkpoint(dir)) return "no checkpoint";
  const std::string record = checkpoint_record_path(dir);
  return fmt::format("{}, record {}", std::filesystem::path(record).parent_path().filename().string(),
                     hex64(file_xxh64(record)));
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

// PATH made absolute (empty stays empty): the checkpoints record the tokenizer, which meg-eval
// and meg-generate then load from wherever they run.
std::string absolute_path(const std::string& path) {
  return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
}

}  // namespace

nlohmann::ordered_json TrainOptions::to_json() const {
  nlohmann::ordered_json j;
  j["model"] = model;
  j["model-config"] = model_config;
  j.update(overrides.to_json());
  j["hidden-dropout"] = json_or_null(hidden_dropout);
  j["attention-dropout"] = json_or_null(attention_dropout);
  j["data"] = data;
  j["tokenizer"] = absolute_path(tokenizer);
  j["merges"] = absolute_path(merges);
  j["iters"] = iters;
  j["micro-batch"] = micro_batch;
  j["global-batch"] = global_batch;
  j["lr"] = lr.lr;
  j["min-lr"] = lr.min_lr;
  j["warmup-iters"] = lr.warmup_iters;
  j["lr-decay-iters"] = lr.decay_iters;
  j["lr-decay"] = std::string(lr_decay_style_name(lr.style));
  j["weight-decay"] = adam.weight_decay;
  j["clip-grad"] = clip_grad;
  j["adam-beta1"] = adam.beta1;
  j["adam-beta2"] = adam.beta2;
  j["adam-eps"] = adam.eps;
  j["seed"] = seed;
  j["eval-interval"] = eval_interval;
  j["eval-iters"] = eval_iters;
  j["log-interval"] = log_interval;
  j["save"] = save;
  j["save-interval"] = save_interval;
  j["keep"] = keep;
  j["load"] = load;
  j["metrics"] = metrics;
  j["tensorboard-dir"] = tensorboard_dir;
  j["exit-after-minutes"] = exit_after_minutes;
  j["exit-interval"] = exit_interval;
  j["device"] = device;
  j["precision"] = precision;
  j["recompute"] = recompute;
  j["tp"] = tp;
  j["pp"] = pp;
  j["dp"] = json_or_null(dp);
  j["cp"] = cp;
  j["ep"] = ep;
  j["use-distributed-optimizer"] = distributed_optimizer;
  j["sequence-parallel"] = sequence_parallel;
  j["virtual-stages"] = virtual_stages;
  j["time-communication"] = time_communication;
  return j;
}

Trainer::Trainer(TrainOptions options) : opt_(std::move(options)) {
  world_ = &World::init();
  layout_ = ParallelLayout::resolve(world_->size(), opt_.tp, opt_.pp, opt_.cp, opt_.ep, opt_.dp);
  const auto not_yet = [](const char* what, const char* option, int size) {
    if (size > 1) input_error("{} {}: {} is not implemented yet; use data parallelism (more ranks, or --dp)", option,
                              size, what);
  };
  not_yet("context parallelism", "--cp", layout_.cp);
  not_yet("expert parallelism", "--ep", layout_.ep);
  if (opt_.sequence_parallel && layout_.tp == 1)
    input_error("--sequence-parallel splits the tensor-parallel regions: it needs --tp above 1");
  if (world_->rank() != 0) {  // rank 0 speaks for the job; the others report only their errors
    log::set_errors_only(true);
    log::set_program(fmt::format("{} (rank {})", log::program(), world_->rank()));
  }
  const auto [device, precision] = resolve_device_precision(opt_.device, opt_.precision);
  const bool cpu = device == Device::cpu;
  if (cpu) checked_device(opt_.device, precision);  // its precision; the backend checks for a GPU
  if (cpu && opt_.recompute != "none")
    input_error("--recompute {}: recomputation is for the GPU's memory; the CPU path keeps its activations",
                opt_.recompute);
  if (opt_.data.empty()) input_error("--data BLEND is required");
  if (opt_.iters <= 0) input_error("--iters must be positive, got {}", opt_.iters);
  if (opt_.micro_batch <= 0) input_error("--micro-batch must be positive, got {}", opt_.micro_batch);
  if (opt_.global_batch == 0) opt_.global_batch = opt_.micro_batch;
  if (opt_.global_batch <= 0 || opt_.global_batch % (opt_.micro_batch * layout_.dp) != 0)
    input_error("--global-batch {} must be a positive multiple of --micro-batch {} times the {} data-parallel ranks",
                opt_.global_batch, opt_.micro_batch, layout_.dp);
  if (opt_.log_interval <= 0) input_error("--log-interval must be positive, got {}", opt_.log_interval);
  if (opt_.eval_interval < 0) input_error("--eval-interval must not be negative, got {}", opt_.eval_interval);
  if (opt_.eval_iters < 0) input_error("--eval-iters must not be negative, got {}", opt_.eval_iters);
  if (opt_.save_interval < 0) input_error("--save-interval must not be negative, got {}", opt_.save_interval);
  if (opt_.keep < 0) input_error("--keep must not be negative, got {}", opt_.keep);
  if (opt_.exit_after_minutes < 0)
    input_error("--exit-after-minutes must not be negative, got {}", opt_.exit_after_minutes);
  if (opt_.exit_interval < 0) input_error("--exit-interval must not be negative, got {}", opt_.exit_interval);
  if (opt_.save_interval > 0 && opt_.save.empty()) input_error("--save-interval needs --save DIR");

  data_ = std::make_unique<GptDataset>(opt_.data);
  const auto blend_seq = static_cast<int64_t>(data_->seq_length());
  if (opt_.overrides.seq_length && *opt_.overrides.seq_length != blend_seq)
    input_error("--seq-length {} differs from the sequence length {} of {}", *opt_.overrides.seq_length,
                blend_seq, opt_.data);
  ModelOverrides overrides = opt_.overrides;
  overrides.seq_length = blend_seq;

  // Without --model or --model-config, a run that loads a checkpoint takes the checkpoint's model
  // (one imported by meg-ckpt-convert --from hf, say).
  std::string checkpoint_json;
  nlohmann::json checkpoint_model;
  if (opt_.model.empty() && opt_.model_config.empty() && !opt_.load.empty() && has_checkpoint(opt_.load)) {
    checkpoint_json = checkpoint_record_path(opt_.load);
    const nlohmann::json j = read_json_file(checkpoint_json);
    if (!j.contains("record") || !j["record"].contains("model"))
      input_error("{}: no model in the checkpoint's record", checkpoint_json);
    checkpoint_model = j["record"]["model"];
  }
  uint64_t tokenizer_fingerprint = 0;
  if (!opt_.tokenizer.empty()) {
    const auto tokenizer = load_tokenizer(opt_.tokenizer, opt_.merges);
    tokenizer_vocab_ = tokenizer->vocab_size();
    tokenizer_fingerprint = tokenizer->fingerprint();
    if (!overrides.vocab_size) {
      int64_t base_vocab = 0;
      if (!opt_.model_config.empty()) base_vocab = load_model_config(opt_.model_config).vocab_size;
      else if (!opt_.model.empty()) base_vocab = ModelConfig::preset(opt_.model).vocab_size;
      else if (!checkpoint_json.empty()) base_vocab = ModelConfig::from_json(checkpoint_model, checkpoint_json).vocab_size;
      if (base_vocab == 0) overrides.vocab_size = tokenizer_vocab_;
    }
  }
  config_ = checkpoint_json.empty() ? resolve_model_config(opt_.model, opt_.model_config, overrides)
                                    : resolve_model_config_json(checkpoint_model, checkpoint_json, overrides);
  if (opt_.hidden_dropout || opt_.attention_dropout) {
    if (opt_.hidden_dropout) config_.hidden_dropout = *opt_.hidden_dropout;
    if (opt_.attention_dropout) config_.attention_dropout = *opt_.attention_dropout;
    config_.validate("--hidden-dropout/--attention-dropout");
  }
  if (config_.seq_length != blend_seq)
    input_error("model config: seq-length {} differs from the sequence length {} of {}", config_.seq_length,
                blend_seq, opt_.data);
  if (tokenizer_vocab_ > 0) config_.set_vocab_from_tokenizer(tokenizer_vocab_);
  if (layout_.pp > 1) {
    check_pipeline_parallel(config_, layout_.pp, opt_.virtual_stages);
  }
  if (opt_.virtual_stages != 1) {
    if (layout_.pp == 1) input_error("--virtual-stages needs --pp above 1");
    const int64_t micro_batches = opt_.global_batch / (opt_.micro_batch * layout_.dp);  // each replica's
    if (micro_batches % layout_.pp != 0)
      input_error("--virtual-stages {}: the interleaved schedule needs each replica's micro-batches (--global-batch "
                  "{} / (--micro-batch {} x {} data-parallel ranks) = {}) to be a multiple of --pp {}",
                  opt_.virtual_stages, opt_.global_batch, opt_.micro_batch, layout_.dp, micro_batches, layout_.pp);
  }
  if (layout_.tp > 1) {
    config_.pad_vocab(layout_.tp);  // Megatron pads the vocabulary to a multiple of 128 * tp
    check_tensor_parallel(config_, layout_.tp);
  }

  const uint64_t needed = static_cast<uint64_t>(opt_.iters) * static_cast<uint64_t>(opt_.global_batch);
  if (data_->num_samples(Split::kTrain) < needed)
    input_error("{}: {} train samples, but --iters {} x --global-batch {} needs {}", opt_.data,
                data_->num_samples(Split::kTrain), opt_.iters, opt_.global_batch, needed);

  if (opt_.sequence_parallel && (opt_.micro_batch * static_cast<int64_t>(data_->seq_length())) % layout_.tp != 0)
    input_error("--sequence-parallel: the {} x {} positions of a micro-batch do not divide over {} ranks",
                opt_.micro_batch, data_->seq_length(), layout_.tp);

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
                 ? make_cuda_backend(config_, opt_.adam, opt_.seed, precision, opt_.recompute, groups)
                 : make_cpu_backend(config_, opt_.adam, opt_.seed, groups);
  if (opt_.time_communication) backend_->set_communication_timing(true);
  opt_.lr.train_iters = opt_.iters;
  schedule_ = std::make_unique<LrSchedule>(opt_.lr);

  const size_t T = data_->seq_length();
  const size_t BT = static_cast<size_t>(opt_.micro_batch) * T;
  sample_.resize(T + 1);
  tokens_.resize(BT);
  targets_.resize(BT);

  if (!opt_.load.empty()) {
    if (has_checkpoint(opt_.load)) {
      load_from(opt_.load);
    } else {
      if (!std::filesystem::is_directory(opt_.load)) input_error("--load {}: no such directory", opt_.load);
      log::info("no checkpoint in {}: starting from iteration 0", opt_.load);
    }
  }
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
    if (key != "metrics" && key != "tensorboard-dir" && key != "data" && key != "tokenizer" && key != "merges" &&
        key != "model-config" && key != "load" && !model_options.contains(key) && key != "hidden-dropout" &&
        key != "attention-dropout")
      add("--" + key, value);
  for (const auto& [key, value] : model.items()) add("the model's " + key, value);
  const auto file = [&out](const std::string& option, const std::string& path, const auto& fingerprint) {
    out.push_back({option, path.empty() ? "none" : fingerprint(), path});
  };
  file("--data", opt_.data, [&] { return hex64(data_->fingerprint()); });
  file("--tokenizer", opt_.tokenizer, [&] { return hex64(tokenizer_fingerprint); });  // with --merges
  file("--load", opt_.load, [&] { return checkpoint_identity(opt_.load); });
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

double Trainer::train_step(double* grad_norm_out) {
  const int B = static_cast<int>(opt_.micro_batch), T = static_cast<int>(data_->seq_length());
  const int64_t D = layout_.dp, r = world_->coords().dp;
  const int64_t micro_batches = opt_.global_batch / (opt_.micro_batch * D);  // this rank's
  backend_->begin_step();
  for (int64_t m = 0; m < micro_batches; ++m) {
    const int64_t micro = m * D + r;  // the micro-batch's number in the global batch
    for (int j = 0; j < B; ++j) {
      const uint64_t index = static_cast<uint64_t>(iteration_ * opt_.global_batch + micro * opt_.micro_batch + j);
      data_->sample(Split::kTrain, index, sample_.data());
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
  *grad_norm_out = s.grad_norm;
  return s.loss;
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
  record["consumed_samples"] = iteration_ * opt_.global_batch;
  record["optimizer_step"] = backend_->optimizer_step();
  record["backend_state"] = nlohmann::ordered_json::parse(backend_->extra_state());
  record["blend_fingerprint"] = hex64(data_->fingerprint());
  record["seed"] = opt_.seed;
  record["parallel"] = parallel_json(layout_, opt_.virtual_stages);
  record["sharded"] = sharded_state();
  record["distributed_optimizer"] = opt_.distributed_optimizer && layout_.dp > 1;
  return record;
}

bool Trainer::sharded_state() const {
  return layout_.tp > 1 || layout_.pp > 1 || (opt_.distributed_optimizer && layout_.dp > 1);
}

void Trainer::save_checkpoint_now() {
  if (opt_.save.empty() || last_saved_ == iteration_) return;
  const auto start = Clock::now();
  std::string path;
  if (sharded_state()) {  // every rank writes its part (ckpt/sharded_checkpoint.hpp)
    LocalState local;
    backend_->get_local_state(local);
    path = save_sharded_checkpoint(opt_.save, iteration_, checkpoint_record(), opt_.keep, *world_, local);
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
                           {{"model.safetensors", model_tensors}, {"optimizer.safetensors", optim_tensors}},
                           {.keep = opt_.keep, .overwrite = true});
    world_->world().barrier();  // the others wait for the checkpoint to be complete
  } else {
    world_->world().barrier();
  }
  last_saved_ = iteration_;
  log::info("saved {} in {:.2f} s", path, std::chrono::duration<double>(Clock::now() - start).count());
}

void Trainer::load_from(const std::string& dir) {
  const Checkpoint ck = load_checkpoint(dir);
  const std::string where = (std::filesystem::path(ck.path()) / kCheckpointRecordFile).string();
  const auto& rec = ck.record();
  try {
    const ModelConfig saved = ModelConfig::from_json(rec.at("model"), where);
    if (!(saved == config_))
      input_error("{}: the checkpoint's model config differs from the requested one ({})", where,
                  first_difference(saved.to_json(), config_.to_json()));
    // A checkpoint imported by meg-ckpt-convert (--from hf) holds no data position to continue.
    const std::string fp = hex64(data_->fingerprint());
    if (rec.contains("blend_fingerprint") && rec["blend_fingerprint"].get<std::string>() != fp)
      input_error("{}: the checkpoint was trained on a blend with fingerprint {}, but {} has {}", where,
                  rec["blend_fingerprint"].get<std::string>(), opt_.data, fp);
    if (rec.contains("options")) {
      // The data position and the schedule follow these; a change is allowed but ends exactness.
      const auto now = opt_.to_json();
      for (const char* key : {"global-batch", "iters", "lr", "min-lr", "warmup-iters", "lr-decay"})
        if (rec["options"].contains(key) && rec["options"][key] != now[key])
          log::warn("{}: --{} was {} and is now {}: the run will not repeat an uninterrupted one", where, key,
                    rec["options"][key].dump(), now[key].dump());
    }
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
        if (saved.contains(dim) && saved[dim] != now[dim])
          log::warn("{}: the checkpoint was written with {} {} and this run has {}: the model is the same, the "
                    "sums' rounding is not",
                    where, dim, saved[dim].dump(), now[dim].dump());
    }
    const int64_t it = rec.at("iteration").get<int64_t>();
    const int64_t step = rec.at("optimizer_step").get<int64_t>();
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
    backend_->set_state(params, m, v, step);
    if (rec.contains("backend_state")) backend_->restore_extra_state(rec["backend_state"].dump());
    iteration_ = it;
    last_saved_ = it;
  } catch (const nlohmann::json::exception& e) {
    input_error("{}: malformed record: {}", where, e.what());
  }
  log::info("loaded {} (iteration {})", ck.path(), iteration_);
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
  run_log.start(settings(), run_summary(run_facts(log_options)));
  if (iteration_ >= opt_.iters) {
    log::info("iteration {} already reaches --iters {}: nothing to train", iteration_, opt_.iters);
    return 0;
  }
  const auto start = Clock::now();
  bool stopped = false;
  while (iteration_ < opt_.iters) {
    kick();
    double norm = 0;
    const double lr = schedule_->lr_at(iteration_);
    const double loss = train_step(&norm);
    ++iteration_;
    run_log.train_step(iteration_, loss, lr, norm);
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
