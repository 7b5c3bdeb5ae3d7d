#include "cli/train_flags.h"

#include <iostream>

#include "io/manifest.h"
#include "quant/gguf/grid.h"

namespace rqat::cli {

void add_quant_flags(CLI::App& app, QuantFlags& f) {
  app.add_option("--bits", f.bits,
                 "Weight bits 2, 3, 4, 8 (default: the artifact's), or 16 for full precision");
  add_option_flag(app, f.init, "init",
                  "Quantizer start: auto (quant state if present, else RTN), state or rtn");
  app.add_option("--group-size", f.spec.group_size, "RTN init: columns per group (-1: per row)")
      ->capture_default_str();
  app.add_flag("--sym", f.spec.symmetric, "RTN init: symmetric");
  app.add_flag("--per-tensor", f.spec.per_tensor,
               "RTN init: one scale for the whole weight (with --group-size -1)");
  app.add_option("--grid", f.grid,
                 "RTN init on llama.cpp's grid of a GGUF type (gguf-q4_0, gguf-q4_k, gguf-q3_k, "
                 "gguf-q2_k, ...; sets bits and groups): exports to that type exactly");
  app.add_option("--include", f.include, "RTN init: regexes of layers to quantize");
  app.add_option("--exclude", f.exclude, "RTN init: regexes of layers kept in full precision");
  add_option_flags(app, f.fake_quant);
}

void QuantFlags::resolve(std::optional<int>& bits_out, quant::QuantSpec& spec_out,
                         train::QuantInit& init_out,
                         quant::FakeQuantOptions& fake_quant_out) const {
  bits_out = bits;
  spec_out = spec;
  if (!include.empty()) spec_out.include = include;
  spec_out.exclude = exclude;
  if (!grid.empty()) spec_out.use_gguf_grid(quant::parse_gguf_grid(grid, "--grid"));
  init_out = init;
  fake_quant_out = fake_quant;
}

void add_run_flags(CLI::App& app, RunFlags& f, FlagSelection selection) {
  add_option_flags(app, f.trainer, std::move(selection));
  add_option_flag(app, f.backend, "backend", "Data-parallel communication: auto, gloo or nccl");
}

void RunFlags::resolve(train::TrainerOptions& trainer_out, train::CommBackend& backend_out) const {
  trainer_out = trainer;
  backend_out = backend;
}

void add_qat_flags(CLI::App& app, QatFlags& f, tools::QatObjective objective) {
  auto& o = f.options;
  app.add_option("--model", f.model_dir,
                 "Student: a model directory, or a ptq artifact (starts from its quant state)")
      ->required();
  app.add_option("--out", f.out_dir, "Output artifact directory (also checkpoints and metrics)")
      ->required();
  app.add_option("--data", f.data, "Training data: plain text or JSONL")->required();
  if (objective == tools::QatObjective::kKd) {
    app.add_option("--teacher", f.teacher_dir,
                   "Full-precision teacher (default: the model the ptq artifact was made from)");
    add_option_flags(app, o.distill);
  }
  add_quant_flags(app, f.quant);
  // Data.
  add_option_flags(app, o.data, {.rename = {{"format", "data-format"}, {"split", "data-split"}}});
  app.add_option("--chat-template", o.chat_template_file,
                 "Chat template file instead of the model's");
  app.add_flag("--disable-thinking", f.disable_thinking,
               "Qwen3: render prompts with an empty thinking block (as traces sampled that way)");
  app.add_option("--max-documents", o.data.max_documents, "Read at most this many documents");
  app.add_option("--layout", f.layout, "pack (concatenate and cut) or bucket (one document a row)")
      ->capture_default_str();
  app.add_option("--max-length", o.sequences.max_length, "Tokens per training sequence")
      ->capture_default_str();
  app.add_option("--eval-data", f.eval_data, "Held-out data scored (NLL) at each evaluation");
  app.add_option("--eval-tokens", o.eval_max_tokens, "Target tokens of --eval-data scored")
      ->capture_default_str();
  app.add_option("--eval-benchmark", o.eval_math_benchmark,
                 "eval-math during training on this benchmark (e.g. math500), greedy");
  app.add_option("--eval-benchmark-data", o.eval_math_data, "Its JSONL (default $RQAT_DATA_DIR)");
  app.add_option("--eval-benchmark-limit", o.eval_math_limit, "Problems evaluated")
      ->capture_default_str();
  app.add_option("--eval-max-new-tokens", o.eval_math_max_new_tokens, "eval-math generation limit")
      ->capture_default_str();
  app.add_option("--eval-instruction", o.eval_math_instruction,
                 "Instruction after each eval-math problem (default: eval-math's; \"\" for none)");
  // Optimization and run control.
  app.add_flag("--activation-checkpointing", o.activation_checkpointing,
               "Recompute each block in the backward pass (less memory, one more forward)");
  add_run_flags(app, f.run);
  app.add_option(
      "--export", o.export_format,
      "Also write a packed GPTQ checkpoint (gptq or gptq_v2), or OUT/model-TYPE.gguf of a "
      "model on a --grid gguf-TYPE (gguf)");
  app.add_option("--gguf-embedding-type", f.gguf_embedding_type,
                 "With --export gguf: the embeddings' and output layer's type (default: the grid's "
                 "type; f32 keeps them as rqat has them)");
  add_runtime_flags(app, f.runtime);
}

tools::QatCommandOptions QatFlags::resolve(tools::QatObjective objective) {
  tools::QatCommandOptions o = options;
  o.objective = objective;
  o.model_dir = model_dir;
  o.out_dir = out_dir;
  if (!teacher_dir.empty()) o.teacher_dir = teacher_dir;
  quant.resolve(o.bits, o.spec, o.init, o.fake_quant);
  run.resolve(o.trainer, o.backend);
  o.data.path = data;
  o.data.enable_thinking = !disable_thinking;
  if (!eval_data.empty()) {
    data::TextDataOptions eval = o.data;
    eval.path = eval_data;
    eval.max_documents.reset();
    o.eval_data = eval;
  }
  o.sequences.layout = parse_enum<data::SequenceLayout>(layout, "--layout");
  if (!gguf_embedding_type.empty())
    o.gguf_embedding_type = parse_enum<io::GgufType>(gguf_embedding_type, "--gguf-embedding-type");
  runtime.apply();
  o.device = runtime.resolved_device();
  o.dtype = runtime.resolved_dtype();
  return o;
}

int qat_tool_main(int argc, char** argv, tools::QatObjective objective, const char* description) {
  io::set_process_args(argc, argv);
  CLI::App app{description};
  QatFlags flags;
  add_qat_flags(app, flags, objective);
  CLI11_PARSE(app, argc, argv);
  int exit_code = 0;
  const char* tool = enum_name(objective).data();
  const int status = run_tool(tool, [&] {
    exit_code = tools::run_qat_command(flags.resolve(objective), std::cout).exit_code;
  });
  return status != 0 ? status : exit_code;
}

}  // namespace rqat::cli
