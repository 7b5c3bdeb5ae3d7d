// See model_commands.h.
#include "tools/model_commands.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <ostream>

#include "io/checkpoint.h"
#include "io/error.h"
#include "io/json_file.h"
#include "model/init.h"
#include "quant/gguf/export.h"
#include "quant/gguf/grid.h"
#include "quant/gguf/importance.h"
#include "quant/load_model.h"
#include "quant/quant_state.h"
#include "tokenizer/tokenizer.h"

namespace rqat::tools {
// A tool wires concerns together; the names of the ones it is mostly made of read unqualified.
using namespace rqat::model;

void init_model_dir(const InitModelOptions& options) {
  ModelConfig config = ModelConfig::load(options.config_json);
  double std = options.init_std;
  if (std < 0) {
    auto it = config.raw.find("initializer_range");
    std = (it != config.raw.end() && it->is_number()) ? it->get<double>() : 0.02;
  }
  if (options.tokenizer_dir) {
    // Loading also proves the directory holds a tokenizer: the copier skips missing files.
    const auto tok = tokenizer::Tokenizer::load(*options.tokenizer_dir);
    if (tok->vocab_size() > config.vocab_size)
      fail("{}: vocab_size {} is smaller than the {} tokens of --tokenizer {}",
           options.config_json.string(), config.vocab_size, tok->vocab_size(),
           options.tokenizer_dir->string());
  }
  CausalLM model(config, at::TensorOptions().dtype(at::kFloat));
  init_random(model, options.seed, std);
  SaveOptions save;
  save.dtype = options.dtype;
  save.max_shard_bytes = options.max_shard_bytes;
  save.tokenizer_from = options.tokenizer_dir;
  save_causal_lm(model, options.out_dir, save);
}

void convert_model_dir(const std::filesystem::path& in_dir, const std::filesystem::path& out_dir,
                       std::optional<at::ScalarType> dtype, uint64_t max_shard_bytes) {
  // Load in float32 so every stored dtype converts exactly (bf16/f16 -> f32 is lossless).
  auto model = load_causal_lm(in_dir, {at::kFloat, c10::kCPU});
  SaveOptions save;
  save.dtype = dtype.value_or(hf_dtype_to_scalar(model->config().torch_dtype));
  save.max_shard_bytes = max_shard_bytes;
  save.tokenizer_from = in_dir;
  save_causal_lm(*model, out_dir, save);
}

void convert_model_to_gguf(const std::filesystem::path& in_dir,
                           const std::filesystem::path& out_file, io::GgufType type,
                           std::optional<io::GgufType> embedding_type, std::ostream& out,
                           const std::filesystem::path& imatrix) {
  // The importance matrix first: a file that is not one fails before the model loads.
  std::map<std::string, quant::LayerImportance> importance;
  if (!imatrix.empty()) importance = quant::read_gguf_imatrix(imatrix);
  const io::Artifact artifact = io::Artifact::open(in_dir);  // the model and its tokenizer files
  auto model = quant::load_model(artifact, {at::kFloat, c10::kCPU, /*dequantize=*/true});
  quant::GgufExportOptions options;
  options.type = type;
  options.embedding_type = embedding_type;
  options.name = in_dir.filename().string();
  if (!imatrix.empty()) options.importance = &importance;
  std::optional<quant::QuantState> state;
  if (artifact.has(quant::kQuantStateFile)) {
    state = quant::load_quant_state(in_dir);
    if (state->spec.gguf_grid == type)
      options.grid_layers = &state->layers;
    else if (state->spec.gguf_grid)
      out << fmt::format("note: {} was made on the {} grid; --gguf-type {} requantizes it\n",
                         in_dir.string(), quant::gguf_grid_name(*state->spec.gguf_grid),
                         enum_name(type));
  }
  const auto summary = quant::export_gguf(*model, artifact, out_file, options);
  std::string text = fmt::format("{} tensors", summary.tensors);
  if (summary.grid_layers > 0)
    text += fmt::format("; {} matrices written from their codes on the {} grid (no rounding)",
                        summary.grid_layers, quant::gguf_grid_name(type));
  for (const auto& [matrix_type, count] : summary.requantized)
    text += fmt::format("; {} quantized to {} by llama.cpp's reference quantizer", count,
                        enum_name(matrix_type));
  for (const auto& [matrix_type, count] : summary.weighted)
    text += fmt::format("; {} quantized to {} with the importance matrix", count,
                        enum_name(matrix_type));
  out << text << "\n";
}

void write_logits(const std::filesystem::path& model_dir, const std::filesystem::path& input,
                  const std::filesystem::path& output, const LoadOptions& options) {
  // As every tool loads it: a GPTQ checkpoint's packed layers, an --act-grid artifact's
  // quantized activations.
  auto model = quant::load_model(model_dir, options);
  auto file = io::SafetensorsFile::open(input);
  for (const char* name : {"input_ids", "attention_mask"}) {
    if (!file->contains(name)) fail("{}: tensor '{}' is missing", input.string(), name);
  }
  auto ids = file->tensor("input_ids").to(options.device, at::kLong);
  auto mask = file->tensor("attention_mask").to(options.device, at::kLong);
  if (ids.dim() != 2 || ids.sizes() != mask.sizes()) {
    fail("{}: input_ids and attention_mask must both be (batch, steps)", input.string());
  }
  const auto vocab = model->config().vocab_size;
  if (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= vocab) {
    fail("{}: input_ids outside [0, {})", input.string(), vocab);
  }
  torch::NoGradGuard no_grad;
  auto logits = model->forward(ids, mask).to(at::kCPU, at::kFloat);
  io::save_safetensors(output, {{"logits", logits}});
}

std::string describe_model(const std::filesystem::path& model_dir) {
  const ModelConfig c = ModelConfig::from_artifact(io::Artifact::open(model_dir));
  io::CheckpointReader checkpoint(model_dir);
  int64_t params = 0;
  for (const auto& name : checkpoint.names()) params += checkpoint.tensor(name).numel();
  return fmt::format(
      "model        {}\nfamily       {}\nlayers       {}\nhidden       {}\nintermediate {}\nheads  "
      "      {} "
      "(kv {}, head_dim {})\nvocab        {}\ntied lm_head {}\nrope         theta {}{}\nparameters "
      "  {:.3f} M\n"
      "stored dtype {}\nfiles        {} ({:.1f} MB)\n",
      model_dir.string(), c.model_type, c.num_hidden_layers, c.hidden_size, c.intermediate_size,
      c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.vocab_size,
      c.tie_word_embeddings ? "yes" : "no", c.rope_theta,
      c.rope_llama3 ? fmt::format(", llama3 x{}", c.rope_llama3->factor) : "", params / 1e6,
      c.torch_dtype, checkpoint.files().size(), checkpoint.total_bytes() / 1e6);
}

}  // namespace rqat::tools
