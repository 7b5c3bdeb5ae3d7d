#include "train/qat_command.h"

#include <fmt/format.h>

#include <ostream>

#include "chat/chat_template.h"
#include "eval/benchmark.h"
#include "eval/run/evaluate.h"
#include "io/error.h"
#include "io/manifest.h"
#include "model/model_dir.h"
#include "quant/gptq_checkpoint.h"
#include "quant/ptq_command.h"
#include "quant/quant_state.h"
#include "tokenizer/tokenizer.h"
#include "train/qat_model.h"
#include "train/token_nll.h"

namespace rqat::train {
namespace fs = std::filesystem;

QuantInit parse_quant_init(const std::string& name, const std::string& flag) {
  if (name == "auto") return QuantInit::kAuto;
  if (name == "state") return QuantInit::kQuantState;
  if (name == "rtn") return QuantInit::kRtn;
  fail("{}: unknown initialization '{}' (expected auto, state or rtn)", flag, name);
}

quant::ScaleMode parse_scale_mode(const std::string& name, const std::string& flag) {
  if (name == "frozen") return quant::ScaleMode::kFrozen;
  if (name == "lsq") return quant::ScaleMode::kLsq;
  if (name == "clip") return quant::ScaleMode::kLearnableClip;
  fail("{}: unknown scale mode '{}' (expected frozen, lsq or clip)", flag, name);
}

const char* scale_mode_name(quant::ScaleMode mode) {
  switch (mode) {
    case quant::ScaleMode::kFrozen:
      return "frozen";
    case quant::ScaleMode::kLsq:
      return "lsq";
    case quant::ScaleMode::kLearnableClip:
      return "clip";
  }
  return "?";
}

QuantPlan plan_quantization(const fs::path& model_dir, std::optional<int> bits,
                            const quant::QuantSpec& spec, QuantInit init) {
  QuantPlan plan;
  const bool has_state = fs::exists(model_dir / quant::kQuantStateFile);
  if (bits && *bits == 16) {
    if (init == QuantInit::kQuantState)
      fail("--init state contradicts --bits 16 (full-precision training)");
    return plan;
  }
  plan.quantize = true;
  plan.from_state = init == QuantInit::kQuantState || (init == QuantInit::kAuto && has_state);
  if (plan.from_state) {
    if (!has_state)
      fail("--init state: {} has no {} (make one with ptq, or use --init rtn)", model_dir.string(),
           quant::kQuantStateFile);
    return plan;  // the spec comes with the state
  }
  if (!bits)
    fail("--bits is required: {} has no {} to start from (2, 3, 4, 8, or 16 for full precision)",
         model_dir.string(), quant::kQuantStateFile);
  plan.spec = spec;
  plan.spec.bits = *bits;
  plan.spec.validate("--");
  return plan;
}

quant::QuantSpec attach_quant_plan(model::CausalLM& model, const QuantPlan& plan,
                                   const fs::path& model_dir, std::optional<int> bits,
                                   const quant::FakeQuantOptions& options, bool check_gptq_export,
                                   std::vector<std::string>& layers) {
  if (!plan.quantize) return plan.spec;
  if (plan.from_state) {
    const quant::QuantState state = quant::load_quant_state(model_dir);
    if (bits && *bits != state.spec.bits)
      fail("--bits {} differs from the {} bits of {}; use --init rtn to requantize", *bits,
           state.spec.bits, (model_dir / quant::kQuantStateFile).string());
    if (check_gptq_export) quant::check_gptq_exportable(model, state.spec);
    layers =
        attach_fake_quant(model, state, options, (model_dir / quant::kQuantStateFile).string());
    return state.spec;
  }
  if (check_gptq_export) quant::check_gptq_exportable(model, plan.spec);
  layers = attach_fake_quant_rtn(model, plan.spec, options);
  return plan.spec;
}

int64_t padding_token_id(const tokenizer::Tokenizer& tokenizer) {
  for (const auto& token : {tokenizer.config().pad_token, tokenizer.config().eos_token})
    if (token)
      if (auto id = tokenizer.token_to_id(*token)) return *id;
  return 0;  // padding is never attended to nor scored: any valid id works
}

namespace {

const char* tool_name(QatObjective objective) {
  return objective == QatObjective::kKd ? "qat-kd" : "qat-sft";
}

fs::path resolve_teacher(const QatCommandOptions& options) {
  if (options.teacher_dir) return *options.teacher_dir;
  const fs::path manifest = options.model_dir / "manifest.json";
  if (fs::exists(manifest)) {
    const io::Json json = io::read_manifest(options.model_dir);
    if (json.contains("inputs") && json["inputs"].contains("model") &&
        json["inputs"]["model"].is_string()) {
      const fs::path teacher = json["inputs"]["model"].get<std::string>();
      if (!fs::exists(teacher / "config.json"))
        fail("--teacher not given, and the model {} names (inputs.model = {}) has no config.json",
             manifest.string(), teacher.string());
      return teacher;
    }
  }
  fail("--teacher is required: {} does not record the model it was made from",
       options.model_dir.string());
}

std::optional<chat::ChatTemplate> load_chat(const QatCommandOptions& options, bool needed) {
  if (!needed) return std::nullopt;
  std::optional<fs::path> override_file;
  if (!options.chat_template_file.empty()) override_file = options.chat_template_file;
  return chat::ChatTemplate::load(options.model_dir, override_file);
}

std::optional<int64_t> pick_separator_id(const tokenizer::Tokenizer& tokenizer) {
  if (const auto& eos = tokenizer.config().eos_token)
    if (auto id = tokenizer.token_to_id(*eos)) return *id;
  return std::nullopt;
}

io::Json distill_json(const DistillOptions& d) {
  return {{"divergence", distill_divergence_name(d.divergence)},
          {"temperature", d.temperature},
          {"jsd_beta", d.jsd_beta},
          {"top_k", d.top_k},
          {"ce_weight", d.ce_weight}};
}

io::Json data_json(const TextDataOptions& data, const SequenceSet& set) {
  io::Json j = {{"path", data.path.string()},
                {"format", format_name(resolve_format(data))},
                {"chat", data.use_chat_template},
                {"layout", sequence_layout_name(set.layout)},
                {"max_length", set.max_length},
                {"sequences", set.sequences.size()},
                {"tokens", set.total_tokens},
                {"target_tokens", set.target_tokens},
                {"documents", set.truncation.documents},
                {"truncated_documents", set.truncation.truncated_documents},
                {"dropped_target_tokens", set.truncation.dropped_target_tokens}};
  if (data.use_chat_template)
    j["fields"] = {{"prompt", data.prompt_field}, {"response", data.response_field}};
  else if (resolve_format(data) == DataFormat::kJsonl)
    j["fields"] = {{"text", data.text_field}};
  return j;
}

// The student's next-token logits at the positions that predict targets: (B, T-1, V) for tokens
// 1..T-1, with the matching loss mask and labels.
struct AlignedTargets {
  at::Tensor mask, labels;
};
AlignedTargets aligned_targets(const TokenBatch& batch) {
  const int64_t t = batch.input_ids.size(1);
  return {batch.loss_mask.slice(1, 1, t), batch.input_ids.slice(1, 1, t)};
}

}  // namespace

QatCommandResult run_qat_command(const QatCommandOptions& options, std::ostream& out) {
  const char* tool = tool_name(options.objective);
  if (options.out_dir.empty()) fail("--out is required");
  if (!fs::is_regular_file(options.data.path))
    fail("--data {}: file not found", options.data.path.string());
  if (options.eval_data && !fs::is_regular_file(options.eval_data->path))
    fail("--eval-data {}: file not found", options.eval_data->path.string());
  const auto config = model::ModelConfig::load(options.model_dir / "config.json");
  const QuantPlan plan =
      plan_quantization(options.model_dir, options.bits, options.spec, options.init);
  std::optional<quant::GptqFormat> export_format;
  if (!options.export_format.empty()) {
    if (!plan.quantize)
      fail("--export {} needs quantized weights (not --bits 16)", options.export_format);
    export_format = quant::parse_gptq_format(options.export_format, "--export");
  }
  if (options.sequences.max_length > config.max_position_embeddings)
    fail("--max-length {} exceeds the model's max_position_embeddings {} ({})",
         options.sequences.max_length, config.max_position_embeddings,
         (options.model_dir / "config.json").string());
  const fs::path teacher_dir =
      options.objective == QatObjective::kKd ? resolve_teacher(options) : fs::path();

  // Processes and data: every rank tokenizes the same files, so the batches agree.
  const DistributedEnv env = detect_distributed_env();
  // One GPU per process: rank r of a node uses cuda:LOCAL_RANK.
  const c10::Device device = options.device.is_cuda() && env.world_size > 1
                                 ? c10::Device(c10::kCUDA, static_cast<int8_t>(env.local_rank))
                                 : options.device;
  auto comm = Communicator::create(env, options.backend, device);
  auto tokenizer = tokenizer::Tokenizer::load(options.model_dir);
  const auto chat =
      load_chat(options, options.data.use_chat_template ||
                             (options.eval_data && options.eval_data->use_chat_template));
  const TokenizedDataset data =
      load_tokenized_dataset(options.data, *tokenizer, chat ? &*chat : nullptr);
  SequenceOptions sequence_options = options.sequences;
  if (!sequence_options.separator_id) sequence_options.separator_id = pick_separator_id(*tokenizer);
  const SequenceSet sequences = build_sequences(data, sequence_options);
  if (sequences.sequences.empty())
    fail("{}: no training sequences ({} documents)", options.data.path.string(),
         data.documents.size());
  std::vector<TokenWindow> eval_windows;
  if (options.eval_data) {
    const TokenizedDataset eval_set =
        load_tokenized_dataset(*options.eval_data, *tokenizer, chat ? &*chat : nullptr);
    eval_windows = score_windows(eval_set, options.sequences.max_length, options.eval_max_tokens);
    if (eval_windows.empty()) fail("{}: no tokens to score", options.eval_data->path.string());
  }
  if (comm->is_main()) {
    out << fmt::format("{}: {} ({} processes, {})\n", tool, options.model_dir.string(),
                       comm->world_size(), env.launcher);
    out << "data: " << format_truncation_report(sequences) << "\n";
  }

  // Student (float32 master weights) and teacher.
  auto student = model::load_causal_lm(options.model_dir, model::LoadOptions{at::kFloat, device});
  std::vector<std::string> quantized;
  const quant::QuantSpec spec =
      attach_quant_plan(*student, plan, options.model_dir, options.bits, options.fake_quant,
                        export_format.has_value(), quantized);
  student->set_activation_checkpointing(options.activation_checkpointing);
  std::shared_ptr<model::CausalLM> teacher;
  if (options.objective == QatObjective::kKd) {
    const at::ScalarType teacher_dtype = device.is_cuda() ? at::kBFloat16 : at::kFloat;
    teacher = model::load_causal_lm(teacher_dir, model::LoadOptions{teacher_dtype, device});
    if (teacher->config().vocab_size != config.vocab_size)
      fail("--teacher {}: vocabulary of {} tokens, the student has {}", teacher_dir.string(),
           teacher->config().vocab_size, config.vocab_size);
    for (auto& p : teacher->parameters()) p.requires_grad_(false);
    teacher->eval();
  }
  if (comm->is_main())
    out << fmt::format("student: {} fake-quantized layers ({}), {}\n", quantized.size(),
                       plan.quantize ? spec.describe() : std::string("full precision"),
                       plan.quantize ? scale_mode_name(options.fake_quant.mode) : "");

  TrainingOptimizer optimizer(trainable_parameters(*student), options.trainer.adamw);
  StepMetricsLog metrics(options.out_dir, comm->is_main());
  TrainerOptions trainer_options = options.trainer;
  trainer_options.out_dir = options.out_dir;
  trainer_options.pad_id = padding_token_id(*tokenizer);
  trainer_options.device = device;
  trainer_options.autocast_bf16 = device.is_cuda() && options.dtype == at::kBFloat16;
  trainer_options.show_progress = comm->is_main();
  trainer_options.tool = tool;
  io::Json fingerprint = {{"tool", tool},
                          {"model", options.model_dir.string()},
                          {"teacher", teacher_dir.string()},
                          {"data", data_json(options.data, sequences)},
                          {"quant", plan.quantize ? spec.to_json() : io::Json(nullptr)},
                          {"scale_mode", scale_mode_name(options.fake_quant.mode)},
                          {"trainer", trainer_fingerprint(options.trainer)}};
  if (teacher) fingerprint["distill"] = distill_json(options.distill);
  trainer_options.fingerprint = fingerprint;

  // The loss of one micro-batch: a sum over its target tokens over the step's target tokens.
  const MicroBatchLossFn loss_fn = [&](const TokenBatch& batch, double step_targets) {
    MicroBatchLoss result;
    const at::Tensor logits = student->forward(batch.input_ids, batch.attention_mask);
    if (!teacher) {
      const MaskedNllSum nll = masked_next_token_nll(logits, batch.input_ids, batch.loss_mask);
      result.loss = nll.sum / step_targets;
      result.sums["ce"] = nll.sum.item<double>();
      return result;
    }
    at::Tensor teacher_logits;
    {
      torch::NoGradGuard no_grad;
      teacher_logits = teacher->forward(batch.input_ids, batch.attention_mask);
    }
    const int64_t t = batch.input_ids.size(1);
    const AlignedTargets targets = aligned_targets(batch);
    const DistillLoss d = distill_loss(logits.slice(1, 0, t - 1), teacher_logits.slice(1, 0, t - 1),
                                       targets.mask, targets.labels, options.distill);
    const double tokens = static_cast<double>(d.tokens);
    result.loss = d.loss * (tokens / step_targets);
    result.sums["kd"] = d.kd.item<double>() * tokens;
    if (options.distill.ce_weight > 0) result.sums["ce"] = d.ce.item<double>() * tokens;
    return result;
  };

  double teacher_nll = std::numeric_limits<double>::quiet_NaN();
  const EvaluateFn evaluate = [&](int64_t step) {
    io::Json row = io::Json::object();
    const int64_t batch = std::max<int64_t>(1, options.trainer.micro_batch_size);
    if (!eval_windows.empty()) {
      const NllTotals totals = token_nll(*student, eval_windows, batch);
      row["nll"] = totals.mean();
      if (teacher) {
        if (std::isnan(teacher_nll)) teacher_nll = token_nll(*teacher, eval_windows, batch).mean();
        row["teacher_nll"] = teacher_nll;
      }
    }
    if (!options.eval_math_benchmark.empty()) {
      eval::PromptOptions prompt;
      if (options.eval_math_instruction) prompt.instruction = *options.eval_math_instruction;
      const eval::EvalSummary summary = eval::evaluate_model_in_memory(
          *student, options.model_dir, options.eval_math_benchmark, options.eval_math_data,
          options.eval_math_limit, options.eval_math_max_new_tokens, prompt, device,
          options.out_dir / "eval-math" / fmt::format("step-{:08d}", step));
      row["math_accuracy"] = summary.overall.pass1;
      row["math_mean_tokens"] = summary.overall.mean_tokens;
    }
    return row;
  };

  Trainer trainer(*student, optimizer, sequences, *comm, metrics, trainer_options);
  QatCommandResult result;
  result.train = trainer.run(loss_fn, evaluate, out);
  if (result.train.stopped_by_signal) {
    result.exit_code = 128 + result.train.stopped_by_signal;
    return result;
  }
  if (!comm->is_main()) return result;

  // The artifact: exact quantized weights, their codes, the manifest.
  quant::QuantState state;
  if (plan.quantize) state = materialize_fake_quant(*student, spec);
  model::SaveOptions save;
  save.dtype = at::kFloat;
  save.tokenizer_from = options.model_dir;
  model::save_causal_lm(*student, options.out_dir, save);
  if (plan.quantize) quant::save_quant_state(options.out_dir, state);
  metrics.write_hdf5({{"tool", tool}});
  if (export_format) {
    quant::GptqExportOptions export_options;
    export_options.format = *export_format;
    export_options.method = std::string(tool);
    // Frozen scales are float16 values already (ptq and the RTN init round them); learned ones
    // are rounded to float16 here, as the GPTQ format stores them.
    export_options.round_scales_to_fp16 = options.fake_quant.mode != quant::ScaleMode::kFrozen;
    const auto dir = options.out_dir / "gptq";
    const auto summary =
        quant::export_gptq_checkpoint(*student, state.layers, spec, dir, export_options);
    model::copy_tokenizer_files(options.model_dir, dir);
    out << fmt::format("exported {} packed layers ({} format) to {}\n", summary.quantized_layers,
                       quant::gptq_format_name(*export_format), dir.string());
  }

  io::Manifest manifest;
  manifest.tool = tool;
  manifest.inputs["model"] = options.model_dir.string();
  if (teacher) manifest.inputs["teacher"] = teacher_dir.string();
  manifest.inputs["data"] = options.data.path.string();
  if (options.eval_data) manifest.inputs["eval_data"] = options.eval_data->path.string();
  manifest.config = fingerprint;
  manifest.config.erase("model");
  manifest.config.erase("teacher");
  manifest.config["init"] = plan.quantize ? (plan.from_state ? "quant_state" : "rtn") : "none";
  manifest.config["micro_batch_size"] = options.trainer.micro_batch_size;
  manifest.config["world_size"] = comm->world_size();
  manifest.config["activation_checkpointing"] = options.activation_checkpointing;
  manifest.config["export"] = options.export_format;
  manifest.metrics = {{"steps", result.train.steps_done},
                      {"final_loss", result.train.last_loss},
                      {"tokens_per_second", result.train.tokens_per_second}};
  for (const auto& [key, value] : result.train.last_eval.items()) manifest.metrics[key] = value;
  io::write_manifest(options.out_dir, manifest);
  out << fmt::format("wrote {}\n", options.out_dir.string());
  return result;
}

}  // namespace rqat::train
