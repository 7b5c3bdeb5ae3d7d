#include "tools/grpo_command.h"

#include <fmt/format.h>

#include <ostream>

#include "data/training_batches.h"
#include "io/error.h"
#include "io/manifest.h"
#include "model/model_dir.h"
#include "ops/kernel_choice.h"
#include "quant/activation_quant.h"
#include "quant/load_model.h"
#include "quant/packed_gptq_linear.h"
#include "quant/quant_state.h"
#include "rl/grpo_step.h"
#include "rl/rewards.h"
#include "rl/rollouts.h"
#include "tokenizer/tokenizer.h"
#include "train/lora_model.h"
#include "train/qat_model.h"
#include "train/sharded_parameters.h"

namespace rqat::tools {
// A tool wires concerns together; the names of the ones it is mostly made of read unqualified.
using namespace rqat::rl;
using namespace rqat::train;
using namespace rqat::data;
namespace fs = std::filesystem;

namespace {

void check_options(const GrpoCommandOptions& o) {
  if (o.out_dir.empty()) fail("--out is required");
  if (!fs::is_regular_file(o.data)) fail("--data {}: file not found", o.data.string());
  if (o.num_generations < 2)
    fail("--num-generations must be >= 2 (advantages compare samples), got {}", o.num_generations);
  if (o.prompts_per_step < 1) fail("--prompts-per-step must be >= 1, got {}", o.prompts_per_step);
  if (o.epochs < 1) fail("--epochs must be >= 1, got {}", o.epochs);
  if (o.minibatches < 1) fail("--minibatches must be >= 1, got {}", o.minibatches);
  if (o.max_new_tokens < 1) fail("--max-new-tokens must be >= 1, got {}", o.max_new_tokens);
  if (!(o.temperature > 0))
    fail("--temperature must be > 0 for RL sampling, got {}", o.temperature);
}

// The policy and what it exports, by mode.
struct Policy {
  std::shared_ptr<model::CausalLM> model;
  quant::QuantSpec spec;
  bool quantized = false;  // qat: fake-quantized layers to materialize at export
  std::vector<std::string> lora_layers;
  size_t output_quant_layers = 0;  // layers whose output is fake-quantized (removed at export)
  io::Json quant_record;           // the manifest's "quant" when it is not `spec` (an NF4 base)
};

bool has_packed_gptq_layers(model::CausalLM& model) {
  for (const auto& slot : model.linear_layers())
    if (auto packed = std::dynamic_pointer_cast<quant::PackedGptqLinear>(*slot.layer))
      if (packed->packed()) return true;
  return false;
}

// The policy of o.mode; with --output-quant-bits every linear layer is then wrapped.
Policy load_mode_policy(const GrpoCommandOptions& o, const io::Artifact& artifact,
                        c10::Device device) {
  Policy p;
  p.model = quant::load_model(artifact, model::LoadOptions{at::kFloat, device, o.dequantize});
  if (o.mode == PolicyMode::kFull) return p;
  if (o.mode == PolicyMode::kQlora && o.qlora_base == QloraBase::kNf4) {
    // The frozen NF4 base keeps its packed codes; the adapters train over it.
    quant::attach_nf4(*p.model, o.spec, o.nf4.block_size, o.nf4.double_quant);
    p.quant_record = o.nf4.to_json(o.spec);
    p.lora_layers = attach_lora(*p.model, o.lora, o.lora_targets);
    return p;
  }
  if (o.mode == PolicyMode::kQlora && !o.dequantize && has_packed_gptq_layers(*p.model)) {
    // A GPTQ checkpoint: its packed layers are the frozen base as they stand, so rollouts decode
    // from the low-bit codes (quant/packed_gptq_linear.h); the adapters train over them.
    p.quant_record = p.model->config().raw.value("quantization_config", io::Json(nullptr));
    p.lora_layers = attach_lora(*p.model, o.lora, o.lora_targets);
    return p;
  }
  const QuantPlan plan = plan_quantization(o.model_dir, o.spec, o.init);
  std::vector<std::string> layers;
  p.spec = attach_quant_plan(*p.model, plan, o.model_dir, o.spec.bits, o.fake_quant, std::nullopt,
                             layers);
  if (o.mode == PolicyMode::kQat) {
    p.quantized = plan.quantize;
    if (const auto missing = quant::uncalibrated_input_layers(*p.model); !missing.empty())
      fail(
          "--act-grid nvfp4: {} layers (first {}) have no input global scale; start grpo from an "
          "artifact calibrated for it (ptq --act-grid nvfp4 --calib FILE, or qat-sft/qat-kd with "
          "--act-grid nvfp4)",
          missing.size(), missing.front());
    return p;
  }
  // qlora: the quantized weights become the frozen base (exactly the dequantized codes).
  if (plan.quantize) materialize_fake_quant(*p.model, p.spec);
  p.lora_layers = attach_lora(*p.model, o.lora, o.lora_targets);
  return p;
}

Policy load_policy(const GrpoCommandOptions& o, const io::Artifact& artifact, c10::Device device) {
  o.output_quant.validate();
  Policy p = load_mode_policy(o, artifact, device);
  p.output_quant_layers = quant::attach_output_quant(*p.model, o.output_quant).size();
  return p;
}

// The objective's loss options with the constant normalizer's bound (the longest completion).
GrpoLossOptions loss_options(const GrpoCommandOptions& o) {
  GrpoLossOptions loss = o.loss;
  if (loss.aggregation == LossAggregation::kConstantNormalizer)
    loss.max_response_tokens = o.max_new_tokens;
  return loss;
}

// What a resumed run must share with its checkpoint: the inputs, the quantization, every setting
// of GrpoCommandOptions::for_each and of the trainer.
io::Json grpo_fingerprint(const GrpoCommandOptions& o, const Policy& policy, size_t prompts) {
  io::Json fingerprint = {
      {"tool", "grpo"},
      {"model", o.model_dir.string()},
      {"data", o.data.string()},
      {"prompts", prompts},
      {"quant", !policy.quant_record.is_null()                    ? policy.quant_record
                : policy.quantized || !policy.lora_layers.empty() ? policy.spec.to_json()
                                                                  : io::Json(nullptr)}};
  fingerprint.update(io::settings_json(o));  // mode, rollouts, objective, ... at the top level
  fingerprint["optimizer"] = trainer_fingerprint(o.trainer);
  if (!o.record.settings.is_null()) fingerprint["options"] = o.record.settings;
  return fingerprint;
}

GrpoStepOptions step_options(const GrpoCommandOptions& o, const model::ModelConfig& config,
                             int64_t pad_id, c10::Device device, bool lockstep) {
  GrpoStepOptions s;
  s.prompts_per_step = o.prompts_per_step;
  s.rollout.num_generations = o.num_generations;
  s.rollout.params.temperature = o.temperature;
  s.rollout.params.top_p = o.top_p;
  s.rollout.params.top_k = o.top_k;
  s.rollout.params.max_new_tokens = o.max_new_tokens;
  s.rollout.params.stop_token_ids.assign(config.eos_token_ids.begin(), config.eos_token_ids.end());
  s.rollout.engine = o.rollout;
  s.rollout.seed = o.trainer.seed;
  s.scoring = {o.num_generations, o.advantage, o.mask_truncated, !o.keep_degenerate_groups};
  s.loss = loss_options(o);
  s.temperature = o.temperature;
  s.epochs = o.epochs;
  s.minibatches = o.minibatches;
  s.micro_batch_size = o.micro_batch_size;
  s.pad_id = pad_id;
  s.device = device;
  s.lockstep = lockstep;
  return s;
}

// eval-math on the held-out subset (greedy), when a benchmark is named.
EvaluateFn make_evaluate(const GrpoCommandOptions& o, model::CausalLM& policy, c10::Device device) {
  if (o.eval_benchmark.empty()) return nullptr;
  return [&o, &policy, device](int64_t step) {
    const auto summary =
        eval::evaluate_model_in_memory(policy, o.model_dir, o.eval_benchmark, o.eval_benchmark_data,
                                       o.eval_limit, o.eval_max_new_tokens, o.prompt, device,
                                       o.out_dir / "eval-math" / fmt::format("step-{:08d}", step));
    return io::Json{{"accuracy", summary.overall.pass1},
                    {"mean_tokens", summary.overall.mean_tokens}};
  };
}

// The artifact: the trained policy (quant state for qat; merged adapters, and the adapter alone,
// for qlora), metrics.h5 and the manifest.
void write_artifact(const GrpoCommandOptions& o, Policy& policy, const io::Json& fingerprint,
                    int world_size, StepMetricsLog& metrics, const GrpoCommandResult& result,
                    std::ostream& out) {
  quant::remove_output_quant(*policy.model);  // the artifact holds the trained weights
  quant::QuantState state;
  if (policy.quantized) state = materialize_fake_quant(*policy.model, policy.spec);
  if (!policy.lora_layers.empty()) {
    save_lora_adapter(*policy.model, o.lora, o.lora_targets, o.model_dir.string(),
                      o.out_dir / "adapter");
    merge_lora(*policy.model);
  }
  model::SaveOptions save;
  save.dtype = at::kFloat;
  save.tokenizer_from = o.model_dir;
  model::save_causal_lm(*policy.model, o.out_dir, save);
  if (policy.quantized) quant::save_quant_state(o.out_dir, state);
  metrics.write_hdf5({{"tool", "grpo"}});
  io::Manifest manifest;
  manifest.tool = "grpo";
  manifest.kernels = ops::kernel_choices_json();
  manifest.inputs["model"] = o.model_dir.string();
  manifest.inputs["data"] = o.data.string();
  manifest.config = fingerprint;
  manifest.config.erase("model");
  manifest.config["world_size"] = world_size;
  manifest.config["shard"] = enum_name(o.trainer.shard);
  if (!o.record.options.is_null()) manifest.config["options"] = o.record.options;
  manifest.metrics = {
      {"steps", result.steps_done},
      {"final_reward", result.mean_rewards.empty() ? 0.0 : result.mean_rewards.back()}};
  if (!result.last_eval.empty()) manifest.metrics["eval_accuracy"] = result.last_eval["accuracy"];
  manifest.metrics["state_bytes_per_rank"] = state_bytes_json(result.state_bytes);
  io::write_manifest(o.out_dir, manifest);
  out << fmt::format("wrote {}\n", o.out_dir.string());
}

}  // namespace

GrpoCommandResult run_grpo_command(const GrpoCommandOptions& o, std::ostream& out) {
  check_options(o);
  const auto reward = make_reward(o.reward, "--reward");
  const io::Artifact artifact = io::Artifact::open(o.model_dir);  // read once
  const auto config = model::ModelConfig::from_artifact(artifact);
  const DistributedEnv env = detect_distributed_env();
  const c10::Device device = o.device.is_cuda() && env.world_size > 1
                                 ? c10::Device(c10::kCUDA, static_cast<int8_t>(env.local_rank))
                                 : o.device;
  auto comm = Communicator::create(env, o.backend, device);
  if (o.prompts_per_step % comm->world_size() != 0)
    fail("--prompts-per-step {} must be a multiple of the number of processes ({})",
         o.prompts_per_step, comm->world_size());
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer = tokenizer::Tokenizer::load(artifact);
  const auto prompts =
      load_rl_prompts(o.data, o.fields, o.prompt, o.max_prompts, artifact, *tokenizer);
  const SequenceSet prompt_set = prompt_sequences(prompts);

  Policy policy = load_policy(o, artifact, device);
  policy.model->set_activation_checkpointing(o.activation_checkpointing);
  std::shared_ptr<model::CausalLM> reference;
  if (o.loss.kl_beta > 0) {
    reference = load_policy(o, artifact, device).model;  // the policy as it starts, frozen
    for (auto& p : reference->parameters()) p.requires_grad_(false);
  }
  // Sharded runs with --dtype bf16 compute (rollouts, training forwards) in bf16 copies of fp32
  // masters; unsharded runs keep the policy in float32.
  const ShardOptions shard = shard_options(o.trainer.shard, *comm, o.dtype == at::kBFloat16);
  if (shard.compute_dtype != at::kFloat) use_compute_dtype(*policy.model, shard.compute_dtype);
  // The frozen reference computes in bf16 with --dtype bf16 (the default on CUDA) in every mode:
  // half the memory of a float32 copy; its log-probabilities are float32 all the same.
  if (reference && o.dtype == at::kBFloat16) use_compute_dtype(*reference, at::kBFloat16);
  TrainingOptimizer optimizer(trainable_parameters(*policy.model), o.trainer.adamw, shard);
  if (auto* scope = optimizer.layer_scope()) policy.model->set_layer_scope(scope);
  if (reference)
    if (auto* scope = optimizer.shard_frozen(all_parameters(*reference)))
      reference->set_layer_scope(scope);
  StepMetricsLog metrics(o.out_dir, comm->is_main());
  const io::Json fingerprint = grpo_fingerprint(o, policy, prompts.size());
  TrainerOptions trainer = o.trainer;
  trainer.out_dir = o.out_dir;
  trainer.batch_size = o.prompts_per_step;
  trainer.micro_batch_size = 0;
  trainer.updates_per_step = o.epochs * o.minibatches;
  trainer.device = device;
  trainer.fingerprint = fingerprint;
  trainer.show_progress = comm->is_main();
  trainer.tool = "grpo";
  if (comm->is_main())
    out << fmt::format(
               "grpo ({}): {} prompts from {}, {} x {} samples per step, {} processes; {} "
               "trainable "
               "parameters\n",
               enum_name(o.mode), prompts.size(), o.data.string(), o.prompts_per_step,
               o.num_generations, comm->world_size(), optimizer.parameter_count())
        << "options:\n"
        << io::options_table(o) << io::options_table(o.trainer);
  if (comm->is_main() && policy.output_quant_layers > 0)
    out << fmt::format(
        "policy: the outputs of {} linear layers fake-quantized to {} bits (dynamic per-tensor "
        "scale, {} gradient)\n",
        policy.output_quant_layers, o.output_quant.bits, enum_name(o.output_quant.grad));

  GrpoStep step(*policy.model, reference.get(), tokenizer, prompts, *reward, *comm,
                step_options(o, config, padding_token_id(*tokenizer), device,
                             optimizer.layer_scope() != nullptr && comm->world_size() > 1));
  Trainer loop(*policy.model, optimizer, prompt_set, *comm, metrics, trainer);
  const TrainerResult run = loop.run(std::ref(step), make_evaluate(o, *policy.model, device), out);

  GrpoCommandResult result;
  result.start_step = run.start_step;
  result.steps_done = run.steps_done;
  result.mean_rewards = step.mean_rewards();
  result.state_bytes = run.state_bytes;
  result.last_eval = run.last_eval;
  if (!result.last_eval.empty()) result.last_eval["step"] = run.steps_done;
  if (run.stopped_by_signal) {
    result.exit_code = 128 + run.stopped_by_signal;
    return result;
  }
  if (comm->is_main())
    write_artifact(o, policy, fingerprint, comm->world_size(), metrics, result, out);
  return result;
}

}  // namespace rqat::tools
