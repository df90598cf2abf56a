// meg-pretrain: train a GPT-2 or Llama model on a blend, with checkpoints, metrics and exact resume.
#include <optional>
#include <string>

#include "core/cli.hpp"
#include "core/cli_groups.hpp"
#include "core/error.hpp"
#include "core/megatron_names.hpp"
#include "moe/moe_options.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/comm.hpp"
#include "train/loss_plot.hpp"
#include "train/trainer.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Pretrain a decoder-only language model on a blend (CPU or GPUs; one process or many under mpirun).", "meg-pretrain"};
  meg::TrainOptions o;
  std::string decay = "cosine";
  auto& ov = o.overrides;
  meg::cli::MegatronConversions megatron;
  using meg::cli::with_megatron_names;
  // What a resumed run takes from its checkpoint when not given (train/resolved_options.hpp).
  const std::string required = "; REQUIRED, unless resuming a run (then the checkpoint's)";

  app.add_option("--model", o.model,
                 "Model preset (tiny, tiny-llama, gpt2-124m, llama-1b, ...); REQUIRED (or --model-config) without a "
                 "checkpoint to start from (then the checkpoint's)");
  app.add_option("--model-config", o.model_config, "JSON model config file (its keys win over the preset)");
  app.add_option("--num-layers", ov.num_layers, "Override: transformer blocks");
  app.add_option("--hidden-size", ov.hidden_size, "Override: model width");
  app.add_option(with_megatron_names("--num-heads"), ov.num_heads, "Override: attention heads");
  app.add_option("--num-kv-heads", ov.num_kv_heads, "Override: key/value heads");
  app.add_option("--ffn-hidden-size", ov.ffn_hidden_size, "Override: MLP width");
  app.add_option("--seq-length", ov.seq_length,
                 "Sequence length (default and must-match: the blend's; with --data-path the model's)");
  app.add_option("--vocab-size", ov.vocab_size, "Override: vocabulary size (default: the tokenizer's)");
  app.add_option(with_megatron_names("--init-std"), ov.init_std,
                 "Override: standard deviation of the normal weight initialisation");
  app.add_option("--window-size", ov.window_size,
                 "Sliding-window attention, Megatron's (L,R): query i attends to keys i-L .. i (R is 0); L "
                 "alone is L,0; -1,0 is full attention (the default)")
      ->type_name("L,R");
  app.add_option("--max-position-embeddings", ov.max_position_embeddings,
                 "Megatron's position count, checked: at least --seq-length, and equal to it with learned "
                 "positions (GPT-2)");
  meg::cli::add_moe_options(app, ov.moe);
  app.add_option("--hidden-dropout", o.hidden_dropout,
                 "Override: dropout probability of the embedding and block outputs (default 0)");
  app.add_option("--attention-dropout", o.attention_dropout,
                 "Override: dropout probability of the attention probabilities (default 0)");

  app.add_option("--data", o.data, "The blend file (meg-blend; or --data-path)" + required);
  app.add_option("--data-path", o.data_path,
                 "Build the blend instead, as Megatron-LM: WEIGHT PREFIX pairs or PREFIXes of .bin/.idx datasets, "
                 "sized for the run and cached")
      ->type_name("[W] PREFIX");
  app.add_option("--split", o.split, "--data-path: train,valid,test weights of each dataset's documents")
      ->capture_default_str();
  app.add_option("--data-cache-path", o.data_cache_path, "--data-path: where the blend is kept (default: SAVE/data-cache)")
      ->type_name("DIR");
  app.add_flag("--override-data", o.override_data,
               "Resume on another blend than the checkpoint's, from the samples consumed");
  meg::cli::add_tokenizer_options(app, o.tokenizer, o.merges,
                                  "it gives the vocabulary size (default: the checkpoint's, which keeps its files)");

  app.add_option(with_megatron_names("--iters"), o.iters, "Optimizer steps to train to" + required);
  app.add_option(with_megatron_names("--micro-batch"), o.micro_batch, "Samples per forward/backward")->capture_default_str();
  app.add_option(with_megatron_names("--global-batch"), o.global_batch,
                 "Samples per optimizer step (a multiple of --micro-batch; default: --micro-batch x the data-parallel "
                 "size)");
  app.add_option("--lr", o.lr.lr, "Peak learning rate" + required);
  app.add_option("--min-lr", o.lr.min_lr, "Learning rate at the end of the decay")->capture_default_str();
  app.add_option(with_megatron_names("--warmup-iters"), o.lr.warmup_iters, "Linear warmup steps")
      ->capture_default_str();
  app.add_option("--lr-decay-iters", o.lr.decay_iters, "Decay length (0: --iters)")->capture_default_str();
  app.add_option(with_megatron_names("--lr-decay"), decay, "constant, linear, cosine or inverse-square-root")
      ->capture_default_str();
  app.add_option("--weight-decay", o.adam.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  app.add_option("--clip-grad", o.clip_grad, "Clip gradients to this global norm (0: off)")->capture_default_str();
  app.add_option("--adam-beta1", o.adam.beta1, "AdamW beta1")->capture_default_str();
  app.add_option("--adam-beta2", o.adam.beta2, "AdamW beta2")->capture_default_str();
  app.add_option("--adam-eps", o.adam.eps, "AdamW epsilon")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the initialisation")->capture_default_str();

  app.add_option("--eval-interval", o.eval_interval, "Evaluate every N steps (0: never)")->capture_default_str();
  app.add_option("--eval-iters", o.eval_iters, "Validation micro-batches per evaluation")->capture_default_str();
  app.add_option("--log-interval", o.log_interval, "Log every N steps")->capture_default_str();
  app.add_option("--metrics", o.metrics, "JSON-lines metrics file (default: SAVE/metrics.jsonl)");

  app.add_option("--save", o.save, "Checkpoint directory");
  app.add_option("--save-interval", o.save_interval, "Save every N steps (0: at the end only)")->capture_default_str();
  app.add_option("--keep", o.keep, "Keep the newest N checkpoints (0: all)")->capture_default_str();
  meg::cli::add_load_option(app, o.load,
                            "training resumes from it, taking the options not given from its record (from iteration 0 "
                            "when DIR holds none)");
  const auto checkpoint_flag = [&app](const char* name, bool& flag, const char* help) {
    app.add_flag(name, flag, help)->group("Checkpoint");
  };
  checkpoint_flag("--finetune", o.finetune,
                  "Take only the weights of --load's checkpoint: iteration 0, a fresh optimizer and schedule, any data");
  app.add_option("--pretrained-checkpoint", o.pretrained_checkpoint,
                 "Fine-tune from this checkpoint when --load holds none (as --finetune)")
      ->type_name("DIR")
      ->group("Checkpoint");
  checkpoint_flag("--no-load-optim", o.no_load_optim, "Resume with fresh AdamW moments (the iteration continues)");
  checkpoint_flag("--no-load-rng", o.no_load_rng,
                  "Resume with --seed rather than the checkpoint's: the dropout masks are a function of seed, "
                  "iteration and micro-batch, so the seed is all the random state there is");
  checkpoint_flag("--overwrite", o.overwrite, "Save into a directory that holds another run's checkpoints");
  checkpoint_flag("--exit-on-missing-checkpoint", o.exit_on_missing_checkpoint,
                  "Refuse a --load that holds no checkpoint rather than start from iteration 0");
  checkpoint_flag("--use-checkpoint-opt-param-scheduler", o.use_checkpoint_opt_param_scheduler,
                  "Resuming, keep the checkpoint's --lr, --min-lr, --warmup-iters, --lr-decay-iters, --lr-decay and "
                  "--weight-decay even when given");
  checkpoint_flag("--override-opt-param-scheduler", o.override_opt_param_scheduler,
                  "Resuming, take the given schedule options without the warning that the run changes");
  app.add_option(with_megatron_names("--exit-after-minutes"), o.exit_after_minutes, "Save and exit after M minutes");
  app.add_option("--exit-interval", o.exit_interval, "Save and exit when the iteration is a multiple of N");
  meg::cli::add_device_options(app, o.device, o.precision);
  app.add_option(with_megatron_names("--recompute"), o.recompute,
                 "Activation recomputation on cuda: none, selective (norms and MLP activation) or full (whole "
                 "blocks)")
      ->capture_default_str();
  meg::cli::add_parallel_layout_options(app, {.tp = &o.tp,
                                             .pp = &o.pp,
                                             .dp = &o.dp,
                                             .dp_default = "the number of ranks over tp * pp * cp * ep",
                                             .cp = &o.cp,
                                             .ep = &o.ep,
                                             .virtual_stages = &o.virtual_stages,
                                             .distributed_optimizer = &o.distributed_optimizer,
                                             .sequence_parallel = &o.sequence_parallel});
  meg::cli::add_megatron_conversions(app, megatron);
  app.add_flag("--time-communication", o.time_communication,
               "Measure the device communication time per iteration (log line and metrics)");

  // Seeing a run: TensorBoard events while it trains, and its loss curves drawn afterwards.
  std::string plot;
  std::vector<std::string> plot_runs;
  app.add_option("--tensorboard-dir", o.tensorboard_dir, "Write TensorBoard event files to DIR (rank 0)");
  app.add_option("--plot", plot,
                 "Instead of training: draw the loss curves of RUN... (metrics files or --save directories) as the "
                 "SVG file OUT");
  app.add_option("runs", plot_runs, "With --plot: the runs to draw");
  meg::cli::add_common_options(
      app, "meg-pretrain --model tiny --data run.blend --tokenizer spm.model --iters 100 --micro-batch 4 "
           "--global-batch 8 --lr 1e-3 --warmup-iters 10 --save ckpt --save-interval 50\n"
           "  meg-pretrain --load ckpt --save ckpt --iters 200\n"
           "  meg-pretrain --model tiny --data-path \"0.7 data/web 0.3 data/docs\" --tokenizer spm.model --iters 100 "
           "--lr 1e-3 --save ckpt\n"
           "  meg-pretrain --plot loss.svg ckpt other-run/metrics.jsonl");

  return meg::cli::run_tool(
      app, argc, argv,
      [&] {
        if (!plot.empty()) {
          meg::write_loss_plot(plot, plot_runs);
          return 0;
        }
        if (!plot_runs.empty()) meg::input_error("'{}': runs to draw need --plot OUT.svg", plot_runs.front());
        meg::cli::resolve_megatron_conversions(megatron, ov.num_layers, o.pp, o.virtual_stages, ov.num_kv_heads);
        o.lr.style = meg::parse_lr_decay_style(decay);
        o.given = meg::cli::given_options(app);
        meg::Trainer trainer(o);
        return trainer.run();
      },
      // One rank failing ends the job: the others would wait for it in a collective forever.
      [](int status) {
        if (meg::World::initialized() && meg::World::get().distributed()) meg::World::get().abort(status);
      });
}
