// The `rqat generate` operation as a library call (apps/ only parses flags): load a model directory
// and its tokenizer, encode the prompt as given (no chat template), sample n continuations with the
// model's EOS ids (config.json and generation_config.json) as stop tokens, print each sample's text
// and a summary line.
#pragma once

#include <ATen/core/ScalarType.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "generation/generation_engine.h"

namespace rqat::tools {

struct GenerateCommandOptions {
  std::filesystem::path model_dir;
  std::string prompt;
  bool use_chat_template = false;  // render the prompt as a user turn of the model's chat template
  std::string system_prompt;       // system message for the chat template ("" = none)
  std::string chat_template_file;  // placeholder template file instead of the model's ("" = none)
  bool disable_thinking = false;   // Qwen3 enable_thinking=false
  int n = 1;                       // samples of the prompt
  int64_t max_new_tokens = 256;
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
  uint64_t seed = 0;
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;           // do not stop at the model's EOS ids
  generation::EngineOptions engine;  // batch size and KV budget
  bool show_progress = true;
  at::ScalarType dtype = at::kFloat;
  c10::Device device = c10::kCPU;
  bool dequantize = false;  // GPTQ checkpoints: dequantize at load (default: packed kernels)
};

// Runs the whole command, writing to `out`; returns the results (in sample order).
std::vector<generation::GenerationResult> run_generate_command(
    const GenerateCommandOptions& options, std::ostream& out);

}  // namespace rqat::tools
