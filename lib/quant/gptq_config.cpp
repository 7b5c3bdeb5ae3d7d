// See gptq_config.h.
#include "quant/gptq_config.h"

#include <fmt/format.h>

#include "io/error.h"
#include "ops/weight_formats.h"

namespace rqat::quant {

namespace {

const io::Json* find_key(const io::Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

}  // namespace

std::optional<GptqCheckpointConfig> read_gptq_config(const io::Json& config_json,
                                                     const std::string& where) {
  const io::Json* qc =
      config_json.is_object() ? find_key(config_json, "quantization_config") : nullptr;
  if (qc == nullptr || qc->is_null()) return std::nullopt;
  if (!qc->is_object()) fail("{}: quantization_config is not an object", where);
  const auto field = [&](const char* key) {
    return fmt::format("{}: quantization_config.{}", where, key);
  };
  const io::Json* method = find_key(*qc, "quant_method");
  if (method == nullptr || !method->is_string())
    fail("{} is missing or not a string", field("quant_method"));
  if (method->get<std::string>() != "gptq") {
    fail("{} is '{}'; rqat loads only 'gptq' quantized checkpoints", field("quant_method"),
         method->get<std::string>());
  }
  GptqCheckpointConfig c;
  const io::Json* bits = find_key(*qc, "bits");
  if (bits == nullptr || !bits->is_number_integer())
    fail("{} is missing or not an integer", field("bits"));
  // Read wide, so that 2^32 + 4 is refused rather than narrowed to 4.
  const int64_t stored_bits = bits->get<int64_t>();
  if (stored_bits < 0 || stored_bits > 64 ||
      !ops::integer_bits_supported(static_cast<int>(stored_bits)))
    fail("{} = {} is not supported ({})", field("bits"), bits->dump(), ops::integer_bits_choices());
  c.bits = static_cast<int>(stored_bits);
  const io::Json* group = find_key(*qc, "group_size");
  if (group == nullptr || !group->is_number_integer())
    fail("{} is missing or not an integer", field("group_size"));
  c.group_size = group->get<int64_t>();
  if (c.group_size != -1 && c.group_size <= 0)
    fail("{} = {} is neither positive nor -1", field("group_size"), c.group_size);
  for (const auto& [key, target] : {std::pair{"sym", &c.sym}, {"desc_act", &c.desc_act}}) {
    if (const io::Json* v = find_key(*qc, key)) {
      if (!v->is_boolean()) fail("{} is not a boolean", field(key));
      *target = v->get<bool>();
    }
  }
  const io::Json* format = find_key(*qc, "checkpoint_format");
  const char* format_key = "checkpoint_format";
  if (format == nullptr) {
    format = find_key(*qc, "format");
    format_key = "format";
  }
  if (format != nullptr) {
    if (!format->is_string()) fail("{} is not a string", field(format_key));
    c.format = parse_enum<GptqFormat>(format->get<std::string>(), field(format_key));
  }
  if (const io::Json* pack = find_key(*qc, "pack_dtype")) {
    if (!pack->is_string() || pack->get<std::string>() != "int32")
      fail("{} = {}: rqat reads int32 packing only", field("pack_dtype"), pack->dump());
  }
  if (const io::Json* dynamic = find_key(*qc, "dynamic");
      dynamic != nullptr && !dynamic->is_null()) {
    if (!dynamic->is_object()) fail("{} is not an object", field("dynamic"));
    for (const auto& [pattern, override_] : dynamic->items()) {
      // "-:" patterns only mark layers left in full precision (they have no qweight).
      if (!pattern.starts_with("-:") && !(override_.is_object() && override_.empty())) {
        fail("{}: per-module override '{}' is not supported (one bits/group_size per checkpoint)",
             field("dynamic"), pattern);
      }
    }
  }
  return c;
}

bool is_gptq_checkpoint(const io::Artifact& artifact) {
  const io::Json& json = artifact.config;
  if (!json.is_object()) return false;
  const io::Json* qc = find_key(json, "quantization_config");
  if (qc == nullptr || !qc->is_object()) return false;
  const io::Json* method = find_key(*qc, "quant_method");
  return method != nullptr && method->is_string() && method->get<std::string>() == "gptq";
}

bool is_gptq_checkpoint(const std::filesystem::path& dir) {
  return is_gptq_checkpoint(io::Artifact::open_any(dir));
}

}  // namespace rqat::quant
