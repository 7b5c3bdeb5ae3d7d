// rqat: the experiment runner and model utilities (init-model, convert (also from llama2.c),
// logits, info, tokenize, generate), plan-memory and doctor.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>

#include "cli/engine_flags.h"
#include "cli/option_flags.h"
#include "cli/runtime_flags.h"
#include "doctor_flags.h"
#include "io/error.h"
#include "io/manifest.h"
#include "nll_flags.h"
#include "plan_memory_flags.h"
#include "quant/gguf/import.h"
#include "report_flags.h"
#include "run_flags.h"
#include "sbatch_flags.h"
#include "status_flags.h"
#include "tiny_task_flags.h"
#include "tools/generate_command.h"
#include "tools/llama2c_convert.h"
#include "tools/model_commands.h"
#include "tools/tokenize_command.h"
#include "traces_flags.h"

int main(int argc, char** argv) {
  rqat::io::set_process_args(argc, argv);
  CLI::App app{
      "rqat: quantize reasoning LLMs (PTQ, QAT with distillation, GRPO) and evaluate them"};
  app.require_subcommand(1);
  // A flag CLI11 rejects (an unknown name, a value that does not parse) is one line, like every
  // other error of the tools.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return fmt::format("rqat: error: {}\n", e.what());
  });
  rqat::cli::RuntimeFlags runtime;

  rqat::tools::InitModelOptions init;
  std::string init_dtype = "f32";
  double shard_mb = 5000;
  auto* init_cmd = app.add_subcommand(
      "init-model", "Write a randomly initialized model directory from a config.json");
  init_cmd->add_option("--config", init.config_json, "config.json (qwen2, qwen3 or llama)")
      ->required()
      ->check(CLI::ExistingFile);
  init_cmd->add_option("--out", init.out_dir, "Output model directory")->required();
  init_cmd->add_option("--seed", init.seed, "Random seed")->capture_default_str();
  init_cmd->add_option("--std", init.init_std,
                       "Weight std (default: config initializer_range or 0.02)");
  init_cmd->add_option("--dtype", init_dtype, "Stored dtype: f32 or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  init_cmd->add_option("--max-shard-mb", shard_mb, "Largest shard in MB (0: one file)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  init_cmd->add_option_function<std::string>(
      "--tokenizer", [&init](const std::string& dir) { init.tokenizer_dir = dir; },
      "Copy this directory's tokenizer files into the model (e.g. rqat tiny-task's tokenizer/)");

  std::string model_dir, input, output;
  auto* logits_cmd =
      app.add_subcommand("logits", "Compute logits for token ids stored in a safetensors file");
  logits_cmd->add_option("--model", model_dir, "Model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  logits_cmd
      ->add_option("--input", input, "safetensors with input_ids and attention_mask (int64, B x T)")
      ->required()
      ->check(CLI::ExistingFile);
  logits_cmd
      ->add_option("--out", output, "safetensors file to write 'logits' (float32, B x T x V) to")
      ->required();
  rqat::cli::add_runtime_flags(*logits_cmd, runtime);

  std::string convert_dtype = "keep", convert_to = "dir", gguf_tokenizer, gguf_embedding_name,
              gguf_imatrix;
  rqat::io::GgufType gguf_type = rqat::io::GgufType::kF16;
  double convert_shard_mb = 5000;
  std::string llama2c_file, llama2c_tokenizer;
  auto* convert_cmd = app.add_subcommand(
      "convert",
      "Re-save a model directory in another dtype or shard size, or convert a llama2.c checkpoint");
  auto* convert_model =
      convert_cmd
          ->add_option("--model", model_dir,
                       "Input model directory, or a .gguf file (written back as a model directory)")
          ->check(CLI::ExistingPath);
  auto* convert_llama2c =
      convert_cmd
          ->add_option("--llama2c", llama2c_file,
                       "Input llama2.c checkpoint (float32 .bin, v0 or v1) instead of --model")
          ->check(CLI::ExistingFile)
          ->excludes(convert_model);
  convert_cmd
      ->add_option("--tokenizer-bin", llama2c_tokenizer,
                   "llama2.c tokenizer.bin of the checkpoint (written as tokenizer.json)")
      ->check(CLI::ExistingFile)
      ->needs(convert_llama2c);
  convert_cmd->add_option("--out", output, "Output model directory (a .gguf file with --to gguf)")
      ->required();
  convert_cmd
      ->add_option("--to", convert_to,
                   "dir: a Hugging Face model directory; gguf: one GGUF file for llama.cpp")
      ->check(CLI::IsMember({"dir", "gguf"}))
      ->capture_default_str();
  convert_cmd
      ->add_option("--tokenizer", gguf_tokenizer,
                   "With a .gguf --model: copy this directory's tokenizer files into the output")
      ->check(CLI::ExistingDirectory);
  rqat::cli::add_option_flag(*convert_cmd, gguf_type, "gguf-type",
                             "GGUF type of the weight matrices with --to gguf (llama.cpp's "
                             "reference quantization of it; norms and biases stay f32)");
  convert_cmd
      ->add_option("--imatrix", gguf_imatrix,
                   "With --to gguf: llama.cpp's imatrix GGUF (llama-imatrix, or ptq --imatrix's "
                   "OUT/imatrix.gguf); the matrices it names are quantized with it, as "
                   "llama-quantize --imatrix")
      ->check(CLI::ExistingFile);
  convert_cmd->add_option("--gguf-embedding-type", gguf_embedding_name,
                          "GGUF type of the token embeddings and output layer with --to gguf "
                          "(default: --gguf-type; f32 keeps them as rqat has them)");
  convert_cmd->add_option("--dtype", convert_dtype, "Stored dtype: keep, f32 or bf16")
      ->check(CLI::IsMember({"keep", "f32", "bf16"}))
      ->capture_default_str();
  convert_cmd->add_option("--max-shard-mb", convert_shard_mb, "Largest shard in MB (0: one file)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  auto* info_cmd = app.add_subcommand("info", "Describe a model directory");
  info_cmd->add_option("--model", model_dir, "Model directory")
      ->required()
      ->check(CLI::ExistingDirectory);

  std::string tokenizer_dir, lines_file;
  bool add_special = false;
  auto* tokenize_cmd =
      app.add_subcommand("tokenize", "Print the token ids of each line of a file (- for stdin)");
  tokenize_cmd->add_option("--tokenizer", tokenizer_dir, "Tokenizer or model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  tokenize_cmd->add_flag("--add-special", add_special,
                         "Add the special tokens the tokenizer adds (e.g. BOS)");
  tokenize_cmd->add_option("file", lines_file, "Text file, one input per line")->required();

  rqat::tools::GenerateCommandOptions gen;
  auto* generate_cmd = app.add_subcommand("generate", "Sample continuations of a prompt");
  generate_cmd->add_option("--model", gen.model_dir, "Model directory (with tokenizer files)")
      ->required()
      ->check(CLI::ExistingDirectory);
  generate_cmd->add_option("--prompt", gen.prompt, "Prompt text")->required();
  generate_cmd->add_flag("--chat", gen.use_chat_template,
                         "Wrap the prompt as a user turn in the model's chat template");
  generate_cmd->add_option("--system", gen.system_prompt, "System message (with --chat)");
  generate_cmd
      ->add_option("--chat-template", gen.chat_template_file,
                   "Chat template file (docs/chat_templates.md)")
      ->check(CLI::ExistingFile);
  generate_cmd->add_flag("--no-thinking", gen.disable_thinking,
                         "Qwen3: close the thinking block up front (with --chat)");
  generate_cmd->add_option("-n,--num-samples", gen.n, "Samples of the prompt")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  generate_cmd->add_option("--max-new-tokens", gen.max_new_tokens, "Tokens to generate at most")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  generate_cmd->add_option("--temperature", gen.temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  generate_cmd->add_option("--top-k", gen.top_k, "Keep the k most likely tokens (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  generate_cmd->add_option("--top-p", gen.top_p, "Nucleus sampling mass (1: off)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  generate_cmd
      ->add_option("--min-p", gen.min_p, "Drop tokens below min_p x the top probability (0: off)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  generate_cmd->add_option("--seed", gen.seed, "Random seed")->capture_default_str();
  generate_cmd->add_option("--stop", gen.stop_strings, "Stop string (repeatable)");
  generate_cmd->add_flag("--ignore-eos", gen.ignore_eos, "Do not stop at the model's EOS tokens");
  rqat::cli::add_engine_flags(*generate_cmd, gen.engine);
  rqat::cli::add_runtime_flags(*generate_cmd, runtime);

  rqat::cli::add_run_subcommand(app);
  rqat::cli::add_nll_subcommand(app);
  rqat::cli::add_plan_memory_subcommand(app);
  rqat::cli::add_doctor_subcommand(app);
  rqat::cli::add_report_subcommand(app);
  rqat::cli::add_status_subcommand(app);
  rqat::cli::add_sbatch_subcommand(app);
  rqat::cli::add_traces_subcommand(app);
  rqat::cli::add_tiny_task_subcommand(app);
  CLI11_PARSE(app, argc, argv);
  return rqat::cli::run_tool("rqat", [&] {
    if (*init_cmd) {
      init.dtype = init_dtype == "bf16" ? at::kBFloat16 : at::kFloat;
      init.max_shard_bytes = static_cast<uint64_t>(shard_mb * 1e6);
      rqat::tools::init_model_dir(init);
      std::cout << "wrote " << init.out_dir.string() << "\n";
    } else if (*logits_cmd) {
      runtime.apply();
      rqat::model::LoadOptions load{runtime.resolved_dtype(), runtime.resolved_device(),
                                    runtime.dequantize};
      rqat::tools::write_logits(model_dir, input, output, load);
    } else if (*convert_cmd) {
      std::optional<at::ScalarType> dtype;
      if (convert_dtype != "keep") dtype = convert_dtype == "bf16" ? at::kBFloat16 : at::kFloat;
      const auto shard_bytes = static_cast<uint64_t>(convert_shard_mb * 1e6);
      if (!gguf_imatrix.empty() && convert_to != "gguf")
        rqat::fail("--imatrix goes with --to gguf");
      if (!llama2c_file.empty()) {
        rqat::tools::Llama2cConvertOptions options;
        options.checkpoint = llama2c_file;
        if (!llama2c_tokenizer.empty()) options.tokenizer_bin = llama2c_tokenizer;
        options.out_dir = output;
        options.dtype = dtype.value_or(at::kFloat);  // llama2.c stores float32
        options.max_shard_bytes = shard_bytes;
        rqat::tools::convert_llama2c(options);
      } else if (!model_dir.empty() && model_dir.ends_with(".gguf")) {
        rqat::quant::import_gguf(model_dir, output,
                                 gguf_tokenizer.empty()
                                     ? std::nullopt
                                     : std::optional<std::filesystem::path>(gguf_tokenizer));
      } else if (!model_dir.empty() && convert_to == "gguf") {
        std::optional<rqat::io::GgufType> gguf_embedding_type;
        if (!gguf_embedding_name.empty())
          gguf_embedding_type =
              rqat::parse_enum<rqat::io::GgufType>(gguf_embedding_name, "--gguf-embedding-type");
        rqat::tools::convert_model_to_gguf(model_dir, output, gguf_type, gguf_embedding_type,
                                           std::cout, gguf_imatrix);
      } else if (!model_dir.empty()) {
        rqat::tools::convert_model_dir(model_dir, output, dtype, shard_bytes);
      } else {
        rqat::fail("rqat convert: give --model DIR or --llama2c FILE");
      }
      std::cout << "wrote " << output << "\n";
    } else if (*tokenize_cmd) {
      auto tokenizer = rqat::tokenizer::Tokenizer::load(tokenizer_dir);
      if (lines_file == "-") {
        rqat::tools::tokenize_lines(*tokenizer, std::cin, std::cout, add_special);
      } else {
        std::ifstream in(lines_file, std::ios::binary);
        if (!in) rqat::fail("{}: cannot open", lines_file);
        rqat::tools::tokenize_lines(*tokenizer, in, std::cout, add_special);
      }
    } else if (*generate_cmd) {
      runtime.apply();
      gen.dtype = runtime.resolved_dtype();
      gen.dequantize = runtime.dequantize;
      gen.device = runtime.resolved_device();
      rqat::tools::run_generate_command(gen, std::cout);
    } else if (*info_cmd) {
      std::cout << rqat::tools::describe_model(model_dir);
    }
  });
}
