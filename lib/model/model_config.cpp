// Parsing of config.json for the supported decoder families. Both the classic layout
// (rope_theta/rope_scaling, torch_dtype) and the transformers 5 layout (rope_parameters, dtype)
// load; saving writes the classic one, which both generations of transformers and other tools read.
#include "model/model_config.h"

#include "io/checked_size.h"
#include "io/error.h"
#include "io/json_text.h"

namespace rqat::model {

namespace {

using io::Json;

struct FieldReader {
  const Json& json;
  const std::string& source;

  const Json* get(const char* key) const {
    auto it = json.find(key);
    return (it == json.end() || it->is_null()) ? nullptr : &*it;
  }
  // A positive integer no larger than `limit` (a value past it is a corrupt or hostile file).
  int64_t positive_int(const char* key, int64_t limit) const {
    const Json* v = get(key);
    if (v == nullptr) fail("{}: field '{}' is missing", source, key);
    if (!v->is_number_integer() || io::json_integer_within(*v, INT64_MIN, 0))
      fail("{}: field '{}' must be a positive integer, got {}", source, key, v->dump());
    const auto value = io::json_integer_within(*v, 1, limit);
    if (!value)
      fail("{}: field '{}' is {}, above rqat's limit of {}", source, key, v->dump(), limit);
    return *value;
  }
  int64_t positive_int_or(const char* key, int64_t fallback, int64_t limit) const {
    return get(key) ? positive_int(key, limit) : fallback;
  }
  double positive_number(const Json& obj, const char* key, double fallback,
                         const char* where) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_number() || it->get<double>() <= 0) {
      fail("{}: field '{}{}' must be a positive number, got {}", source, where, key, it->dump());
    }
    return it->get<double>();
  }
  bool boolean_or(const char* key, bool fallback) const {
    const Json* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean())
      fail("{}: field '{}' must be true or false, got {}", source, key, v->dump());
    return v->get<bool>();
  }
  std::vector<int64_t> token_ids(const char* key) const {
    const Json* v = get(key);
    if (v == nullptr) return {};
    if (v->is_number_integer()) return {token_id(*v, key)};
    std::vector<int64_t> ids;
    if (v->is_array()) {
      for (const auto& id : *v) ids.push_back(token_id(id, key));
      return ids;
    }
    fail("{}: field '{}' must be an integer or a list of integers", source, key);
  }
  // Token ids are int32 everywhere downstream.
  int64_t token_id(const Json& v, const char* key) const {
    if (!v.is_number_integer()) fail("{}: field '{}' must hold integers", source, key);
    const auto id = io::json_integer_within(v, 0, INT32_MAX);
    if (!id) fail("{}: field '{}' holds {}, not a token id in [0, 2^31)", source, key, v.dump());
    return *id;
  }
};

void parse_rope(const FieldReader& r, ModelConfig& c) {
  // transformers 5 nests theta and scaling in rope_parameters; 4.x has them at the top level.
  const Json* params = r.get("rope_parameters");
  const Json* scaling = r.get("rope_scaling");
  if (params != nullptr && !params->is_object())
    fail("{}: field 'rope_parameters' must be an object", r.source);
  if (scaling != nullptr && !scaling->is_object())
    fail("{}: field 'rope_scaling' must be an object", r.source);
  c.rope_theta = r.positive_number(r.json, "rope_theta", c.rope_theta, "");
  if (params != nullptr)
    c.rope_theta = r.positive_number(*params, "rope_theta", c.rope_theta, "rope_parameters.");
  const Json* spec = scaling != nullptr ? scaling : params;
  if (spec == nullptr) return;
  const char* where = scaling != nullptr ? "rope_scaling." : "rope_parameters.";
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    auto it = spec->find(key);
    if (it != spec->end() && it->is_string()) {
      type = it->get<std::string>();
      break;
    }
  }
  if (type == "default") return;
  if (type != "llama3") {
    fail("{}: field '{}rope_type' is '{}'; supported: default, llama3", r.source, where, type);
  }
  Llama3RopeScaling s;
  s.factor = r.positive_number(*spec, "factor", s.factor, where);
  s.low_freq_factor = r.positive_number(*spec, "low_freq_factor", s.low_freq_factor, where);
  s.high_freq_factor = r.positive_number(*spec, "high_freq_factor", s.high_freq_factor, where);
  const double original =
      r.positive_number(*spec, "original_max_position_embeddings",
                        static_cast<double>(s.original_max_position_embeddings), where);
  // Converting a double beyond int64 is undefined behaviour, so the range is checked first.
  if (original > static_cast<double>(kMaxConfigPositions))
    fail("{}: field '{}original_max_position_embeddings' is {}, above rqat's limit of {}", r.source,
         where, original, kMaxConfigPositions);
  s.original_max_position_embeddings = static_cast<int64_t>(original);
  if (s.high_freq_factor <= s.low_freq_factor) {
    fail("{}: field '{}high_freq_factor' must exceed low_freq_factor", r.source, where);
  }
  c.rope_llama3 = s;
}

// The weights of embeddings, layers and lm_head, or nullopt when the count overflows int64.
std::optional<int64_t> checked_weight_count(const ModelConfig& c) {
  using io::checked_add;
  using io::checked_product;
  const int64_t h = c.hidden_size;
  const auto q = checked_product({c.num_attention_heads, c.head_dim});
  const auto kv = checked_product({c.num_key_value_heads, c.head_dim, 2});
  if (!q || !kv) return std::nullopt;
  // Per layer: q, k, v and o projections, the SwiGLU MLP's three, two norms and q/k norms.
  std::optional<int64_t> layer = checked_product({h, *q, 2});
  for (const auto part : {checked_product({h, *kv}), checked_product({h, c.intermediate_size, 3}),
                          checked_product({h, 2}), checked_product({c.head_dim, 2})}) {
    if (!layer || !part) return std::nullopt;
    layer = checked_add(*layer, *part);
  }
  if (!layer) return std::nullopt;
  const auto layers = checked_product({*layer, c.num_hidden_layers});
  const auto embeddings = checked_product({c.vocab_size, h, c.tie_word_embeddings ? 1 : 2});
  if (!layers || !embeddings) return std::nullopt;
  const auto total = checked_add(*layers, *embeddings);
  return total ? checked_add(*total, h) : std::nullopt;
}

}  // namespace

ModelConfig ModelConfig::from_json(const Json& json, const std::string& source) {
  if (!json.is_object()) fail("{}: expected a JSON object", source);
  FieldReader r{json, source};
  ModelConfig c;
  c.raw = json;
  const Json* type = r.get("model_type");
  if (type == nullptr || !type->is_string()) fail("{}: field 'model_type' is missing", source);
  c.model_type = type->get<std::string>();
  c.family = parse_enum<Family>(c.model_type, fmt::format("{}: field 'model_type'", source));

  c.vocab_size = r.positive_int("vocab_size", kMaxConfigVocabSize);
  c.hidden_size = r.positive_int("hidden_size", kMaxConfigWidth);
  c.intermediate_size = r.positive_int("intermediate_size", kMaxConfigWidth);
  c.num_hidden_layers = r.positive_int("num_hidden_layers", kMaxConfigLayers);
  c.num_attention_heads = r.positive_int("num_attention_heads", kMaxConfigHeads);
  c.num_key_value_heads =
      r.positive_int_or("num_key_value_heads", c.num_attention_heads, kMaxConfigHeads);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    fail("{}: field 'num_key_value_heads' ({}) must divide num_attention_heads ({})", source,
         c.num_key_value_heads, c.num_attention_heads);
  }
  if (r.get("head_dim") != nullptr) {
    c.head_dim = r.positive_int("head_dim", kMaxConfigWidth);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      fail(
          "{}: field 'hidden_size' ({}) is not a multiple of num_attention_heads ({}) and no "
          "head_dim is given",
          source, c.hidden_size, c.num_attention_heads);
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0)
    fail("{}: field 'head_dim' ({}) must be even for rotary embeddings", source, c.head_dim);
  c.rms_norm_eps = r.positive_number(json, "rms_norm_eps", c.rms_norm_eps, "");
  c.max_position_embeddings =
      r.positive_int_or("max_position_embeddings", c.max_position_embeddings, kMaxConfigPositions);
  parse_rope(r, c);
  c.tie_word_embeddings = r.boolean_or("tie_word_embeddings", false);

  if (const Json* act = r.get("hidden_act");
      act != nullptr && (!act->is_string() || act->get<std::string>() != "silu")) {
    fail("{}: field 'hidden_act' is {}; only \"silu\" (SwiGLU) is supported", source, act->dump());
  }
  if (r.boolean_or("use_sliding_window", false)) {
    fail("{}: field 'use_sliding_window' is true; sliding-window attention is not supported",
         source);
  }
  switch (c.family) {
    case Family::kQwen2:  // q/k/v always carry a bias in Qwen2, o_proj never
      c.attention_bias = true;
      break;
    case Family::kQwen3:
      c.qk_norm = true;
      c.attention_bias = c.o_proj_bias = r.boolean_or("attention_bias", false);
      break;
    case Family::kLlama:
      c.attention_bias = c.o_proj_bias = r.boolean_or("attention_bias", false);
      c.mlp_bias = r.boolean_or("mlp_bias", false);
      break;
    case Family::kCount:  // not a family
      break;
  }
  c.eos_token_ids = r.token_ids("eos_token_id");
  if (auto bos = r.token_ids("bos_token_id"); !bos.empty()) c.bos_token_id = bos.front();
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (const Json* d = r.get(key); d != nullptr && d->is_string())
      c.torch_dtype = d->get<std::string>();
  }
  if (!checked_weight_count(c) || *checked_weight_count(c) > kMaxConfigWeights)
    fail(
        "{}: the sizes describe more than 2^42 weights (vocab_size {}, hidden_size {}, "
        "intermediate_size {}, {} layers, {} heads of {}), above rqat's limit",
        source, c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers,
        c.num_attention_heads, c.head_dim);
  return c;
}

int64_t weight_element_count(const ModelConfig& config) {
  const auto count = checked_weight_count(config);
  if (!count || *count > kMaxConfigWeights)
    fail("model config: the sizes describe more than 2^42 weights, above rqat's limit");
  return *count;
}

ModelConfig ModelConfig::load(const std::filesystem::path& config_json) {
  return from_json(io::read_json_file(config_json), config_json.string());
}

ModelConfig ModelConfig::from_artifact(const io::Artifact& artifact) {
  ModelConfig config = from_json(artifact.config, artifact.where(io::kConfigFile));
  config.generation = artifact.generation_config;
  return config;
}

io::Json ModelConfig::to_json() const {
  Json j = raw.is_object() ? raw : Json::object();
  j.erase("rope_parameters");
  j.erase("dtype");
  j["model_type"] = model_type;
  if (!j.contains("architectures")) {
    const char* arch = family == Family::kQwen2   ? "Qwen2ForCausalLM"
                       : family == Family::kQwen3 ? "Qwen3ForCausalLM"
                                                  : "LlamaForCausalLM";
    j["architectures"] = Json::array({arch});
  }
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = rms_norm_eps;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rope_theta"] = rope_theta;
  if (rope_llama3) {
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", rope_llama3->factor},
        {"low_freq_factor", rope_llama3->low_freq_factor},
        {"high_freq_factor", rope_llama3->high_freq_factor},
        {"original_max_position_embeddings", rope_llama3->original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  if (family != Family::kQwen2) j["attention_bias"] = attention_bias;
  if (family == Family::kLlama) j["mlp_bias"] = mlp_bias;
  if (bos_token_id) j["bos_token_id"] = *bos_token_id;
  if (eos_token_ids.size() == 1) {
    j["eos_token_id"] = eos_token_ids.front();
  } else if (!eos_token_ids.empty()) {
    j["eos_token_id"] = eos_token_ids;
  }
  j["torch_dtype"] = torch_dtype;
  return j;
}

std::vector<int32_t> model_stop_token_ids(const ModelConfig& config) {
  std::vector<int32_t> ids;
  auto add = [&](int64_t id) {
    if (id < 0 || id > INT32_MAX)
      fail("generation_config.json: eos_token_id holds {}, not a token id in [0, 2^31)", id);
    if (std::find(ids.begin(), ids.end(), static_cast<int32_t>(id)) == ids.end())
      ids.push_back(static_cast<int32_t>(id));
  };
  for (const auto id : config.eos_token_ids) add(id);
  if (config.generation.is_object() && config.generation.contains("eos_token_id")) {
    const auto& eos = config.generation["eos_token_id"];
    // A value above INT64_MAX reads back negative, which add() refuses.
    if (eos.is_number_integer()) {
      add(eos.get<int64_t>());
    } else if (eos.is_array()) {
      for (const auto& e : eos) {
        if (!e.is_number_integer()) fail("generation_config.json: eos_token_id must hold integers");
        add(e.get<int64_t>());
      }
    } else if (!eos.is_null()) {
      fail("generation_config.json: eos_token_id must be an integer or a list of integers");
    }
  }
  return ids;
}

}  // namespace rqat::model
