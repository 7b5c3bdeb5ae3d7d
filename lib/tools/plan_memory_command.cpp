// See plan_memory_command.h. The rules that turn flags into shapes are the trainers' own: qat
// splits
// --batch-size over the ranks and cuts each rank's share into --micro-batch-size sequences; grpo
// gives each rank prompts-per-step / W prompts of G completions each, deals them into
// --minibatches and those into micro-batches, and runs the reference policy only when kl-beta > 0.
#include "tools/plan_memory_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <ostream>

#include "io/artifact.h"
#include "io/error.h"
#include "model/model_config.h"

namespace rqat::tools {

namespace {

// Flag values beyond these are typing mistakes, and keep every product of the plan inside int64.
constexpr int64_t kMaxWorldSize = int64_t{1} << 20;
constexpr int64_t kMaxCount = int64_t{1} << 24;   // sequences, prompts, generations
constexpr int64_t kMaxTokens = int64_t{1} << 24;  // per sequence

void check_range(int64_t value, int64_t low, int64_t high, const char* flag) {
  if (value < low || value > high)
    fail("{} must be between {} and {}, got {}", flag, low, high, value);
}

int64_t compute_bytes(const std::string& dtype) {
  if (dtype == "bf16" || dtype == "bfloat16" || dtype == "auto") return 2;
  if (dtype == "f32" || dtype == "float32") return 4;
  fail("--dtype '{}': expected bf16, f32 or auto (bf16 on a GPU)", dtype);
}

// --model DIR or --config FILE (`what` names them for the teacher).
model::ModelConfig load_config(const std::filesystem::path& dir, const std::filesystem::path& file,
                               const char* dir_flag, const char* file_flag) {
  if (!dir.empty() && !file.empty()) fail("{} and {}: give one of them", dir_flag, file_flag);
  if (!file.empty()) return model::ModelConfig::load(file);
  if (!std::filesystem::is_regular_file(dir / "config.json"))
    fail("{} {}: no config.json there", dir_flag, dir.string());
  return model::ModelConfig::from_artifact(io::Artifact::open(dir));
}

}  // namespace

train::MemoryPlanInput memory_plan_input(const PlanMemoryOptions& o) {
  if (o.model_dir.empty() && o.config_file.empty()) fail("give --model DIR or --config FILE");
  train::MemoryPlanInput in;
  in.model = load_config(o.model_dir, o.config_file, "--model", "--config");
  check_range(o.world_size, 1, kMaxWorldSize, "--world-size");
  in.world_size = o.world_size;
  in.shard = o.shard;
  in.compute_bytes = compute_bytes(o.dtype);
  // The teacher (bf16 on CUDA) and grpo's reference follow --dtype in every mode.
  in.frozen_bytes = in.compute_bytes;
  // grpo computes in bf16 copies only when sharded; unsharded it keeps float32 weights and
  // rollouts (lib/tools/grpo_command.cpp).
  if (o.tool == PlanTool::kGrpo && o.shard == train::ShardMode::kNone) in.compute_bytes = 4;
  in.activation_checkpointing = o.activation_checkpointing;
  check_range(o.micro_batch_size, 0, kMaxCount, "--micro-batch-size");
  if (o.gpu_memory_gib < 0) fail("--gpu-memory must not be negative, got {}", o.gpu_memory_gib);
  const bool kd = o.tool == PlanTool::kQatKd;
  if (!kd && (!o.teacher_dir.empty() || !o.teacher_config.empty()))
    fail("--teacher: only --tool qat-kd has a teacher");

  if (o.tool == PlanTool::kGrpo) {
    check_range(o.prompts_per_step, 1, kMaxCount, "--prompts-per-step");
    check_range(o.num_generations, 1, kMaxCount, "--num-generations");
    check_range(o.max_new_tokens, 1, kMaxTokens, "--max-new-tokens");
    check_range(o.max_prompt_length, 1, kMaxTokens, "--max-prompt-length");
    check_range(o.minibatches, 1, kMaxCount, "--minibatches");
    if (o.prompts_per_step % o.world_size != 0)
      fail("--prompts-per-step {} must be a multiple of --world-size {}", o.prompts_per_step,
           o.world_size);
    if (!(o.kl_beta >= 0)) fail("--kl-beta must be >= 0, got {}", o.kl_beta);
    const int64_t prompts = o.prompts_per_step / o.world_size;
    const int64_t rows = prompts * o.num_generations;
    const int64_t minibatch = (rows + o.minibatches - 1) / o.minibatches;
    in.micro_batch = o.micro_batch_size > 0 ? std::min(o.micro_batch_size, minibatch) : minibatch;
    in.sequence_length = o.max_prompt_length + o.max_new_tokens;
    in.rollouts = train::RolloutShape{prompts, o.num_generations, in.sequence_length};
    if (o.mode == PolicyMode::kQlora) in.lora = train::LoraAdapters{o.lora_rank, o.lora_targets};
    in.fake_quant = o.mode == PolicyMode::kQat;
    if (o.kl_beta > 0) in.frozen = in.model;  // the policy as it starts
  } else {
    if (o.mode != PolicyMode::kFull)
      fail("--mode {}: policy modes are grpo's (qat-sft and qat-kd train every weight)",
           enum_name(o.mode));
    check_range(o.batch_size, 1, kMaxCount, "--batch-size");
    check_range(o.max_length, 2, kMaxTokens, "--max-length");
    if (o.batch_size % o.world_size != 0)
      fail("--batch-size {} must be a multiple of --world-size {}", o.batch_size, o.world_size);
    const int64_t per_rank = o.batch_size / o.world_size;
    in.micro_batch = o.micro_batch_size > 0 ? std::min(o.micro_batch_size, per_rank) : per_rank;
    in.sequence_length = o.max_length;
    in.fake_quant = o.bits != 16;
    if (kd) {
      in.frozen =
          o.teacher_dir.empty() && o.teacher_config.empty()
              ? in.model
              : load_config(o.teacher_dir, o.teacher_config, "--teacher", "--teacher-config");
      in.frozen_logits = true;
    }
  }
  return in;
}

train::MemoryPlan run_plan_memory_command(const PlanMemoryOptions& o, std::ostream& out,
                                          std::ostream& err) {
  const train::MemoryPlanInput in = memory_plan_input(o);
  const train::MemoryPlan plan = train::plan_memory(in);
  const double need = train::gib(plan.total);
  const bool too_big = o.gpu_memory_gib > 0 && need > o.gpu_memory_gib;
  const std::string warning =
      fmt::format("warning: {} needs {:.1f} GiB per rank, the GPU has {:.1f} GiB",
                  enum_name(o.tool), need, o.gpu_memory_gib);
  if (o.json) {
    io::Json j = train::memory_plan_json(plan, in);
    j["tool"] = std::string(enum_name(o.tool));
    if (o.gpu_memory_gib > 0) {
      j["gpu_memory_gib"] = o.gpu_memory_gib;
      j["fits"] = !too_big;
    }
    out << j.dump(2) << "\n";
    if (too_big) err << warning << "\n";
  } else {
    out << enum_name(o.tool) << " ";
    out << train::format_memory_plan(plan, in);
    if (too_big) out << warning << "\n";
  }
  return plan;
}

}  // namespace rqat::tools
