// The `rqat nll` operation as a library call (apps/ only parses flags): score a text or JSONL file
// with a model directory (FP or fake-quantized, e.g. a ptq artifact) and report the number of
// scored tokens, the mean NLL and the perplexity, to compare models quickly without generation.
// Documents are scored in windows of --seq-len tokens (see score_windows in token_nll.h).
#pragma once

#include <ATen/core/ScalarType.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>

#include "data/text_dataset.h"
#include "train/token_nll.h"

namespace rqat::tools {

struct NllCommandOptions {
  std::filesystem::path model_dir;  // also the tokenizer (and chat template) directory
  data::TextDataOptions data;       // path, format, fields, chat template use
  std::string chat_template_file;   // placeholder template instead of the model's ("" = none)
  int64_t seq_len = 512;            // must not exceed the model's max_position_embeddings
  std::optional<int64_t> max_tokens;
  int64_t batch_size = 8;
  std::optional<std::filesystem::path> json_out;  // write the numbers as JSON here
  at::ScalarType dtype = at::kFloat;
  c10::Device device = c10::kCPU;
  bool dequantize = false;  // GPTQ checkpoints: dequantize at load (default: packed kernels)
};

struct NllReport {
  train::NllTotals totals;
  int64_t documents = 0;
  int64_t windows = 0;
  double seconds = 0.0;
};

// Runs the command, printing a small table to `out`; writes options.json_out when set.
NllReport run_nll_command(const NllCommandOptions& options, std::ostream& out);

}  // namespace rqat::tools
