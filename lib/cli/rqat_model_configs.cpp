// See rqat_model_configs.h.
#include "cli/rqat_model_configs.h"

#include <fstream>
#include <istream>
#include <ostream>

#include "cli/rqat_flag_checks.h"
#include "io/error.h"
#include "model/model_dir.h"
#include "quant/gguf/import.h"
#include "tokenizer/tokenizer.h"
#include "tools/compressed_tensors_command.h"
#include "tools/llama2c_convert.h"
#include "tools/tokenize_command.h"

namespace rqat::cli {

namespace {

uint64_t shard_bytes(std::string_view flag, double megabytes) {
  require_at_least(flag, megabytes, 0.0);
  return static_cast<uint64_t>(megabytes * 1e6);
}

}  // namespace

tools::InitModelOptions InitModelConfig::resolve() const {
  require_existing_file("--config", init.config_json);
  tools::InitModelOptions o = init;
  if (init_std) o.init_std = *init_std;
  o.dtype = dtype == StoredDtype::kBf16 ? at::kBFloat16 : at::kFloat;
  o.max_shard_bytes = shard_bytes("--max-shard-mb", max_shard_mb);
  return o;
}

void InitModelConfig::run(std::ostream& out) const {
  tools::init_model_dir(resolve());
  out << "wrote " << init.out_dir.string() << "\n";
}

void LogitsConfig::run() const {
  require_existing_directory("--model", model);
  require_existing_file("--input", input);
  runtime.apply();
  const model::LoadOptions load{runtime.resolved_dtype(), runtime.resolved_device(),
                                runtime.dequantize};
  tools::write_logits(model, input, out, load);
}

void ConvertConfig::run(std::ostream& log) const {
  // What CLI11 checked before the flags were declared, with its words (--llama2c excludes
  // --model, --tokenizer-bin requires --llama2c).
  if (!model.empty()) require_existing_path("--model", model);
  if (!llama2c.empty()) require_existing_file("--llama2c", llama2c);
  if (!llama2c.empty() && !model.empty()) fail("--llama2c excludes --model");
  if (!llama2c_tokenizer.empty()) {
    require_existing_file("--tokenizer-bin", llama2c_tokenizer);
    if (llama2c.empty()) fail("--tokenizer-bin requires --llama2c");
  }
  if (!gguf_tokenizer.empty()) require_existing_directory("--tokenizer", gguf_tokenizer);
  if (!imatrix.empty()) require_existing_file("--imatrix", imatrix);
  const uint64_t max_shard_bytes = shard_bytes("--max-shard-mb", max_shard_mb);

  std::optional<at::ScalarType> stored;
  if (dtype != ConvertDtype::kKeep)
    stored = dtype == ConvertDtype::kBf16 ? at::kBFloat16 : at::kFloat;
  if (!imatrix.empty() && to != ConvertTarget::kGguf) fail("--imatrix goes with --to gguf");
  if (!llama2c.empty()) {
    tools::Llama2cConvertOptions options;
    options.checkpoint = llama2c;
    if (!llama2c_tokenizer.empty()) options.tokenizer_bin = llama2c_tokenizer;
    options.out_dir = out;
    options.dtype = stored.value_or(at::kFloat);  // llama2.c stores float32
    options.max_shard_bytes = max_shard_bytes;
    tools::convert_llama2c(options);
  } else if (!model.empty() && model.ends_with(".gguf")) {
    quant::import_gguf(model, out,
                       gguf_tokenizer.empty()
                           ? std::nullopt
                           : std::optional<std::filesystem::path>(gguf_tokenizer));
  } else if (!model.empty() && std::filesystem::is_directory(model) &&
             tools::is_compressed_tensors_checkpoint(io::Artifact::open(model))) {
    if (to != ConvertTarget::kDir)
      fail(
          "--to {}: --model {} is a compressed-tensors checkpoint; "
          "convert it to an rqat directory first",
          enum_name(to), model);
    tools::import_compressed_tensors_dir(model, out, log);
  } else if (!model.empty() && to == ConvertTarget::kCompressedTensors) {
    tools::convert_model_to_compressed_tensors(model, out, log);
  } else if (!model.empty() && to == ConvertTarget::kGguf) {
    tools::convert_model_to_gguf(model, out, gguf_type, gguf_embedding_type, log, imatrix);
  } else if (!model.empty()) {
    tools::convert_model_dir(model, out, stored, max_shard_bytes);
  } else {
    fail("rqat convert: give --model DIR or --llama2c FILE");
  }
  log << "wrote " << out.string() << "\n";
}

void InfoConfig::run(std::ostream& out) const {
  require_existing_directory("--model", model);
  out << tools::describe_model(model);
}

void TokenizeConfig::run(std::istream& in, std::ostream& out) const {
  require_existing_directory("--tokenizer", tokenizer_dir);
  const auto loaded = tokenizer::Tokenizer::load(tokenizer_dir);
  if (file == "-") {
    tools::tokenize_lines(*loaded, in, out, add_special);
    return;
  }
  std::ifstream lines(file, std::ios::binary);
  if (!lines) fail("{}: cannot open", file);
  tools::tokenize_lines(*loaded, lines, out, add_special);
}

}  // namespace rqat::cli
