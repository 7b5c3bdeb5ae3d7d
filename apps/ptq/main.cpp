// ptq: post-training weight quantization (RTN, GPTQ, AWQ) of a model directory into an artifact
// directory (docs/ptq.md). Flags only; the work is in lib/quant.
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "cli/option_flags.h"
#include "cli/runtime_flags.h"
#include "io/error.h"
#include "io/manifest.h"
#include "quant/gguf/grid.h"
#include "tools/ptq_command.h"

int main(int argc, char** argv) {
  rqat::io::set_process_args(argc, argv);
  rqat::cli::return_large_allocations_to_system();
  CLI::App app{"ptq: post-training weight quantization (RTN, GPTQ, AWQ) of a model directory"};
  rqat::tools::PtqCommandOptions options;
  auto& spec = options.ptq.spec;
  std::string model_dir, out_dir, method = "gptq", grid, gguf_type, gguf_embedding_type;
  std::vector<std::string> include, exclude;
  app.add_option("--model", model_dir, "Input model directory (Hugging Face layout)")->required();
  app.add_option("--out", out_dir, "Output artifact directory")->required();
  app.add_option("--method", method, "rtn, gptq, awq or nf4")->capture_default_str();
  app.add_option("--bits", spec.bits, "Weight bits: 2, 3, 4 or 8")->capture_default_str();
  app.add_option("--group-size", spec.group_size,
                 "Input columns per (scale, zero) group; -1: one per output channel (a smaller "
                 "last group when it does not divide the layer's inputs)")
      ->capture_default_str();
  app.add_flag("--sym", spec.symmetric, "Symmetric quantization (default: asymmetric)");
  app.add_flag("--clip", spec.clip_search, "Search a clipped range minimizing the weight error");
  app.add_flag("--per-tensor", spec.per_tensor,
               "One scale for the whole weight (with --group-size -1)");
  app.add_flag("--v1-zeros", spec.v1_zeros,
               "Asymmetric zero points >= 1, storable in GPTQ v1 (set by --export gptq)");
  app.add_option("--grid", grid,
                 "Quantize on llama.cpp's grid of a GGUF type (gguf-q8_0, gguf-q4_0, gguf-q4_1, "
                 "gguf-q2_k ... gguf-q6_k; sets bits and groups; rtn or gptq)");
  app.add_option("--include", include,
                 "Regexes of module names to quantize (default: every linear in the blocks)");
  app.add_option("--exclude", exclude, "Regexes of module names kept in full precision");
  rqat::cli::add_option_flags(app, options.ptq.gptq);
  rqat::cli::add_option_flags(app, options.ptq.awq, {.prefix = "awq-"});
  rqat::cli::add_option_flags(app, options.ptq.nf4);
  rqat::cli::add_option_flags(app, options.ptq.importance);
  app.add_option("--batch-size", options.ptq.batch_size, "Calibration sequences per forward")
      ->capture_default_str();

  rqat::quant::CalibrationOptions calib;
  std::string calib_path;
  app.add_option("--calib", calib_path, "Calibration data: plain text or JSONL");
  rqat::cli::add_option_flags(app, calib.data,
                              {.prefix = "calib-", .rename = {{"text-field", "field"}}});
  app.add_option("--calib-samples", calib.num_samples, "Calibration sequences")
      ->capture_default_str();
  app.add_option("--calib-seq-len", calib.seq_len, "Tokens per calibration sequence")
      ->capture_default_str();
  app.add_option("--calib-seed", calib.seed, "Seed of the sample draw")->capture_default_str();
  app.add_option("--export", options.export_format,
                 "Also write a packed checkpoint: OUT/gptq (gptq v1 or gptq_v2), OUT/bnb for "
                 "--method nf4 (bnb: bitsandbytes 4-bit), or OUT/model-TYPE.gguf (gguf)");
  app.add_option("--gguf-type", gguf_type,
                 "With --export gguf: the matrices' GGUF type (default: the --grid's)");
  app.add_option("--gguf-embedding-type", gguf_embedding_type,
                 "With --export gguf: the embeddings' and output layer's type (default: "
                 "--gguf-type; f32 keeps them as rqat has them)");
  rqat::cli::RuntimeFlags runtime;
  rqat::cli::add_runtime_flags(app, runtime);
  CLI11_PARSE(app, argc, argv);

  return rqat::cli::run_tool("ptq", [&] {
    options.model_dir = model_dir;
    options.out_dir = out_dir;
    options.ptq.method = rqat::parse_enum<rqat::quant::PtqMethod>(method, "--method");
    if (!include.empty()) spec.include = include;
    if (!grid.empty()) spec.use_gguf_grid(rqat::quant::parse_gguf_grid(grid, "--grid"));
    if (!gguf_type.empty())
      options.gguf_type = rqat::parse_enum<rqat::io::GgufType>(gguf_type, "--gguf-type");
    if (!gguf_embedding_type.empty())
      options.gguf_embedding_type =
          rqat::parse_enum<rqat::io::GgufType>(gguf_embedding_type, "--gguf-embedding-type");
    spec.exclude = exclude;
    if (!calib_path.empty()) {
      calib.data.path = calib_path;
      options.calibration = calib;
    }
    runtime.apply();
    options.device = runtime.resolved_device();
    options.dtype = options.device.is_cuda() ? runtime.resolved_dtype() : at::kFloat;
    rqat::tools::run_ptq_command(options, std::cout);
  });
}
