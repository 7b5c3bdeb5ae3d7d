#include "tools/ptq_command.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <ostream>

#include "chat/chat_template.h"
#include "io/error.h"
#include "io/hdf5_columns.h"
#include "io/manifest.h"
#include "io/progress_file.h"
#include "model/model_dir.h"
#include "ops/kernel_choice.h"
#include "quant/bnb_checkpoint.h"
#include "quant/gguf/export.h"
#include "quant/gptq_checkpoint.h"
#include "quant/gptq_packing.h"
#include "quant/load_model.h"
#include "quant/quant_state.h"
#include "tokenizer/tokenizer.h"
#include "tools/compressed_tensors_command.h"
#include "tools/model_commands.h"

namespace rqat::tools {
// A tool wires concerns together; the names of the ones it is mostly made of read unqualified.
using namespace rqat::quant;

namespace {

double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

void write_layer_metrics(const std::filesystem::path& path, const PtqResult& result,
                         const std::string& method) {
  std::vector<std::string> names;
  std::vector<double> error, seconds, damp;
  std::vector<int64_t> out, in, dead, increases;
  for (const auto& r : result.reports) {
    names.push_back(r.name);
    error.push_back(r.relative_error);
    seconds.push_back(r.seconds);
    damp.push_back(r.damp_used);
    out.push_back(r.out_features);
    in.push_back(r.in_features);
    dead.push_back(r.dead_columns);
    increases.push_back(r.damp_increases);
  }
  io::Hdf5Columns h5;
  h5.add("layers/name", names);
  h5.add("layers/relative_error", error);
  h5.add("layers/seconds", seconds);
  h5.add("layers/damp", damp);
  h5.add("layers/damp_increases", increases);
  h5.add("layers/dead_columns", dead);
  h5.add("layers/out_features", out);
  h5.add("layers/in_features", in);
  h5.set_attribute("tool", "ptq");
  h5.set_attribute("method", method);
  h5.write(path);
}

std::string layer_table(const PtqResult& result) {
  std::string text = fmt::format("{:<44} {:>13} {:>12} {:>9} {:>9}\n", "layer", "shape",
                                 "rel. error", "damp", "seconds");
  for (const auto& r : result.reports) {
    text +=
        fmt::format("{:<44} {:>13} {:>12} {:>9} {:>9.3f}\n", r.name,
                    fmt::format("{}x{}", r.out_features, r.in_features),
                    std::isnan(r.relative_error) ? "-" : fmt::format("{:.4e}", r.relative_error),
                    std::isnan(r.damp_used) ? "-" : fmt::format("{:.3g}", r.damp_used), r.seconds);
  }
  return text;
}

// The export format of --export: gptq / gptq_v2 for the uniform methods, bnb for nf4, gguf.
struct ExportChoice {
  std::optional<GptqFormat> gptq;
  bool bnb = false;
  std::optional<io::GgufType> gguf;
  bool compressed_tensors = false;
};

ExportChoice export_choice(const PtqCommandOptions& options, PtqMethod method,
                           const QuantSpec& spec) {
  ExportChoice choice;
  if ((options.gguf_type || options.gguf_embedding_type) && options.export_format != "gguf")
    fail("--gguf-type and --gguf-embedding-type go with --export gguf");
  if (options.export_format.empty()) return choice;
  if (options.export_format == "gguf") {
    choice.gguf = options.gguf_type ? options.gguf_type : spec.gguf_grid;
    if (!choice.gguf)
      fail(
          "--export gguf needs --gguf-type (f16, bf16, q8_0, q4_0, q4_1, q2_k ... q6_k) or a "
          "--grid gguf-<type>");
    return choice;
  }
  if (options.export_format == kCompressedTensorsExport) {
    if (method != PtqMethod::kRtn && method != PtqMethod::kGptq)
      fail("--export {}: --method {} (use rtn or gptq)", kCompressedTensorsExport,
           enum_name(method));
    // Act-order leaves columns out of group order (a g_idx compressed-tensors has no field for)
    // unless the groups are static: --static-groups, or a floating-point grid's blocks.
    check_compressed_tensors_spec(spec, method == PtqMethod::kGptq && options.ptq.gptq.act_order &&
                                            !options.ptq.gptq.static_groups && !spec.fp_grid);
    choice.compressed_tensors = true;
    return choice;
  }
  if (method == PtqMethod::kNf4) {
    if (options.export_format != "bnb")
      fail("--export {}: --method nf4 exports bitsandbytes checkpoints only (--export bnb)",
           options.export_format);
    choice.bnb = true;
    return choice;
  }
  if (options.export_format == "bnb")
    fail("--export bnb: bitsandbytes checkpoints hold NF4 weights (--method nf4)");
  choice.gptq = parse_enum<GptqFormat>(options.export_format, "--export");
  return choice;
}

void export_gptq(const PtqCommandOptions& options, const PtqOptions& ptq,
                 const model::CausalLM& model, const PtqResult& ptq_result, GptqFormat format,
                 std::ostream& out) {
  GptqExportOptions export_options;
  export_options.format = format;
  export_options.method = enum_name(ptq.method);
  if (ptq.method == PtqMethod::kGptq) {
    export_options.damp_percent = ptq.gptq.damp_percent;
    export_options.true_sequential = true;
    export_options.static_groups = ptq.gptq.static_groups;
  }
  const auto dir = options.out_dir / "gptq";
  const auto summary =
      export_gptq_checkpoint(model, ptq_result.layers, ptq.spec, dir, export_options);
  model::copy_tokenizer_files(options.model_dir, dir);
  out << fmt::format("exported {} packed layers ({} format, {:.2f} MB packed) to {}\n",
                     summary.quantized_layers, enum_name(format), summary.packed_bytes / 1e6,
                     dir.string());
}

void export_bnb(const PtqCommandOptions& options, const model::CausalLM& model,
                const PtqResult& ptq_result, std::ostream& out) {
  const auto dir = options.out_dir / "bnb";
  export_bnb_checkpoint(model, ptq_result.nf4_layers, dir, {});
  model::copy_tokenizer_files(options.model_dir, dir);
  out << fmt::format("exported {} NF4 layers (bitsandbytes 4-bit) to {}\n",
                     ptq_result.nf4_layers.size(), dir.string());
}

void write_ptq_manifest(const PtqCommandOptions& options, const PtqOptions& ptq,
                        const std::optional<CalibrationSet>& calibration,
                        const PtqCommandResult& result) {
  io::Manifest manifest;
  manifest.tool = "ptq";
  manifest.kernels = ops::kernel_choices_json();
  manifest.inputs["model"] = options.model_dir.string();
  if (options.calibration) manifest.inputs["calibration"] = options.calibration->data.path.string();
  manifest.config["method"] = enum_name(ptq.method);
  manifest.config["quant"] =
      ptq.method == PtqMethod::kNf4 ? ptq.nf4.to_json(ptq.spec) : ptq.spec.to_json();
  if (ptq.method == PtqMethod::kGptq) {
    manifest.config["gptq"] = io::options_json(ptq.gptq);
    manifest.config["gptq"]["true_sequential"] = true;  // rqat quantizes layers in order
  }
  if (ptq.method == PtqMethod::kAwq) {
    manifest.config["awq"] = io::options_json(ptq.awq);
    manifest.config["awq"]["max_rows"] = ptq.awq.max_rows;
    manifest.config["awq"]["scale_v_to_o"] = ptq.awq.scale_v_to_o;
    manifest.config["awq"]["clip_grid"] = ptq.awq.clip_grid;
    manifest.config["awq"]["clip_max_shrink"] = ptq.awq.clip_max_shrink;
    manifest.config["awq"]["clip_tokens"] = ptq.awq.clip_tokens;
  }
  manifest.config["importance"] = io::options_json(ptq.importance);
  manifest.config["batch_size"] = ptq.batch_size;
  manifest.config["export"] = options.export_format;
  manifest.config["calibration"] = calibration ? calibration->record : io::Json(nullptr);
  if (!options.record.options.is_null()) manifest.config["options"] = options.record.options;
  manifest.metrics["quantized_layers"] = result.ptq.reports.size();
  manifest.metrics["mean_relative_error"] = std::isnan(result.mean_relative_error)
                                                ? io::Json(nullptr)
                                                : io::Json(result.mean_relative_error);
  manifest.metrics["seconds"] = result.ptq.seconds;
  manifest.metrics["peak_activation_mb"] = result.ptq.peak_activation_bytes / 1e6;
  manifest.metrics["peak_rss_mb"] = result.peak_rss_mb;
  io::write_manifest(options.out_dir, manifest);
}

std::optional<CalibrationSet> load_calibration(const PtqCommandOptions& options,
                                               const io::Artifact& artifact,
                                               const model::ModelConfig& config,
                                               std::ostream& out) {
  if (!options.calibration) return std::nullopt;
  auto tokenizer = tokenizer::Tokenizer::load(artifact);
  auto calib = *options.calibration;
  calib.max_positions = config.max_position_embeddings;
  std::optional<chat::ChatTemplate> chat;
  if (calib.data.use_chat_template) chat = chat::ChatTemplate::load(artifact);
  CalibrationSet set = build_calibration_set(calib, *tokenizer, chat ? &*chat : nullptr);
  out << fmt::format("calibration: {} samples x {} tokens ({}) from {}\n", set.input_ids.size(0),
                     set.seq_len, set.sampling, calib.data.path.string());
  return set;
}

}  // namespace

PtqCommandResult run_ptq_command(const PtqCommandOptions& options, std::ostream& out) {
  // --- Everything checkable before work: spec, method, export format, calibration data.
  PtqOptions ptq = options.ptq;
  ptq.spec.validate("--");
  check_grid_method(ptq.spec, ptq.method);
  if (options.out_dir.empty()) fail("--out is required");
  check_calibration_needs(ptq, options.calibration.has_value());
  const ExportChoice exports = export_choice(options, ptq.method, ptq.spec);
  // A v1 export is decided now: its zero points are kept >= 1 while quantizing.
  if (exports.gptq == GptqFormat::kV1 && !ptq.spec.symmetric && !ptq.spec.v1_zeros) {
    ptq.spec.v1_zeros = true;
    out << "--export gptq: asymmetric zero points kept >= 1 (v1 stores zero - 1)\n";
  }
  const io::Artifact artifact = io::Artifact::open(options.model_dir);  // read once
  const auto config = model::ModelConfig::from_artifact(artifact);
  const std::optional<CalibrationSet> calibration =
      load_calibration(options, artifact, config, out);

  auto model = quant::load_model(artifact, model::LoadOptions{options.dtype, options.device});
  if (exports.gptq) check_gptq_exportable(*model, ptq.spec, *exports.gptq);
  if (exports.compressed_tensors) check_compressed_tensors_shapes(*model, ptq.spec);
  if (exports.gguf) {
    quant::GgufExportOptions gguf;  // the types the export will write
    gguf.type = *exports.gguf;
    gguf.embedding_type = options.gguf_embedding_type;
    check_gguf_exportable(*model, gguf);
  }
  out << fmt::format(
      "ptq: {} {} of {}\n", enum_name(ptq.method),
      ptq.method == PtqMethod::kNf4 ? ptq.nf4.to_json(ptq.spec).dump() : ptq.spec.describe(),
      options.model_dir.string());

  PtqCommandResult result;
  // OUT/progress.json for `rqat status`: decoder blocks of a calibrated run (GPTQ's hours on a
  // large model), "done" once every output is written.
  io::ProgressFile progress(options.out_dir, "ptq", "blocks", model->num_layers());
  ptq.on_block = [&progress](int64_t done, int64_t) { progress.update(done); };
  result.ptq =
      quantize_model(*model, calibration ? calibration->input_ids : at::Tensor(), ptq, out);
  progress.update(model->num_layers(), {}, /*force=*/true);

  // --- The artifact.
  model::SaveOptions save;
  save.dtype = at::kFloat;  // dequantized weights are exact in float32 only
  save.tokenizer_from = options.model_dir;
  model::save_causal_lm(*model, options.out_dir, save);
  // NF4 is no uniform grid: its codes live in the bnb export only (QAT starts from the weights).
  if (ptq.method != PtqMethod::kNf4)
    save_quant_state(options.out_dir, {ptq.spec, result.ptq.layers});
  write_layer_metrics(options.out_dir / "metrics.h5", result.ptq,
                      std::string(enum_name(ptq.method)));
  if (ptq.importance.imatrix) {
    // llama.cpp's own format, for llama-quantize --imatrix (the weights rqat quantized with).
    const auto file = options.out_dir / "imatrix.gguf";
    write_gguf_imatrix(file, result.ptq.importance,
                       {.dataset = options.calibration->data.path.string(),
                        .chunk_count = calibration->input_ids.size(0),
                        .chunk_size = calibration->seq_len});
    out << fmt::format("imatrix of {} layers: {}\n", result.ptq.importance.size(), file.string());
  }

  double error_sum = 0;
  int64_t error_count = 0;
  for (const auto& r : result.ptq.reports)
    if (!std::isnan(r.relative_error)) error_sum += r.relative_error, ++error_count;
  result.mean_relative_error =
      error_count ? error_sum / error_count : std::numeric_limits<double>::quiet_NaN();
  if (exports.gptq) export_gptq(options, ptq, *model, result.ptq, *exports.gptq, out);
  if (exports.bnb) export_bnb(options, *model, result.ptq, out);
  if (exports.compressed_tensors)
    export_compressed_tensors_dir(*model, {ptq.spec, result.ptq.layers}, options.model_dir,
                                  options.out_dir / kCompressedTensorsExport, out);
  if (exports.gguf) {
    // From the artifact just written: the model directory's tokenizer and config, its layers.
    const auto file = options.out_dir / fmt::format("model-{}.gguf", enum_name(*exports.gguf));
    // With --imatrix, matrices requantized to another type than the grid's use it too.
    convert_model_to_gguf(
        options.out_dir, file, *exports.gguf, options.gguf_embedding_type, out,
        ptq.importance.imatrix ? options.out_dir / "imatrix.gguf" : std::filesystem::path());
    out << fmt::format("exported {}\n", file.string());
  }
  result.peak_rss_mb = peak_rss_mb();
  write_ptq_manifest(options, ptq, calibration, result);
  progress.finish("done", {{"mean_relative_error", result.mean_relative_error}});

  out << layer_table(result.ptq);
  out << fmt::format(
      "quantized {} layers in {:.2f} s; mean relative error {}; peak activations {:.1f} MB, peak "
      "RSS {:.1f} MB\nwrote {}\n",
      result.ptq.reports.size(), result.ptq.seconds,
      std::isnan(result.mean_relative_error) ? "-"
                                             : fmt::format("{:.4e}", result.mean_relative_error),
      result.ptq.peak_activation_bytes / 1e6, result.peak_rss_mb, options.out_dir.string());
  return result;
}

}  // namespace rqat::tools
