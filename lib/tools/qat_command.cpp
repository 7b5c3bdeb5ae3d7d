#include "tools/qat_command.h"

#include <fmt/format.h>

#include <ostream>

#include "chat/chat_template.h"
#include "eval/benchmark.h"
#include "io/artifact.h"
#include "io/error.h"
#include "io/manifest.h"
#include "io/options.h"
#include "model/model_dir.h"
#include "ops/kernel_choice.h"
#include "quant/gguf/blocks.h"
#include "quant/gptq_checkpoint.h"
#include "quant/load_model.h"
#include "quant/quant_state.h"
#include "tokenizer/tokenizer.h"
#include "tools/compressed_tensors_command.h"
#include "tools/eval_run/evaluate.h"
#include "tools/model_commands.h"
#include "tools/ptq_command.h"
#include "train/qat_model.h"
#include "train/sharded_parameters.h"
#include "train/student_loss.h"
#include "train/token_nll.h"

namespace rqat::tools {
// A tool wires concerns together; the names of the ones it is mostly made of read unqualified.
using namespace rqat::train;
using namespace rqat::data;
namespace fs = std::filesystem;

namespace {

const char* tool_name(QatObjective objective) { return enum_name(objective).data(); }

fs::path resolve_teacher(const QatCommandOptions& options, const io::Artifact& model) {
  if (options.teacher_dir) return *options.teacher_dir;
  if (model.has(io::kManifestFile)) {
    const io::Json& json = model.manifest;
    if (json.contains("inputs") && json["inputs"].contains("model") &&
        json["inputs"]["model"].is_string()) {
      const fs::path teacher = json["inputs"]["model"].get<std::string>();
      if (!fs::exists(teacher / "config.json"))
        fail("--teacher not given, and the model {} names (inputs.model = {}) has no config.json",
             model.where(io::kManifestFile), teacher.string());
      return teacher;
    }
  }
  fail("--teacher is required: {} does not record the model it was made from",
       options.model_dir.string());
}

std::optional<chat::ChatTemplate> load_chat(const QatCommandOptions& options,
                                            const io::Artifact& model, bool needed) {
  if (!needed) return std::nullopt;
  std::optional<fs::path> override_file;
  if (!options.chat_template_file.empty()) override_file = options.chat_template_file;
  return chat::ChatTemplate::load(model, override_file);
}

std::optional<int64_t> pick_separator_id(const tokenizer::Tokenizer& tokenizer) {
  if (const auto& eos = tokenizer.config().eos_token)
    if (auto id = tokenizer.token_to_id(*eos)) return *id;
  return std::nullopt;
}

io::Json data_json(const TextDataOptions& data, const SequenceSet& set) {
  io::Json j = {{"path", data.path.string()},
                {"format", enum_name(resolve_format(data))},
                {"chat", data.use_chat_template},
                {"layout", enum_name(set.layout)},
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

// --export gguf writes OUT/model-<type>.gguf of a model on a GGUF grid (quant/gguf/grid.h).
bool exports_gguf(const QatCommandOptions& options) { return options.export_format == "gguf"; }
// --export compressed-tensors writes OUT/compressed-tensors (tools/compressed_tensors_command.h).
bool exports_compressed_tensors(const QatCommandOptions& options) {
  return options.export_format == kCompressedTensorsExport;
}

// The flags that contradict each other, and the files, before anything loads.
void check_flags_and_files(const QatCommandOptions& options) {
  if (options.out_dir.empty()) fail("--out is required");
  if (options.gguf_embedding_type && !exports_gguf(options))
    fail("--gguf-embedding-type goes with --export gguf");
  if (!fs::is_regular_file(options.data.path))
    fail("--data {}: file not found", options.data.path.string());
  if (options.eval_data && !fs::is_regular_file(options.eval_data->path))
    fail("--eval-data {}: file not found", options.eval_data->path.string());
}

std::optional<quant::GptqFormat> export_format(const QatCommandOptions& options) {
  if (options.export_format.empty() || exports_gguf(options) || exports_compressed_tensors(options))
    return std::nullopt;
  return parse_enum<quant::GptqFormat>(options.export_format, "--export");
}

// Before anything loads: the export and the sequence length fit the plan and the model.
void check_plan(const QatCommandOptions& options, const model::ModelConfig& config,
                const QuantPlan& plan) {
  if (!options.export_format.empty()) {
    if (!plan.quantize)
      fail("--export {} needs quantized weights (not --bits 16)", options.export_format);
    if (!exports_gguf(options) && !exports_compressed_tensors(options))
      parse_enum<quant::GptqFormat>(options.export_format, "--export");
  }
  // The layers are on their grid already; the embeddings' rows (hidden_size values) must hold the
  // type asked for them, checked before training rather than at the export after it.
  if (options.gguf_embedding_type &&
      !quant::gguf_row_fits(*options.gguf_embedding_type, config.hidden_size))
    fail(
        "--gguf-embedding-type {}: the embeddings' rows of {} values are not a whole number of "
        "{}-value blocks",
        enum_name(*options.gguf_embedding_type), config.hidden_size,
        io::gguf_type_info(*options.gguf_embedding_type).block_elements);
  if (options.sequences.max_length > config.max_position_embeddings)
    fail("--max-length {} exceeds the model's max_position_embeddings {} ({})",
         options.sequences.max_length, config.max_position_embeddings,
         (options.model_dir / "config.json").string());
}

// The training sequences and the held-out windows scored for NLL. Every rank tokenizes the same
// files, so the batches agree.
struct QatData {
  SequenceSet sequences;
  std::vector<TokenWindow> eval_windows;
};

QatData load_data(const QatCommandOptions& options, const io::Artifact& model,
                  const tokenizer::Tokenizer& tokenizer) {
  const auto chat = load_chat(options, model,
                              options.data.use_chat_template ||
                                  (options.eval_data && options.eval_data->use_chat_template));
  const TokenizedDataset data =
      load_tokenized_dataset(options.data, tokenizer, chat ? &*chat : nullptr);
  SequenceOptions sequence_options = options.sequences;
  if (!sequence_options.separator_id) sequence_options.separator_id = pick_separator_id(tokenizer);
  QatData out;
  out.sequences = build_sequences(data, sequence_options);
  if (out.sequences.sequences.empty())
    fail("{}: no training sequences ({} documents)", options.data.path.string(),
         data.documents.size());
  if (options.eval_data) {
    const TokenizedDataset eval_set =
        load_tokenized_dataset(*options.eval_data, tokenizer, chat ? &*chat : nullptr);
    out.eval_windows =
        score_windows(eval_set, options.sequences.max_length, options.eval_max_tokens);
    if (out.eval_windows.empty()) fail("{}: no tokens to score", options.eval_data->path.string());
  }
  return out;
}

// The frozen teacher of qat-kd: bf16 on CUDA, the student's vocabulary.
std::shared_ptr<model::CausalLM> load_teacher(const fs::path& dir,
                                              const model::ModelConfig& student,
                                              c10::Device device) {
  const at::ScalarType dtype = device.is_cuda() ? at::kBFloat16 : at::kFloat;
  auto teacher = quant::load_model(dir, model::LoadOptions{dtype, device});
  if (teacher->config().vocab_size != student.vocab_size)
    fail("--teacher {}: vocabulary of {} tokens, the student has {}", dir.string(),
         teacher->config().vocab_size, student.vocab_size);
  for (auto& p : teacher->parameters()) p.requires_grad_(false);
  teacher->eval();
  return teacher;
}

// What the training is evaluated on: NLL of the held-out windows (and the teacher's, once) and
// eval-math on the first problems of a benchmark.
EvaluateFn make_evaluate(const QatCommandOptions& options, model::CausalLM& student,
                         model::CausalLM* teacher, const std::vector<TokenWindow>& eval_windows,
                         c10::Device device) {
  auto teacher_nll = std::make_shared<double>(std::numeric_limits<double>::quiet_NaN());
  return [&options, &student, teacher, &eval_windows, device, teacher_nll](int64_t step) {
    io::Json row = io::Json::object();
    const int64_t batch = std::max<int64_t>(1, options.trainer.micro_batch_size);
    if (!eval_windows.empty()) {
      row["nll"] = token_nll(student, eval_windows, batch).mean();
      if (teacher) {
        if (std::isnan(*teacher_nll))
          *teacher_nll = token_nll(*teacher, eval_windows, batch).mean();
        row["teacher_nll"] = *teacher_nll;
      }
    }
    if (!options.eval_math_benchmark.empty()) {
      eval::PromptOptions prompt;
      if (options.eval_math_instruction) prompt.instruction = *options.eval_math_instruction;
      const eval::EvalSummary summary = eval::evaluate_model_in_memory(
          student, options.model_dir, options.eval_math_benchmark, options.eval_math_data,
          options.eval_math_limit, options.eval_math_max_new_tokens, prompt, device,
          options.out_dir / "eval-math" / fmt::format("step-{:08d}", step));
      row["math_accuracy"] = summary.overall.pass1;
      row["math_mean_tokens"] = summary.overall.mean_tokens;
    }
    return row;
  };
}

void export_gptq(const QatCommandOptions& options, model::CausalLM& student,
                 const quant::QuantState& state, std::ostream& out) {
  quant::GptqExportOptions export_options;
  export_options.format = parse_enum<quant::GptqFormat>(options.export_format, "--export");
  export_options.method = tool_name(options.objective);
  // Frozen scales are float16 values already (ptq and the RTN init round them); learned ones
  // are rounded to float16 here, as the GPTQ format stores them.
  export_options.round_scales_to_fp16 = options.fake_quant.mode != quant::ScaleMode::kFrozen;
  const auto dir = options.out_dir / "gptq";
  const auto summary =
      quant::export_gptq_checkpoint(student, state.layers, state.spec, dir, export_options);
  model::copy_tokenizer_files(options.model_dir, dir);
  out << fmt::format("exported {} packed layers ({} format) to {}\n", summary.quantized_layers,
                     enum_name(export_options.format), dir.string());
}

// The artifact: exact quantized weights, their codes, metrics.h5, the GPTQ export, the manifest.
void write_artifact(const QatCommandOptions& options, model::CausalLM& student,
                    const QuantPlan& plan, const quant::QuantSpec& spec, io::Json config,
                    int world_size, StepMetricsLog& metrics, const TrainerResult& train,
                    std::ostream& out) {
  const char* tool = tool_name(options.objective);
  quant::QuantState state;
  if (plan.quantize) state = materialize_fake_quant(student, spec);
  model::SaveOptions save;
  save.dtype = at::kFloat;
  save.tokenizer_from = options.model_dir;
  model::save_causal_lm(student, options.out_dir, save);
  if (plan.quantize) quant::save_quant_state(options.out_dir, state);
  metrics.write_hdf5({{"tool", tool}});
  if (exports_gguf(options)) {
    const auto file =
        options.out_dir / fmt::format("model-{}.gguf", enum_name(*state.spec.gguf_grid));
    convert_model_to_gguf(options.out_dir, file, *state.spec.gguf_grid, options.gguf_embedding_type,
                          out);
    out << fmt::format("exported {}\n", file.string());
  } else if (exports_compressed_tensors(options)) {
    export_compressed_tensors_dir(student, state, options.model_dir,
                                  options.out_dir / kCompressedTensorsExport, out);
  } else if (!options.export_format.empty()) {
    export_gptq(options, student, state, out);
  }

  io::Manifest manifest;
  manifest.tool = tool;
  manifest.kernels = ops::kernel_choices_json();
  manifest.inputs["model"] = options.model_dir.string();
  if (options.objective == QatObjective::kKd)
    manifest.inputs["teacher"] = config["teacher"].get<std::string>();
  manifest.inputs["data"] = options.data.path.string();
  if (options.eval_data) manifest.inputs["eval_data"] = options.eval_data->path.string();
  manifest.config = std::move(config);
  manifest.config.erase("model");
  manifest.config.erase("teacher");
  manifest.config["init"] = plan.quantize ? (plan.from_state ? "quant_state" : "rtn") : "none";
  manifest.config["micro_batch_size"] = options.trainer.micro_batch_size;
  manifest.config["world_size"] = world_size;
  manifest.config["activation_checkpointing"] = options.activation_checkpointing;
  manifest.config["shard"] = enum_name(options.trainer.shard);
  manifest.config["export"] = options.export_format;
  if (!options.record.options.is_null()) manifest.config["options"] = options.record.options;
  manifest.metrics = {{"steps", train.steps_done},
                      {"final_loss", train.last_loss},
                      {"tokens_per_second", train.tokens_per_second}};
  manifest.metrics["state_bytes_per_rank"] = state_bytes_json(train.state_bytes);
  for (const auto& [key, value] : train.last_eval.items()) manifest.metrics[key] = value;
  io::write_manifest(options.out_dir, manifest);
  out << fmt::format("wrote {}\n", options.out_dir.string());
}

}  // namespace

QatCommandResult run_qat_command(const QatCommandOptions& options, std::ostream& out) {
  const char* tool = tool_name(options.objective);
  check_flags_and_files(options);
  const io::Artifact artifact = io::Artifact::open(options.model_dir);  // read once
  const auto config = model::ModelConfig::from_artifact(artifact);
  const QuantPlan plan = plan_quantization(options.model_dir, options.spec, options.init);
  check_plan(options, config, plan);
  const fs::path teacher_dir =
      options.objective == QatObjective::kKd ? resolve_teacher(options, artifact) : fs::path();

  const DistributedEnv env = detect_distributed_env();
  // One GPU per process: rank r of a node uses cuda:LOCAL_RANK.
  const c10::Device device = options.device.is_cuda() && env.world_size > 1
                                 ? c10::Device(c10::kCUDA, static_cast<int8_t>(env.local_rank))
                                 : options.device;
  auto comm = Communicator::create(env, options.backend, device);
  auto tokenizer = tokenizer::Tokenizer::load(artifact);
  const QatData data = load_data(options, artifact, *tokenizer);
  if (comm->is_main())
    out << fmt::format("{}: {} ({} processes, {})\n", tool, options.model_dir.string(),
                       comm->world_size(), env.launcher)
        << "data: " << format_truncation_report(data.sequences) << "\n"
        << "options:\n"
        << io::options_table(options.trainer);

  // Student (float32 master weights) and teacher.
  auto student = quant::load_model(artifact, model::LoadOptions{at::kFloat, device});
  std::vector<std::string> quantized;
  const quant::QuantSpec spec =
      attach_quant_plan(*student, plan, options.model_dir, options.spec.bits, options.fake_quant,
                        export_format(options), quantized);
  if (exports_gguf(options) && !spec.gguf_grid)
    fail(
        "--export gguf: the student is on rqat's uniform grid, not a GGUF one (start from a ptq "
        "artifact made with --grid gguf-<type>, or pass --grid); rqat convert --to gguf "
        "re-quantizes any artifact");
  if (exports_compressed_tensors(options)) {
    check_compressed_tensors_spec(spec);
    check_compressed_tensors_shapes(*student, spec);
  }
  if (spec.activations == quant::FpGrid::kNvfp4) {
    const int64_t micro = options.trainer.micro_batch_size > 0 ? options.trainer.micro_batch_size
                                                               : options.trainer.batch_size;
    const auto calibrated =
        calibrate_student_inputs(*student, data.sequences, kInputCalibrationSequences, micro,
                                 padding_token_id(*tokenizer), device);
    if (!calibrated.empty() && comm->is_main())
      out << fmt::format(
          "nvfp4 activations: the input global scales of {} layers calibrated on the first {} "
          "training sequences\n",
          calibrated.size(),
          std::min<size_t>(kInputCalibrationSequences, data.sequences.sequences.size()));
  }
  student->set_activation_checkpointing(options.activation_checkpointing);
  const auto teacher = teacher_dir.empty() ? nullptr : load_teacher(teacher_dir, config, device);
  if (comm->is_main())
    out << fmt::format("student: {} fake-quantized layers ({}), {}\n", quantized.size(),
                       plan.quantize ? spec.describe() : std::string("full precision"),
                       plan.quantize ? enum_name(options.fake_quant.mode) : "");

  // Sharded runs keep bf16 compute copies next to fp32 masters; unsharded ones fp32 weights under
  // CUDA autocast (below).
  const ShardOptions shard =
      shard_options(options.trainer.shard, *comm, options.dtype == at::kBFloat16);
  if (shard.compute_dtype != at::kFloat) use_compute_dtype(*student, shard.compute_dtype);
  TrainingOptimizer optimizer(trainable_parameters(*student), options.trainer.adamw, shard);
  if (auto* scope = optimizer.layer_scope()) student->set_layer_scope(scope);
  if (teacher)
    if (auto* scope = optimizer.shard_frozen(all_parameters(*teacher)))
      teacher->set_layer_scope(scope);
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
                          {"data", data_json(options.data, data.sequences)},
                          {"quant", plan.quantize ? spec.to_json() : io::Json(nullptr)},
                          {"scale_mode", enum_name(options.fake_quant.mode)},
                          {"trainer", trainer_fingerprint(options.trainer)}};
  if (teacher) fingerprint["distill"] = io::settings_json(options.distill);
  if (!options.record.settings.is_null()) fingerprint["options"] = options.record.settings;
  trainer_options.fingerprint = fingerprint;

  Trainer trainer(*student, optimizer, data.sequences, *comm, metrics, trainer_options);
  QatCommandResult result;
  result.train =
      trainer.run(student_loss(*student, teacher.get(), options.distill),
                  make_evaluate(options, *student, teacher.get(), data.eval_windows, device), out);
  if (result.train.stopped_by_signal) {
    result.exit_code = 128 + result.train.stopped_by_signal;
    return result;
  }
  if (comm->is_main())
    write_artifact(options, *student, plan, spec, fingerprint, comm->world_size(), metrics,
                   result.train, out);
  return result;
}

}  // namespace rqat::tools
