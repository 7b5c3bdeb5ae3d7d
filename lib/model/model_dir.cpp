// See model_dir.h.
#include "model/model_dir.h"

#include <ATen/ATen.h>

#include "io/checkpoint.h"
#include "io/error.h"
#include "io/json_file.h"

namespace rqat::model {

namespace fs = std::filesystem;

namespace {

// Tokenizer files that transformers' AutoTokenizer reads; copied so an artifact is self-contained.
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",
                                           io::kTokenizerConfigFile.data(),
                                           io::kSpecialTokensMapFile.data(),
                                           "vocab.json",
                                           "merges.txt",
                                           "added_tokens.json",
                                           "tokenizer.model",
                                           io::kChatTemplateFile.data()};

bool ignorable_extra(const std::string& name, const ModelConfig& config) {
  // Some exporters store the rotary table; a tied model may still carry a copy of the embedding.
  return name.ends_with("rotary_emb.inv_freq") ||
         (config.tie_word_embeddings && name == "lm_head.weight");
}

}  // namespace

const char* hf_dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "float32";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    default:
      fail("dtype {} is not a model dtype (float32, bfloat16, float16)", c10::toString(dtype));
  }
}

at::ScalarType hf_dtype_to_scalar(const std::string& name) {
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  return at::kFloat;
}

void load_weights(CausalLM& model, const fs::path& dir) {
  io::CheckpointReader checkpoint(dir);
  const std::string where = dir.string();
  const auto& options = model.options();
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    if (!checkpoint.contains(name)) {
      fail("{}: checkpoint has no tensor '{}', which this {} config needs", where, name,
           model.config().model_type);
    }
    at::Tensor stored = checkpoint.tensor(name);
    at::Tensor& param = item.value();
    if (stored.sizes() != param.sizes()) {
      fail("{}: tensor '{}' has shape {} but config.json implies {}", where, name,
           c10::str(stored.sizes()), c10::str(param.sizes()));
    }
    if (!at::isFloatingType(stored.scalar_type())) {
      fail("{}: tensor '{}' is stored as {}, expected a floating-point weight", where, name,
           c10::toString(stored.scalar_type()));
    }
    // A no-op (and so no copy) when dtype and device already match.
    param.set_data(stored.to(options.device(), options.dtype().toScalarType()));
    used.insert(name);
  }
  // Buffers (the packed tensors of GPTQ layers) were read by the layers that own them.
  for (const auto& item : model.named_buffers(/*recurse=*/true)) used.insert(item.key());
  for (const auto& name : checkpoint.names()) {
    if (used.count(name) == 0 && !ignorable_extra(name, model.config())) {
      fail("{}: unexpected tensor '{}' in the checkpoint (quantized or different architecture?)",
           where, name);
    }
  }
}

std::shared_ptr<CausalLM> build_causal_lm(const io::Artifact& artifact,
                                          const LoadOptions& options) {
  // The modules are built without touching memory (at::empty); load_weights swaps in the mapped
  // weights.
  return std::make_shared<CausalLM>(
      ModelConfig::from_artifact(artifact),
      at::TensorOptions().dtype(options.dtype).device(options.device));
}

std::shared_ptr<CausalLM> build_causal_lm(const fs::path& dir, const LoadOptions& options) {
  return build_causal_lm(io::Artifact::open(dir), options);
}

std::shared_ptr<CausalLM> load_causal_lm(const io::Artifact& artifact, const LoadOptions& options) {
  auto model = build_causal_lm(artifact, options);
  if (model->config().raw.contains("quantization_config"))
    fail("{}: has a quantization_config; quantized checkpoints load through quant::load_model",
         artifact.where(io::kConfigFile));
  load_weights(*model, artifact.dir);
  return model;
}

std::shared_ptr<CausalLM> load_causal_lm(const fs::path& dir, const LoadOptions& options) {
  return load_causal_lm(io::Artifact::open(dir), options);
}

void save_causal_lm(const CausalLM& model, const fs::path& dir, const SaveOptions& options) {
  fs::create_directories(dir);
  const at::ScalarType dtype = options.dtype.value_or(model.options().dtype().toScalarType());
  ModelConfig config = model.config();
  config.torch_dtype = hf_dtype_name(dtype);
  io::NamedTensors tensors = model.state_tensors();
  // Buffers (packed GPTQ tensors: int32 words, float16 scales) are stored as they are.
  std::set<std::string> buffers;
  for (const auto& item : model.named_buffers(/*recurse=*/true)) buffers.insert(item.key());
  for (auto& [name, t] : tensors)
    t = t.detach().to(at::kCPU, buffers.count(name) ? t.scalar_type() : dtype);
  io::write_checkpoint(dir, tensors, options.max_shard_bytes);
  save_model_config(config, dir);

  if (options.tokenizer_from) copy_tokenizer_files(*options.tokenizer_from, dir);
}

void copy_tokenizer_files(const fs::path& from, const fs::path& to) {
  if (fs::absolute(from) == fs::absolute(to)) return;
  for (const char* file : kTokenizerFiles) {
    const fs::path source = from / file;
    if (fs::exists(source)) fs::copy_file(source, to / file, fs::copy_options::overwrite_existing);
  }
}

void save_model_config(const ModelConfig& config, const fs::path& dir) {
  fs::create_directories(dir);
  io::write_json_file(dir / io::kConfigFile, config.to_json());

  io::Json generation = config.generation.is_object() ? config.generation : io::Json::object();
  if (config.bos_token_id && !generation.contains("bos_token_id"))
    generation["bos_token_id"] = *config.bos_token_id;
  if (!config.eos_token_ids.empty() && !generation.contains("eos_token_id")) {
    generation["eos_token_id"] = config.eos_token_ids.size() == 1
                                     ? io::Json(config.eos_token_ids[0])
                                     : io::Json(config.eos_token_ids);
  }
  io::write_json_file(dir / io::kGenerationConfigFile, generation);
}

}  // namespace rqat::model
