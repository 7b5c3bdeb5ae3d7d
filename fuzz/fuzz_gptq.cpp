// GPTQ checkpoint loading without a model: config.json's quantization_config, then a safetensors
// file with one layer's packed tensors (layer.qweight, .qzeros, .scales, .g_idx) unpacked with
// the config's bits and group size, as attach_packed_gptq_layers does, and dequantized.
// Input: "config.json\0safetensors bytes". The layer's width is the one its qweight implies.
#include <ATen/ATen.h>

#include "fuzz_util.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "quant/gptq_config.h"
#include "quant/gptq_packing.h"
#include "quant/quantized_weight.h"

namespace {

using namespace rqat;

// Layers beyond this many weights are skipped: the fuzzer looks for wrong answers, not for slow
// but correct dequantization of large layers.
constexpr int64_t kMaxWeights = 1 << 16;

void load_layer(const io::SafetensorsFile& file, const quant::GptqCheckpointConfig& config) {
  if (!file.contains("layer.qweight")) return;
  quant::GptqPackedLayer packed;
  packed.qweight = file.tensor("layer.qweight");
  for (const auto& [part, target] :
       {std::pair{"layer.qzeros", &packed.qzeros}, {"layer.scales", &packed.scales}}) {
    if (!file.contains(part)) return;
    *target = file.tensor(part);
  }
  if (file.contains("layer.g_idx")) packed.g_idx = file.tensor("layer.g_idx");
  if (packed.qweight.dim() != 2 || packed.scales.dim() != 2) return;
  // A shape with a zero dimension holds no bytes, so its other dimension can be anything: bounded
  // here before the harness multiplies it (a model's config bounds it in the real loader).
  if (packed.qweight.size(0) > kMaxWeights || packed.qweight.size(1) > kMaxWeights) return;
  const int64_t in_features = packed.qweight.size(0) * 32 / config.bits;
  const int64_t out_features = packed.qweight.size(1);
  if (in_features * out_features > kMaxWeights) return;
  const quant::QuantizedWeight weight = quant::unpack_gptq_layer(
      packed, config.bits, config.group_size, config.format, in_features, out_features, "layer");
  const at::Tensor dense = weight.dequantize();
  fuzz::require(dense.size(0) == out_features && dense.size(1) == in_features,
                "the dequantized weight has the layer's shape");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split_at_nul(fuzz::as_text(data, size));
  const auto config_path = fuzz::scratch_file("config.json", parts.first);
  const auto weights_path = fuzz::scratch_file("model.safetensors", parts.second);
  fuzz::expect_clean_failure([&] {
    const auto config = quant::read_gptq_config(io::read_json_file(config_path), "config.json");
    if (!config) return;
    load_layer(*io::SafetensorsFile::open(weights_path), *config);
  });
  return 0;
}
