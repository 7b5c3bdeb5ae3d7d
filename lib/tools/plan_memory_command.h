// `rqat plan-memory`: the per-rank GPU memory of a qat-sft, qat-kd or grpo run
// (train/memory_plan.h) from a config.json and the run's flags, before launching it. The flags are
// spelt as the trainers spell them (--shard, --micro-batch-size, --max-length, --prompts-per-step,
// --num-generations,
// ...), so `rqat run --dry-run` passes a stage's own flags through.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "data/training_batches.h"
#include "io/enum_names.h"
#include "io/options.h"
#include "tools/grpo_command.h"
#include "train/memory_plan.h"
#include "train/shard_mode.h"
#include "train/trainer.h"

namespace rqat::tools {

enum class PlanTool { kQatSft, kQatKd, kGrpo, kCount };
constexpr EnumNames<PlanTool> enum_names(PlanTool) { return {"qat-sft", "qat-kd", "grpo"}; }

// grpo's defaults, so that an omitted flag plans what the tool would run.
inline const GrpoCommandOptions& grpo_defaults() {
  static const GrpoCommandOptions defaults;
  return defaults;
}

struct PlanMemoryOptions {
  std::filesystem::path model_dir;       // reads model_dir/config.json
  std::filesystem::path config_file;     // or a config.json itself
  std::filesystem::path teacher_dir;     // qat-kd (default: the student's shape)
  std::filesystem::path teacher_config;  // or the teacher's config.json
  PlanTool tool = PlanTool::kQatSft;
  int64_t world_size = 1;
  train::ShardMode shard = train::ShardMode::kNone;
  std::string dtype = "bf16";  // as the trainers' --dtype; auto is bf16 (a GPU run)
  bool activation_checkpointing = false;
  // qat-sft / qat-kd (defaults as theirs).
  int64_t batch_size = train::TrainerOptions{}.batch_size;
  int64_t micro_batch_size = 0;  // 0: all of the rank's sequences (qat) or minibatch (grpo)
  int64_t max_length = data::SequenceOptions{}.max_length;
  int bits = 0;  // 16: full precision (no fake quantization); other values, or 0, quantize
  // grpo (defaults as grpo's).
  PolicyMode mode = PolicyMode::kFull;
  int64_t lora_rank = grpo_defaults().lora.rank;
  std::vector<std::string> lora_targets = grpo_defaults().lora_targets;
  int64_t prompts_per_step = grpo_defaults().prompts_per_step;
  int64_t num_generations = grpo_defaults().num_generations;
  int64_t max_new_tokens = grpo_defaults().max_new_tokens;
  int64_t max_prompt_length = 512;  // grpo has no such flag: prompts are as long as they are
  int64_t minibatches = grpo_defaults().minibatches;
  double kl_beta = grpo_defaults().loss.kl_beta;
  // Output.
  double gpu_memory_gib = 0;  // > 0: warn when the plan needs more
  bool json = false;

  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.model_dir, "model", "Model directory (reads DIR/config.json)");
    v.value(self.config_file, "config", "A config.json instead of --model");
    v.value(self.teacher_dir, "teacher",
            "qat-kd: teacher model directory (default: the student's shape)");
    v.value(self.teacher_config, "teacher-config", "qat-kd: the teacher's config.json instead");
    v.value(self.tool, "tool", "The run planned: qat-sft, qat-kd or grpo");
    v.value(self.world_size, "world-size", "Data-parallel ranks (one per GPU)");
    v.value(self.shard, "shard", "none, optimizer, gradients or parameters (ZeRO-1/2/3)");
    v.value(self.dtype, "dtype", "Compute dtype: bf16, f32 (auto: bf16)");
    v.value(self.activation_checkpointing, "activation-checkpointing",
            "Recompute each block in the backward pass (--shard gradients/parameters always do)");
    v.value(self.batch_size, "batch-size", "qat: sequences per optimizer step (all ranks)");
    v.value(
        self.micro_batch_size, "micro-batch-size",
        "Sequences per forward/backward on one rank (0: qat all of the rank's, grpo a minibatch)");
    v.value(self.max_length, "max-length", "qat: tokens per training sequence");
    v.value(self.bits, "bits", "qat: 16 trains in full precision; otherwise fake-quantized");
    v.value(self.mode, "mode", "grpo: full, qat (fake-quantized) or qlora (LoRA adapters)");
    v.value(self.lora_rank, "lora-rank", "grpo qlora: adapter rank");
    v.value(self.lora_targets, "lora-target-modules", "grpo qlora: regexes of wrapped layers");
    v.value(self.prompts_per_step, "prompts-per-step", "grpo: prompts per step (all ranks)");
    v.value(self.num_generations, "num-generations", "grpo: completions per prompt");
    v.value(self.max_new_tokens, "max-new-tokens", "grpo: response length limit");
    v.value(self.max_prompt_length, "max-prompt-length", "grpo: longest prompt in tokens");
    v.value(self.minibatches, "minibatches", "grpo: optimizer updates per pass");
    v.value(self.kl_beta, "kl-beta", "grpo: > 0 keeps a frozen reference policy");
    v.value(self.gpu_memory_gib, "gpu-memory", "GiB per GPU: warn when the plan needs more",
            Role::kRunControl);
    v.value(self.json, "json", "Print the plan as JSON", Role::kRunControl);
  }
};

// The planner's input from the options: configs read, defaults resolved, flags checked (errors
// name the flag).
train::MemoryPlanInput memory_plan_input(const PlanMemoryOptions& options);

// Prints the plan (a table, or JSON with --json) to `out`; when it needs more than --gpu-memory,
// one line "warning: ..." (to `out` after a table, to `err` after JSON). Returns the plan.
train::MemoryPlan run_plan_memory_command(const PlanMemoryOptions& options, std::ostream& out,
                                          std::ostream& err);

}  // namespace rqat::tools
