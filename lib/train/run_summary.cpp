#include "train/run_summary.hpp"

#include <fmt/format.h>

namespace meg {
namespace {

// A count to read at a glance: exact below 10000, else 7.68k, 12.35M, 2.10B, 1.05T.
std::string count(double n) {
  if (n < 1e4) return fmt::format("{:.0f}", n);
  static const char* kUnits[] = {"k", "M", "B", "T"};
  int i = 0;
  n /= 1e3;
  while (n >= 1e3 && i < 3) {
    n /= 1e3;
    ++i;
  }
  return fmt::format("{:.2f}{}", n, kUnits[i]);
}

std::string plural(int64_t n, const char* one, const char* many) { return fmt::format("{} {}", n, n == 1 ? one : many); }

std::string model_line(const RunFacts& f) {
  const ModelConfig& m = f.model;
  std::string line = fmt::format("model: {}{} family: {}, hidden {}, {}", f.model_source.empty() ? "" : f.model_source + ", ",
                                 to_string(m.family), plural(m.num_layers, "layer", "layers"), m.hidden_size,
                                 plural(m.num_heads, "head", "heads"));
  if (m.num_kv_heads != m.num_heads) line += fmt::format(" ({} key/value)", m.num_kv_heads);
  line += fmt::format(", ffn {}", m.ffn_hidden_size);
  if (m.moe.enabled()) {
    int64_t moe_layers = 0;
    for (const LayerSpec& l : m.layers()) moe_layers += l.kind == LayerKind::moe;
    line += fmt::format(", MoE in {} of {} blocks: {} experts of ffn {}, top-{} {}", moe_layers, m.num_layers,
                        m.moe.num_experts, m.moe.expert_ffn(m.ffn_hidden_size), m.moe.router_topk,
                        to_string(m.moe.score_function));
    if (m.moe.has_shared_experts())
      line += fmt::format(", shared ffn {}{}", m.moe.shared_expert_intermediate_size,
                          m.moe.shared_expert_gate ? " gated" : "");
  }
  line += fmt::format(", vocab {}", m.vocab_size);
  if (m.padded_vocab_size != m.vocab_size) line += fmt::format(" (padded {})", m.padded_vocab_size);
  line += fmt::format(", seq {}", m.seq_length);
  if (m.windowed()) line += fmt::format(", window-size {},0", m.window_size);
  line += fmt::format("; {} parameters", parameter_count(m.num_parameters()));
  return line;
}

std::string parallel_line(const RunFacts& f) {
  const ParallelLayout& p = f.layout;
  std::string line = fmt::format("parallel: {}: tp {} x pp {} x dp {} (cp {}, ep {})",
                                 plural(p.world_size(), "rank", "ranks"), p.tp, p.pp, p.dp, p.cp, p.ep);
  if (f.virtual_stages > 1) line += fmt::format(", {} virtual stages", f.virtual_stages);
  if (f.distributed_optimizer && p.dp > 1) line += ", distributed optimizer";
  if (f.sequence_parallel) line += ", sequence parallel";
  return line + "; " + f.backend;
}

std::string batch_line(const RunFacts& f) {
  const int64_t steps = f.global_batch / (f.micro_batch * f.layout.dp);
  return fmt::format("batch: micro-batch {} x {} x {} = global batch {}; {} tokens per iteration",
                     f.micro_batch, plural(f.layout.dp, "data-parallel rank", "data-parallel ranks"),
                     plural(steps, "accumulation step", "accumulation steps"), f.global_batch,
                     count(double(f.global_batch) * double(f.seq_length)));
}

std::string data_line(const RunFacts& f) {
  const double samples = double(f.iters) * double(f.global_batch);
  const double tokens = samples * double(f.seq_length);
  std::string line = fmt::format("data: {} iterations: {} samples, {} tokens", f.iters, count(samples), count(tokens));
  if (f.start_iteration > 0) line += fmt::format(" (from iteration {}: {} to go)", f.start_iteration, f.iters - f.start_iteration);
  line += fmt::format("; the run takes {:.1f}% of {}'s {} train samples",
                      100 * samples / double(std::max<uint64_t>(f.blend_train_samples, 1)), f.blend,
                      count(double(f.blend_train_samples)));
  if (f.train_tokens_per_epoch > 0)
    line += fmt::format(", {:.2f} epochs of its inputs' train documents", tokens / double(f.train_tokens_per_epoch));
  return line;
}

std::string lr_line(const RunFacts& f) {
  const LrScheduleOptions& s = f.lr;
  std::string line = "learning rate: ";
  if (s.warmup_iters > 0) line += fmt::format("linear warmup from 0 to {:.3g} over {}, then ", s.lr, plural(s.warmup_iters, "iteration", "iterations"));
  switch (s.style) {
    case LrDecayStyle::kConstant: return line + fmt::format("constant {:.3g}", s.lr);
    case LrDecayStyle::kInverseSquareRoot:
      return line + fmt::format("inverse-square-root decay from {:.3g}, never below {:.3g}", s.lr, s.min_lr);
    case LrDecayStyle::kLinear:
    case LrDecayStyle::kCosine:
      break;
  }
  return line + fmt::format("{} decay from {:.3g} to {:.3g} at iteration {}{}", lr_decay_style_name(s.style), s.lr,
                            s.min_lr, s.decay_iters, s.decay_iters < f.iters ? ", constant after it" : "");
}

std::string output_line(const RunFacts& f) {
  std::string line = "output: ";
  if (f.save.empty()) {
    line += "no checkpoints (no --save)";
  } else {
    line += fmt::format("checkpoints in {} ", f.save);
    line += f.save_interval > 0 ? fmt::format("every {} iterations and at the end", f.save_interval) : "at the end";
    line += f.keep > 0 ? fmt::format(", the newest {} kept", f.keep) : "";
  }
  line += "; metrics " + (f.metrics.empty() ? std::string("not written") : "in " + f.metrics);
  line += "; TensorBoard events " + (f.tensorboard_dir.empty() ? std::string("not written") : "in " + f.tensorboard_dir);
  return line;
}

}  // namespace

std::string parameter_count(int64_t n) {
  return n >= 1'000'000'000 ? fmt::format("{:.2f}B", double(n) / 1e9) : fmt::format("{:.2f}M", double(n) / 1e6);
}

std::vector<std::string> run_summary(const RunFacts& facts) {
  return {model_line(facts), parallel_line(facts), batch_line(facts), data_line(facts), lr_line(facts),
          output_line(facts)};
}

}  // namespace meg
