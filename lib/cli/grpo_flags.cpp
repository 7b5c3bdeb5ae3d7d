#include "cli/grpo_flags.h"

#include "cli/engine_flags.h"

namespace rqat::cli {

void add_grpo_flags(CLI::App& app, GrpoFlags& f) {
  auto& o = f.options;
  app.add_option("--mode", f.mode,
                 "Policy: full (all weights), qat (fake-quantized, STE) or qlora (frozen quantized "
                 "base + LoRA)")
      ->capture_default_str();
  app.add_option("--model", f.model_dir, "Policy: a model directory or a ptq/qat artifact")
      ->required();
  app.add_option("--out", f.out_dir, "Output artifact directory (also checkpoints and metrics)")
      ->required();
  // Prompts.
  app.add_option("--data", f.data, "Prompts with gold answers, JSONL")->required();
  app.add_option("--problem-field", f.problem_field, "JSONL problem field")->capture_default_str();
  app.add_option("--answer-field", f.answer_field, "JSONL gold answer field")
      ->capture_default_str();
  app.add_option("--id-field", f.id_field, "JSONL id field (default: the line index)");
  app.add_flag("--gsm8k-answers", f.gsm8k_answers, "Gold is what follows #### (GSM8K solutions)");
  app.add_option("--max-prompts", o.max_prompts, "Use the first N prompts (0: all)");
  app.add_option("--instruction", o.prompt.instruction, "Appended to each problem")
      ->capture_default_str();
  app.add_option("--system-prompt", o.prompt.system_prompt, "System message");
  app.add_option("--chat-template", o.prompt.chat_template_file, "Chat template file");
  app.add_flag("--no-chat-template", f.no_chat_template, "Plain text prompts");
  app.add_flag("--disable-thinking", f.disable_thinking, "Qwen3: empty thinking block");
  add_quant_flags(app, f.quant);
  // LoRA.
  app.add_option("--lora-rank", o.lora.rank, "qlora: adapter rank")->capture_default_str();
  app.add_option("--lora-alpha", o.lora.alpha, "qlora: scale alpha / rank")->capture_default_str();
  app.add_option("--lora-dropout", o.lora.dropout, "qlora: adapter input dropout")
      ->capture_default_str();
  app.add_option("--lora-target-modules", f.lora_targets,
                 "qlora: regexes of wrapped layers (default: the 7 projections of every block)");
  // Rollouts.
  app.add_option("--prompts-per-step", o.prompts_per_step, "Prompts per step (all processes)")
      ->capture_default_str();
  app.add_option("--num-generations", o.group_size, "Completions per prompt (G, the group size)")
      ->capture_default_str();
  app.add_option("--temperature", o.temperature, "Sampling temperature")->capture_default_str();
  app.add_option("--top-p", o.top_p, "Nucleus sampling")->capture_default_str();
  app.add_option("--top-k", o.top_k, "Top-k sampling (0: off)")->capture_default_str();
  app.add_option("--max-new-tokens", o.max_new_tokens, "Response length limit")
      ->capture_default_str();
  add_engine_flags(app, o.rollout, "--rollout-batch");
  app.add_option(
         "--reward", o.reward,
         "Reward spec: math, math_boxed, format[:w], combined with + (e.g. math+format:0.1)")
      ->capture_default_str();
  // Objective.
  app.add_option("--advantage", f.advantage, "grpo ((r - mean) / std) or dr_grpo (r - mean)")
      ->capture_default_str();
  app.add_option("--loss-aggregation", f.aggregation,
                 "seq_mean (GRPO), token_mean (DAPO) or constant (Dr. GRPO)")
      ->capture_default_str();
  app.add_option("--clip-low", o.loss.clip_low, "Ratio clip below 1 - eps")->capture_default_str();
  app.add_option("--clip-high", o.loss.clip_high, "Ratio clip above 1 + eps")
      ->capture_default_str();
  app.add_option("--kl-beta", o.loss.kl_beta, "KL (k3) penalty to the initial policy")
      ->capture_default_str();
  app.add_option("--tis-cap", o.loss.tis_cap,
                 "Truncated importance sampling cap for rollout/training mismatch (0: off)")
      ->capture_default_str();
  app.add_flag("--mask-truncated", o.mask_truncated, "Truncated completions do not train");
  app.add_flag("!--keep-degenerate-groups", o.skip_degenerate_groups,
               "Train on groups whose rewards are all equal (skipped by default)");
  app.add_option("--epochs", o.epochs, "Passes over each rollout batch")->capture_default_str();
  app.add_option("--minibatches", o.minibatches, "Optimizer updates per pass")
      ->capture_default_str();
  app.add_option("--micro-batch-size", o.micro_batch_size,
                 "Sequences per forward/backward (0: a whole minibatch)")
      ->capture_default_str();
  app.add_flag("--activation-checkpointing", o.activation_checkpointing,
               "Recompute each block in the backward pass");
  app.add_option("--eval-benchmark", o.eval_benchmark, "eval-math benchmark evaluated (greedy)");
  app.add_option("--eval-benchmark-data", o.eval_benchmark_data, "Its JSONL ($RQAT_DATA_DIR)");
  app.add_option("--eval-benchmark-limit", o.eval_limit, "Problems evaluated")
      ->capture_default_str();
  app.add_option("--eval-max-new-tokens", o.eval_max_new_tokens, "eval-math generation limit")
      ->capture_default_str();
  add_run_flags(app, f.run, "Rollout steps");
  add_runtime_flags(app, f.runtime);
}

rl::GrpoCommandOptions GrpoFlags::resolve() {
  rl::GrpoCommandOptions o = options;
  o.mode = rl::parse_policy_mode(mode, "--mode");
  o.model_dir = model_dir;
  o.out_dir = out_dir;
  o.data = data;
  o.fields.name = "prompts";
  o.fields.problem_fields = {problem_field};
  o.fields.answer_field = answer_field;
  o.fields.gsm8k_gold = gsm8k_answers;
  o.fields.id_field = id_field;
  o.prompt.use_chat_template = !no_chat_template;
  o.prompt.enable_thinking = !disable_thinking;
  if (!lora_targets.empty()) o.lora_targets = lora_targets;
  quant.resolve(o.bits, o.spec, o.init, o.fake_quant);
  run.resolve(o.trainer, o.backend);
  o.advantage = rl::parse_advantage_mode(advantage, "--advantage");
  o.loss.aggregation = rl::parse_loss_aggregation(aggregation, "--loss-aggregation");
  runtime.apply_threads();
  o.device = runtime.resolved_device();
  o.dtype = runtime.resolved_dtype();
  return o;
}

}  // namespace rqat::cli
