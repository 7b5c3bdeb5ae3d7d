#include "cli/grpo_flags.h"

#include "cli/engine_flags.h"

namespace rqat::cli {

void add_grpo_flags(CLI::App& app, GrpoFlags& f) {
  auto& o = f.options;
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
  app.add_option("--instruction", o.prompt.instruction, "Appended to each problem")
      ->capture_default_str();
  app.add_option("--system-prompt", o.prompt.system_prompt, "System message");
  app.add_option("--chat-template", o.prompt.chat_template_file, "Chat template file");
  app.add_flag("--no-chat-template", f.no_chat_template, "Plain text prompts");
  app.add_flag("--disable-thinking", f.disable_thinking, "Qwen3: empty thinking block");
  add_quant_flags(app, f.quant);
  // Policy, LoRA, rollouts, objective and evaluation: GrpoCommandOptions::for_each.
  add_option_flags(app, o);
  add_engine_flags(app, o.rollout, "--rollout-batch");
  // grpo's batch is --prompts-per-step and its micro-batches its own --micro-batch-size.
  add_run_flags(app, f.run, {.skip = {"batch-size", "micro-batch-size"}});
  add_runtime_flags(app, f.runtime);
}

tools::GrpoCommandOptions GrpoFlags::resolve() {
  tools::GrpoCommandOptions o = options;
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
  quant.resolve(o.bits, o.spec, o.init, o.fake_quant);
  run.resolve(o.trainer, o.backend);
  runtime.apply();
  o.device = runtime.resolved_device();
  o.dtype = runtime.resolved_dtype();
  o.dequantize = runtime.dequantize;
  return o;
}

}  // namespace rqat::cli
