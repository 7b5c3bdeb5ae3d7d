// The "quantization_config" of a GPTQ checkpoint's config.json, as rqat reads it. Apart from the
// checkpoint code (gptq_checkpoint.h) so that it needs no model: the fuzz target reads it alone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "io/artifact.h"
#include "io/json_file.h"
#include "quant/gptq_packing.h"

namespace rqat::quant {

// What rqat reads from a "quantization_config" of quant_method "gptq".
struct GptqCheckpointConfig {
  int bits = 4;
  int64_t group_size = 128;  // -1: per channel
  bool sym = true;
  bool desc_act = false;
  GptqFormat format = GptqFormat::kV1;
};

// The GPTQ settings of a config.json object, or nullopt when it has no quantization_config.
// Throws (naming `where` and the field) for other quant methods, packed formats rqat does not read
// (marlin, bitblas, ...), pack dtypes other than int32 and per-module bit or group overrides.
std::optional<GptqCheckpointConfig> read_gptq_config(const io::Json& config_json,
                                                     const std::string& where);

// True when dir/config.json declares a GPTQ quantization_config.
bool is_gptq_checkpoint(const io::Artifact& artifact);
bool is_gptq_checkpoint(const std::filesystem::path& dir);

}  // namespace rqat::quant
