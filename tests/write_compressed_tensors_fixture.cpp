// write_compressed_tensors_fixture OUT SCHEME: a tiny random qwen3 (every matrix a multiple of 32
// wide) quantized by rqat in SCHEME (w4a16, w4a16-asym, w8a16, w8-asym, w3-asym, nvfp4, mxfp4,
// fp8; nvfp4-w4a4, mxfp4-w4a4, fp8-w8a8 with their activations, nvfp4's input global scales
// calibrated on a few tokens; w4a16-fp16: a float16 model whose scales are rounded to float16, as
// GPTQ checkpoints keep them, exported in float16), written as
//   OUT/rqat      rqat's dense model (its quantized layers' weights QuantizedWeight::dequantize(),
//                 float32) with quant_state.safetensors: the reference;
//   OUT/ct        the compressed-tensors export of the same state (in the model's dtype);
//   OUT/imported  OUT/ct imported back.
// For tests/python/test_compressed_tensors_peer.py, which reads OUT/ct with compressed-tensors and
// transformers.
#include <ATen/ATen.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "compressed_tensors_tiny_model.h"
#include "io/checkpoint.h"
#include "model/model_dir.h"
#include "quant/activation_quant.h"
#include "quant/compressed_tensors/export.h"
#include "quant/compressed_tensors/import.h"
#include "quant/fp_grid_weight.h"
#include "quant/fused_layers.h"
#include "quant/rtn.h"

using namespace rqat;

namespace {

quant::QuantSpec spec_of(const std::string& scheme) {
  quant::QuantSpec spec;
  spec.symmetric = true;
  if (scheme == "w4a16" || scheme == "w4a16-fp16") {
    spec.bits = 4, spec.group_size = 32;
  } else if (scheme == "w4a16-asym") {
    spec.bits = 4, spec.group_size = 32, spec.symmetric = false;
  } else if (scheme == "w8a16") {
    spec.bits = 8, spec.group_size = -1;
  } else if (scheme == "w8-asym") {
    spec.bits = 8, spec.group_size = 32, spec.symmetric = false;
  } else if (scheme == "w3-asym") {
    spec.bits = 3, spec.group_size = 64, spec.symmetric = false;
  } else if (scheme == "nvfp4" || scheme == "mxfp4" || scheme == "fp8") {
    spec.use_fp_grid(parse_enum<quant::FpGrid>(scheme, "SCHEME"));
  } else if (scheme == "nvfp4-w4a4" || scheme == "mxfp4-w4a4" || scheme == "fp8-w8a8") {
    const auto grid = parse_enum<quant::FpGrid>(scheme.substr(0, scheme.find('-')), "SCHEME");
    spec.use_fp_grid(grid);
    spec.activations = grid;
  } else {
    throw std::runtime_error("unknown scheme " + scheme);
  }
  return spec;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUT SCHEME\n", argv[0]);
    return 2;
  }
  try {
    const std::filesystem::path out = argv[1];
    const std::string scheme = argv[2];
    const quant::QuantSpec spec = spec_of(scheme);
    const at::ScalarType dtype = scheme == "w4a16-fp16" ? at::kHalf : at::kFloat;
    auto tiny = test::compressed_tensors_tiny_model(dtype, 7);
    model::CausalLM& model = *tiny;
    quant::QuantState state{spec, {}};
    // nvfp4 activations: each layer's input global scale from the full-precision model's inputs
    // on a few tokens (a second instance, whose layers the calibration wraps).
    std::map<std::string, at::Tensor> input_scales;
    if (spec.activations) {
      auto calibrated = test::compressed_tensors_tiny_model(dtype, 7);
      quant::attach_activation_quant(*calibrated, spec, {});
      input_scales = quant::calibrate_input_global_scales(*calibrated, [&] {
        calibrated->forward(at::arange(5, 45, at::kLong).remainder(256).view({2, 20}));
      });
    }
    const auto globals = quant::shared_nvfp4_global_scales(model, spec);
    io::NamedTensors dense = model.state_tensors();
    for (auto& [name, tensor] : dense) {
      const std::string module = name.substr(0, name.rfind('.'));
      if (!name.ends_with(".weight") || tensor.dim() != 2 || !spec.quantizes(module)) continue;
      quant::QuantizedWeight w =
          quant::rtn_quantize(tensor, spec, {}, quant::shared_global_scale(globals, module));
      if (const auto input = input_scales.find(module); input != input_scales.end())
        w.input_global_scale = input->second;
      if (dtype != at::kFloat) w.scales = w.scales.to(dtype).to(at::kFloat);
      tensor = w.dequantize();
      state.layers.emplace(module, std::move(w));
    }
    std::filesystem::remove_all(out);
    std::filesystem::create_directories(out / "rqat");
    for (auto& [name, tensor] : dense) tensor = tensor.to(at::kFloat);
    io::write_checkpoint(out / "rqat", dense, 0);
    quant::save_quant_state(out / "rqat", state);
    model::ModelConfig config = model.config();
    config.torch_dtype = "float32";
    model::save_model_config(config, out / "rqat");
    const auto summary = quant::export_compressed_tensors(model, state, out / "rqat", out / "ct");
    quant::import_compressed_tensors(out / "ct", out / "imported");
    std::printf("%s: %lld layers\n", summary.scheme.describe().c_str(),
                static_cast<long long>(summary.quantized_layers));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
