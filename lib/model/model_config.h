// The architecture of a decoder as read from a Hugging Face config.json (qwen2, qwen3, llama),
// validated field by field. Unknown keys are kept verbatim so a saved config round-trips.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/artifact.h"
#include "io/enum_names.h"
#include "io/json_file.h"

namespace rqat::model {

enum class Family { kQwen2, kQwen3, kLlama, kCount };
// The names are config.json's model_type.
constexpr EnumNames<Family> enum_names(Family) { return {"qwen2", "qwen3", "llama"}; }

// rope_scaling of type "llama3" (Llama 3.1+): low frequencies are slowed down by `factor`,
// high ones kept, and the band in between interpolated.
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Family family = Family::kQwen3;
  std::string model_type;  // "qwen2" | "qwen3" | "llama"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // SwiGLU inner width
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // < num_attention_heads means grouped-query attention
  int64_t head_dim = 0;             // explicit in qwen3/llama configs, else hidden/heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<Llama3RopeScaling> rope_llama3;
  int64_t max_position_embeddings = 4096;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (qwen2 always; llama when attention_bias)
  bool o_proj_bias = false;     // llama's attention_bias also covers o_proj
  bool mlp_bias = false;        // llama only
  bool qk_norm = false;         // qwen3: RMSNorm over each head of q and k
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;
  std::string torch_dtype = "float32";  // dtype the checkpoint was saved in

  io::Json raw;         // the original config.json, for a faithful save
  io::Json generation;  // generation_config.json of the directory (null when absent)

  // Parses and validates; errors name the file and the field.
  static ModelConfig from_json(const io::Json& json, const std::string& source);
  // A config file given by its path (--config FILE); a model directory's comes from its Artifact.
  static ModelConfig load(const std::filesystem::path& config_json);
  // The artifact's config.json (required) with its generation_config.json.
  static ModelConfig from_artifact(const io::Artifact& artifact);

  // config.json text in the classic (transformers 4.x) layout that every HF-based tool reads.
  io::Json to_json() const;

  int64_t num_kv_groups() const { return num_attention_heads / num_key_value_heads; }
  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
};

// Largest sizes config.json may declare. Real checkpoints stay far below them (Qwen3-235B: hidden
// 4096, intermediate 12288, 151936 tokens, 94 layers, 64 heads); they keep every product the
// decoder forms inside int64 and turn a corrupt field into an error instead of an allocation of
// exabytes.
inline constexpr int64_t kMaxConfigVocabSize = INT32_MAX;     // token ids are int32
inline constexpr int64_t kMaxConfigWidth = int64_t{1} << 20;  // hidden, intermediate, head_dim
inline constexpr int64_t kMaxConfigLayers = int64_t{1} << 12;
inline constexpr int64_t kMaxConfigHeads = int64_t{1} << 14;
inline constexpr int64_t kMaxConfigPositions = INT32_MAX;
inline constexpr int64_t kMaxConfigWeights = int64_t{1} << 42;  // 4.4 trillion parameters

// Number of weight elements (embeddings, every layer's projections and norms, lm_head unless
// tied) the config describes; rqat::Error when it exceeds kMaxConfigWeights or int64.
int64_t weight_element_count(const ModelConfig& config);

// EOS ids of a model directory: config.json's eos_token_id plus generation_config.json's,
// deduplicated.
std::vector<int32_t> model_stop_token_ids(const ModelConfig& config);

}  // namespace rqat::model
