// grpo as a library call (apps/grpo only parses flags): GRPO reinforcement learning of a policy on
// prompts with gold answers, in three policy modes that serve both studies:
//   full   every weight trains in full precision;
//   qat    quantization-aware RL: fake-quantized weights with the straight-through estimator,
//          from a ptq/qat artifact's quant state (or RTN); rollouts come from the quantized policy;
//   qlora  a frozen quantized base (the artifact's dequantized weights, or RTN of the model) plus
//          LoRA adapters; on export the adapters merge into full-precision weights (re-quantize
//          them with ptq: "PTQ after RL" is grpo --mode full then ptq).
// One step: sample G completions for each of the step's prompts with the generation engine, score
// them (rl/rewards.h), compute group-relative advantages, then `epochs` passes over the rollouts
// in `minibatches` optimizer updates of the clipped objective (rl/grpo_objective.h).
// Data parallel, checkpoints, resume, signals, NaN guard and metrics are the trainers' shared code
// (train/training_run.h, docs/qat.md); outputs are an artifact like qat's plus the rollout metrics.
#pragma once

#include <ATen/core/ScalarType.h>
#include <c10/core/Device.h>

#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "eval/benchmark.h"
#include "io/enum_names.h"
#include "io/options.h"
#include "model/lora_linear.h"
#include "quant/fake_quant_linear.h"
#include "quant/nf4_linear.h"
#include "quant/output_quant_linear.h"
#include "quant/quant_spec.h"
#include "rl/grpo_objective.h"
#include "tools/eval_run/evaluate.h"
#include "tools/qat_command.h"
#include "train/distributed.h"
#include "train/trainer.h"

namespace rqat::tools {

enum class PolicyMode { kFull, kQat, kQlora, kCount };
constexpr EnumNames<PolicyMode> enum_names(PolicyMode) { return {"full", "qat", "qlora"}; }
// The frozen base of --mode qlora: uniform (RTN with --bits/--group-size, or the artifact's quant
// state) or NF4 (bitsandbytes' QLoRA base, --nf4-block-size, --nf4-double-quant).
enum class QloraBase { kUniform, kNf4, kCount };
constexpr EnumNames<QloraBase> enum_names(QloraBase) { return {"uniform", "nf4"}; }

struct GrpoCommandOptions {
  PolicyMode mode = PolicyMode::kFull;
  std::filesystem::path model_dir;
  std::filesystem::path out_dir;
  // Prompts: a JSONL with a problem and a gold answer per line (fields as eval-math's).
  std::filesystem::path data;
  eval::BenchmarkSpec fields;  // name, problem/answer/id fields
  eval::PromptOptions prompt;  // chat template, instruction, system prompt (as eval-math)
  size_t max_prompts = 0;      // 0: all
  // qat / qlora quantization (as qat-sft's: spec.bits 0 = the quant state's, 16 = none).
  quant::QuantSpec spec{.bits = quant::QuantSpec::kBitsOfInput};
  train::QuantInit init = train::QuantInit::kAuto;
  quant::FakeQuantOptions fake_quant;
  // Study A's hook variant: every linear layer's output fake-quantized (any mode; off by default).
  quant::OutputQuantOptions output_quant;
  QloraBase qlora_base = QloraBase::kUniform;
  quant::Nf4Options nf4;
  model::LoraOptions lora;
  std::vector<std::string> lora_targets = {R"(.*\.(q|k|v|o|gate|up|down)_proj)"};
  // Rollouts.
  int64_t prompts_per_step = 8;  // over all processes
  int num_generations = 8;       // G completions per prompt (not the quantizer's group size)
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;
  int64_t max_new_tokens = 1024;
  generation::EngineOptions rollout{.max_batch = 64};  // rollout batch and KV budget
  std::string reward = "math";                         // rl/rewards.h spec, e.g. "math+format:0.1"
  // Objective.
  rl::AdvantageMode advantage = rl::AdvantageMode::kGroupNormalized;
  rl::GrpoLossOptions loss;
  bool mask_truncated = false;          // completions cut at max_new_tokens do not count
  bool keep_degenerate_groups = false;  // groups with equal rewards (zero advantage) train too
  int64_t epochs = 1;                   // passes over each rollout batch
  int64_t minibatches = 1;              // optimizer updates per pass
  int64_t micro_batch_size = 0;         // sequences per forward/backward (0: a whole minibatch)
  // Optimization and run control (steps count rollout batches; lr is scheduled over updates).
  train::TrainerOptions trainer;
  bool activation_checkpointing = false;
  // eval-math on a held-out benchmark subset (greedy) every trainer.eval_every steps.
  std::string eval_benchmark;
  std::string eval_benchmark_data;
  int64_t eval_limit = 32;
  int64_t eval_max_new_tokens = 1024;
  train::CommBackend backend = train::CommBackend::kAuto;
  at::ScalarType dtype = at::kFloat;
  bool dequantize = false;  // a GPTQ policy checkpoint: dequantize at load (default: packed)
  c10::Device device = c10::kCPU;
  // The tool's declared options as given (cli/*_config.h): the manifest records them all, the
  // resume fingerprint their settings. Null when made without a configuration (tests, benches).
  io::OptionsRecord record;

  // The options of the policy, the rollouts and the objective, each once (io/options.h): their
  // flags and the settings part of the resume fingerprint derive from this list. (Inputs,
  // prompt rendering, quantization, optimization and runtime have flags of their own.)
  template <class Self, class Visitor>
  static void for_each(Self& self, Visitor& v) {
    using io::Role;
    v.value(self.mode, "mode",
            "Policy: full (all weights), qat (fake-quantized, STE) or qlora (frozen quantized base "
            "+ LoRA)");
    v.value(self.max_prompts, "max-prompts", "Use the first N prompts (0: all)");
    quant::OutputQuantOptions::for_each(self.output_quant, v);
    v.value(self.qlora_base, "qlora-base",
            "qlora: frozen base of uniform levels (--bits, or the quant state) or nf4");
    quant::Nf4Options::for_each(self.nf4, v);
    v.value(self.lora.rank, "lora-rank", "qlora: adapter rank");
    v.value(self.lora.alpha, "lora-alpha", "qlora: scale alpha / rank");
    v.value(self.lora.dropout, "lora-dropout", "qlora: adapter input dropout");
    v.value(self.lora_targets, "lora-target-modules",
            "qlora: regexes of wrapped layers (default: the 7 projections of every block)");
    v.value(self.prompts_per_step, "prompts-per-step", "Prompts per step (all processes)");
    v.value(self.num_generations, "num-generations", "Completions per prompt (G, the group size)");
    v.value(self.temperature, "temperature", "Sampling temperature");
    v.value(self.top_p, "top-p", "Nucleus sampling");
    v.value(self.top_k, "top-k", "Top-k sampling (0: off)");
    v.value(self.max_new_tokens, "max-new-tokens", "Response length limit");
    v.value(self.reward, "reward",
            "Reward spec: math, math_boxed, format[:w], combined with + (e.g. math+format:0.1)");
    v.value(self.advantage, "advantage", "grpo ((r - mean) / std) or dr_grpo (r - mean)");
    v.value(self.loss.aggregation, "loss-aggregation",
            "seq_mean (GRPO), token_mean (DAPO) or constant (Dr. GRPO)");
    v.value(self.loss.clip_low, "clip-low", "Ratio clip below 1 - eps");
    v.value(self.loss.clip_high, "clip-high", "Ratio clip above 1 + eps");
    v.value(self.loss.kl_beta, "kl-beta", "KL (k3) penalty to the initial policy");
    v.value(self.loss.tis_cap, "tis-cap",
            "Truncated importance sampling cap for rollout/training mismatch (0: off)");
    v.value(self.mask_truncated, "mask-truncated", "Truncated completions do not train");
    v.value(self.keep_degenerate_groups, "keep-degenerate-groups",
            "Train on groups whose rewards are all equal (skipped by default)");
    v.value(self.epochs, "epochs", "Passes over each rollout batch");
    v.value(self.minibatches, "minibatches", "Optimizer updates per pass");
    v.value(self.micro_batch_size, "micro-batch-size",
            "Sequences per forward/backward (0: a whole minibatch)", Role::kRunControl);
    v.value(self.activation_checkpointing, "activation-checkpointing",
            "Recompute each block in the backward pass", Role::kRunControl);
    v.value(self.eval_benchmark, "eval-benchmark", "eval-math benchmark evaluated (greedy)",
            Role::kRunControl);
    v.value(self.eval_benchmark_data, "eval-benchmark-data", "Its JSONL ($RQAT_DATA_DIR)",
            Role::kRunControl);
    v.value(self.eval_limit, "eval-benchmark-limit", "Problems evaluated", Role::kRunControl);
    v.value(self.eval_max_new_tokens, "eval-max-new-tokens", "eval-math generation limit",
            Role::kRunControl);
  }
};

struct GrpoCommandResult {
  int64_t start_step = 0;
  int64_t steps_done = 0;
  int exit_code = 0;                 // 128 + signal when stopped by one (checkpoint written)
  std::vector<double> mean_rewards;  // per step run in this process (for tests)
  io::Json last_eval = io::Json::object();
  train::StateBytes state_bytes;  // this process's, at the first update
};

GrpoCommandResult run_grpo_command(const GrpoCommandOptions& options, std::ostream& out);

}  // namespace rqat::tools
