// compressed-tensors export and import (quant/compressed_tensors/): per scheme, a round trip gives
// the same codes, scales, zero points and dequantized weights bit for bit; the packing's bit
// layout against hand-packed words; refusals name the layer; a malformed checkpoint names the
// file and the tensor or field. compressed-tensors' own reading of the exports is
// tests/python/test_compressed_tensors_peer.py.
#include <ATen/ATen.h>

#include <algorithm>

#include "compressed_tensors_tiny_model.h"
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "model/init.h"
#include "model/model_config.h"
#include "model/model_dir.h"
#include "quant/compressed_tensors/export.h"
#include "quant/compressed_tensors/import.h"
#include "quant/compressed_tensors/tensors.h"
#include "quant/fp_grid_weight.h"
#include "quant/fused_layers.h"
#include "quant/rtn.h"
#include "test_util.h"

using namespace rqat;
using quant::CtFormat;
using quant::FpGrid;

namespace {

std::shared_ptr<model::CausalLM> tiny_model(at::ScalarType dtype = at::kFloat) {
  return test::compressed_tensors_tiny_model(dtype, 3);
}

std::map<std::string, at::Tensor> weights_of(const model::CausalLM& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : model.state_tensors()) out.emplace(name, t);
  return out;
}

// The spec's layers of `model` quantized: RTN on the uniform grid, the reference quantizer on a
// floating-point one (nvfp4's global scale shared by the layers engines fuse, as ptq does).
quant::QuantState quantize(model::CausalLM& model, const quant::QuantSpec& spec) {
  quant::QuantState state{spec, {}};
  const auto weights = weights_of(model);
  const auto globals = quant::shared_nvfp4_global_scales(model, spec);
  for (const auto& slot : model.linear_layers(true)) {
    if (!spec.quantizes(slot.name)) continue;
    const at::Tensor w = weights.at(slot.name + ".weight").to(at::kFloat);
    state.layers.emplace(
        slot.name,
        quant::rtn_quantize(w, spec, {}, quant::shared_global_scale(globals, slot.name)));
  }
  return state;
}

quant::QuantSpec uniform(int bits, int64_t group, bool symmetric) {
  quant::QuantSpec spec;
  spec.bits = bits;
  spec.group_size = group;
  spec.symmetric = symmetric;
  return spec;
}

quant::QuantSpec fp(FpGrid grid) {
  quant::QuantSpec spec;
  spec.use_fp_grid(grid);
  return spec;
}

void require_same_layer(const quant::QuantizedWeight& a, const quant::QuantizedWeight& b) {
  REQUIRE(at::equal(a.codes, b.codes));
  REQUIRE(at::equal(a.scales, b.scales));
  REQUIRE(at::equal(a.zeros, b.zeros));
  REQUIRE(at::equal(a.g_idx, b.g_idx));
  REQUIRE(a.bits == b.bits);
  REQUIRE(a.group_size == b.group_size);
  REQUIRE(a.fp_grid == b.fp_grid);
  REQUIRE(a.super_scales.defined() == b.super_scales.defined());
  if (a.super_scales.defined()) REQUIRE(at::equal(a.super_scales, b.super_scales));
  REQUIRE(at::equal(a.dequantize(), b.dequantize()));
}

// Exports, reads back, and checks every layer and every other tensor.
quant::CompressedTensorsModel round_trip(
    const model::CausalLM& model, const quant::QuantState& state, const test::TempDir& tmp,
    const quant::CompressedTensorsExportOptions& options = {}) {
  const auto summary =
      quant::export_compressed_tensors(model, state, tmp.path(), tmp / "ct", options);
  REQUIRE(summary.quantized_layers == static_cast<int64_t>(state.layers.size()));
  REQUIRE(std::find(summary.ignored.begin(), summary.ignored.end(), "lm_head") !=
          summary.ignored.end());
  quant::CompressedTensorsModel read = quant::read_compressed_tensors(tmp / "ct");
  REQUIRE(read.scheme == summary.scheme);
  REQUIRE(read.state.layers.size() == state.layers.size());
  for (const auto& [name, w] : state.layers) require_same_layer(read.state.layers.at(name), w);
  REQUIRE(read.state.spec.bits == state.spec.bits);
  REQUIRE(read.state.spec.group_size == state.spec.group_size);
  REQUIRE(read.state.spec.symmetric == state.spec.symmetric);
  REQUIRE(read.state.spec.fp_grid == state.spec.fp_grid);
  // The default include survives when it selected the quantized layers.
  REQUIRE(read.state.spec.include == state.spec.include);
  const auto original = weights_of(model);
  const at::ScalarType dtype = options.dtype.value_or(model.options().dtype().toScalarType());
  REQUIRE(read.tensors.size() == original.size());
  for (const auto& [name, t] : read.tensors) {
    REQUIRE(t.scalar_type() == at::kFloat);
    const std::string module = name.substr(0, name.size() - 7);
    if (name.ends_with(".weight") && state.layers.count(module)) {
      REQUIRE(at::equal(t, state.layers.at(module).dequantize()));
    } else {
      REQUIRE(at::equal(t, original.at(name).to(dtype).to(at::kFloat)));
    }
  }
  const io::Json config = io::read_json_file(tmp / "ct" / "config.json");
  REQUIRE(config["quantization_config"]["quant_method"] == "compressed-tensors");
  REQUIRE(config["quantization_config"]["format"] == enum_name(summary.scheme.format));
  REQUIRE(config["torch_dtype"] == model::hf_dtype_name(dtype));
  return read;
}

// Rewrites the checkpoint's model.safetensors through `edit`.
void edit_checkpoint(const std::filesystem::path& dir,
                     const std::function<void(io::NamedTensors&)>& edit) {
  io::NamedTensors tensors;
  {
    const io::CheckpointReader reader(dir);
    for (const auto& name : reader.names()) tensors.emplace_back(name, reader.tensor(name).clone());
  }
  edit(tensors);
  io::save_safetensors(dir / "model.safetensors", tensors);
}

}  // namespace

TEST_CASE("compressed-tensors: int schemes round trip exactly (pack-quantized)") {
  auto model = tiny_model();
  struct Case {
    int bits;
    int64_t group;
    bool symmetric;
  };
  for (const Case c : {Case{4, 32, true}, Case{4, 16, false}, Case{8, -1, true}, Case{8, 32, false},
                       Case{3, 32, false}, Case{2, 64, true}}) {
    CAPTURE(c.bits, c.group, c.symmetric);
    test::TempDir tmp("ct_int");
    const quant::QuantState state = quantize(*model, uniform(c.bits, c.group, c.symmetric));
    const auto read = round_trip(*model, state, tmp);
    REQUIRE(read.scheme.format == CtFormat::kPackQuantized);
    const io::CheckpointReader ckpt(tmp / "ct");
    const std::string q = "model.layers.1.mlp.down_proj";
    REQUIRE(ckpt.tensor(q + ".weight_packed").scalar_type() == at::kInt);
    REQUIRE(ckpt.tensor(q + ".weight_packed").size(1) == (128 * c.bits + 31) / 32);
    REQUIRE(ckpt.contains(q + ".weight_zero_point") == !c.symmetric);
    REQUIRE(!ckpt.contains(q + ".weight"));
    REQUIRE(ckpt.contains("lm_head.weight"));
  }
}

TEST_CASE("compressed-tensors: the packed words are compressed-tensors' dense layout") {
  // Codes 0..7 then 8..15 in 4 bits: two words 0x76543210 and 0xfedcba98 (low nibble first).
  quant::QuantizedWeight w;
  w.bits = 4;
  w.group_size = 16;
  w.codes = at::arange(16, at::kByte).reshape({1, 16});
  w.scales = at::full({1, 1}, 0.5f);
  w.zeros = at::full({1, 1}, 8.0f);
  w.g_idx = at::zeros({16}, at::kInt);
  const quant::CtScheme s4{CtFormat::kPackQuantized, 4, 16, true, std::nullopt};
  auto parts = quant::ct_layer_tensors(w, s4, at::kFloat, "l");
  REQUIRE(parts.at("weight_packed").data_ptr<int32_t>()[0] == 0x76543210);
  REQUIRE(static_cast<uint32_t>(parts.at("weight_packed").data_ptr<int32_t>()[1]) == 0xfedcba98u);
  // 3 bits: 32 values of 7 fill three words with ones; value 11 crosses the first word boundary
  // (bits 30..32).
  w.bits = 3;
  w.group_size = 32;
  w.codes = at::full({1, 32}, 7, at::kByte);
  w.zeros = at::full({1, 1}, 3.0f);
  w.g_idx = at::zeros({32}, at::kInt);
  const quant::CtScheme s3{CtFormat::kPackQuantized, 3, 32, false, std::nullopt};
  parts = quant::ct_layer_tensors(w, s3, at::kFloat, "l");
  REQUIRE(at::equal(parts.at("weight_packed"), at::full({1, 3}, -1, at::kInt)));
  w.codes = at::zeros({1, 32}, at::kByte);
  w.codes[0][10] = 5;  // 0b101 at bits 30, 31 | 32
  parts = quant::ct_layer_tensors(w, s3, at::kFloat, "l");
  const int32_t* p = parts.at("weight_packed").data_ptr<int32_t>();
  REQUIRE(static_cast<uint32_t>(p[0]) == 0x40000000u);
  REQUIRE(p[1] == 1);
  // The zero point 3 of the one row sits in the low bits of its column's word.
  REQUIRE(parts.at("weight_zero_point").item<int32_t>() == 3);
}

TEST_CASE("compressed-tensors: nvfp4, mxfp4 and fp8 round trip exactly") {
  auto model = tiny_model();
  for (const FpGrid grid : {FpGrid::kNvfp4, FpGrid::kMxfp4, FpGrid::kFp8}) {
    CAPTURE(enum_name(grid));
    test::TempDir tmp("ct_fp");
    const quant::QuantState state = quantize(*model, fp(grid));
    const auto read = round_trip(*model, state, tmp);
    const io::CheckpointReader ckpt(tmp / "ct");
    const std::string q = "model.layers.0.self_attn.q_proj";
    switch (grid) {
      case FpGrid::kNvfp4:
        REQUIRE(read.scheme.format == CtFormat::kNvfp4PackQuantized);
        REQUIRE(ckpt.tensor(q + ".weight_packed").sizes() == at::IntArrayRef{64, 32});
        REQUIRE(ckpt.tensor(q + ".weight_scale").scalar_type() == at::kFloat8_e4m3fn);
        // rqat's global scale as stored: compressed-tensors divides the block scales by it.
        REQUIRE(ckpt.tensor(q + ".weight_global_scale").item<float>() ==
                state.layers.at(q).super_scales.item<float>());
        break;
      case FpGrid::kMxfp4:
        REQUIRE(read.scheme.format == CtFormat::kMxfp4PackQuantized);
        REQUIRE(ckpt.tensor(q + ".weight_scale").scalar_type() == at::kByte);
        REQUIRE(ckpt.tensor(q + ".weight_scale").sizes() == at::IntArrayRef{64, 2});
        break;
      default:
        REQUIRE(read.scheme.format == CtFormat::kFloatQuantized);
        REQUIRE(ckpt.tensor(q + ".weight").scalar_type() == at::kFloat8_e4m3fn);
        REQUIRE(ckpt.tensor(q + ".weight_scale").sizes() == at::IntArrayRef{64, 1});
    }
  }
}

TEST_CASE("compressed-tensors: bf16 checkpoints keep int scales only when they are bf16 values") {
  auto model = tiny_model(at::kBFloat16);
  quant::QuantState state = quantize(*model, uniform(4, 32, true));
  test::TempDir tmp("ct_bf16");
  test::require_error(
      [&] { quant::export_compressed_tensors(*model, state, tmp.path(), tmp / "ct"); },
      {"model.layers.0.mlp.down_proj", "not all BFloat16 values", "float32"});
  REQUIRE(!std::filesystem::exists(tmp / "ct"));
  // The same in a float32 export.
  quant::CompressedTensorsExportOptions f32;
  f32.dtype = at::kFloat;
  round_trip(*model, state, tmp, f32);
  // Scales rounded to bf16 values are kept exactly in a bf16 export.
  for (auto& [name, w] : state.layers) w.scales = w.scales.to(at::kBFloat16).to(at::kFloat);
  test::TempDir tmp2("ct_bf16_rounded");
  round_trip(*model, state, tmp2);
  const io::CheckpointReader ckpt(tmp2 / "ct");
  REQUIRE(ckpt.tensor("model.layers.0.mlp.up_proj.weight_scale").scalar_type() == at::kBFloat16);
  REQUIRE(ckpt.tensor("model.norm.weight").scalar_type() == at::kBFloat16);
}

TEST_CASE("compressed-tensors: what no scheme holds exactly is refused, naming the layer") {
  test::TempDir tmp("ct_refusals");
  const std::filesystem::path out = tmp / "ct";
  auto model = tiny_model();
  const auto refuse = [&](const quant::QuantState& state,
                          std::initializer_list<std::string> needles) {
    test::require_error([&] { quant::export_compressed_tensors(*model, state, tmp.path(), out); },
                        needles);
    REQUIRE(!std::filesystem::exists(out));
  };
  // The tiny qwen3 of test_util: o_proj has 72 inputs, not whole nvfp4 blocks of 16.
  auto odd = test::random_tiny_model(model::Family::kQwen3, false);
  const quant::QuantState nvfp4 = quantize(*odd, fp(FpGrid::kNvfp4));
  test::require_error([&] { quant::export_compressed_tensors(*odd, nvfp4, tmp.path(), out); },
                      {"model.layers.0.self_attn.o_proj", "72 inputs are not whole groups of 16"});
  const quant::QuantState g48 = quantize(*model, uniform(4, 48, false));
  refuse(g48, {"model.layers.0.mlp.down_proj", "128 inputs are not whole groups of 48"});

  quant::QuantState state = quantize(*model, uniform(4, 32, true));
  const std::string q = "model.layers.1.self_attn.k_proj";
  {
    auto act_order = state;
    auto& w = act_order.layers.at(q);
    w.g_idx = w.g_idx.flip(0).contiguous();
    refuse(act_order, {q, "act-order g_idx"});
  }
  {
    auto zero = state;
    auto& w = zero.layers.at(q);
    w.zeros = w.zeros.clone();  // the copy shares the tensors
    w.zeros[3][1] = 7.0f;
    refuse(zero, {q, "symmetric, but a zero point is not 8"});
  }
  {
    auto mixed = state;
    mixed.layers.at(q) =
        quant::fp_grid_quantize(weights_of(*model).at(q + ".weight"), FpGrid::kFp8, q);
    refuse(mixed, {q, "its scheme is FP8", "one scheme for every layer"});
  }
  {
    auto foreign = state;
    foreign.layers.emplace("model.layers.9.mlp.up_proj", state.layers.at(q));
    refuse(foreign, {"model.layers.9.mlp.up_proj", "not a linear layer of the model"});
  }
  {
    auto shape = state;
    shape.layers.at(q) = state.layers.at("model.layers.1.mlp.up_proj");
    refuse(shape, {q, "the quant state's codes are 128x64, the model's weight 32x64"});
  }
  {
    auto gguf = state;
    gguf.layers.at(q).gguf_grid = io::GgufType::kQ4_0;
    refuse(gguf, {q, "GGUF grid"});
  }
  // Exported directories are new ones.
  std::filesystem::create_directories(out);
  test::write_bytes(out / "keep.txt", "x");
  test::require_error([&] { quant::export_compressed_tensors(*model, state, tmp.path(), out); },
                      {out.string(), "not an empty directory"});
}

TEST_CASE("compressed-tensors: a malformed checkpoint names the file and the tensor or field") {
  test::TempDir tmp("ct_malformed");
  auto model = tiny_model();
  const quant::QuantState state = quantize(*model, uniform(4, 32, false));
  const std::filesystem::path ct = tmp / "ct";
  quant::export_compressed_tensors(*model, state, tmp.path(), ct);
  const std::string file = (ct / "model.safetensors").string();
  const std::string layer = "model.layers.0.mlp.gate_proj";
  const auto without = [&](const std::string& name) {
    return [name](io::NamedTensors& t) {
      t.erase(std::remove_if(t.begin(), t.end(), [&](const auto& e) { return e.first == name; }),
              t.end());
    };
  };
  const auto replaced = [&](const std::string& name, at::Tensor value) {
    return [name, value](io::NamedTensors& t) {
      for (auto& e : t)
        if (e.first == name) e.second = value;
    };
  };
  const auto expect = [&](const std::function<void(io::NamedTensors&)>& edit,
                          std::initializer_list<std::string> needles) {
    test::TempDir copy("ct_malformed_copy");
    std::filesystem::copy(ct, copy / "ct");
    edit_checkpoint(copy / "ct", edit);
    test::require_error([&] { quant::read_compressed_tensors(copy / "ct"); }, needles);
  };
  expect(without(layer + ".weight_scale"),
         {"model.safetensors", layer + ".weight_scale", "missing"});
  expect(without(layer + ".weight_zero_point"),
         {"model.safetensors", layer + ".weight_zero_point"});
  expect(without(layer + ".weight_packed"),
         {"model.safetensors", layer + ".weight_scale", "no packed layer"});
  expect(replaced(layer + ".weight_packed", at::zeros({128, 7}, at::kInt)),
         {"model.safetensors", layer + ".weight_packed", "expected Int (128, 8)"});
  expect(replaced(layer + ".weight_scale", at::ones({128, 3})),
         {"model.safetensors", layer + ".weight_scale", "expected (128, 2)"});
  expect(replaced(layer + ".weight_scale", -at::ones({128, 2})),
         {"model.safetensors", layer, "scales"});
  expect(replaced(layer + ".weight_shape", at::tensor(std::vector<int64_t>{128, 80})),
         {"model.safetensors", layer + ".weight_packed", "expected Int (128, 10)"});

  const auto config_error = [&](const std::function<void(io::Json&)>& edit,
                                std::initializer_list<std::string> needles) {
    test::TempDir copy("ct_malformed_config");
    std::filesystem::copy(ct, copy / "ct");
    io::Json config = io::read_json_file(copy / "ct" / "config.json");
    edit(config["quantization_config"]);
    io::write_json_file(copy / "ct" / "config.json", config);
    test::require_error([&] { quant::read_compressed_tensors(copy / "ct"); }, needles);
  };
  config_error([](io::Json& qc) { qc["format"] = "marlin-24"; },
               {"config.json", "quantization_config.format", "marlin-24"});
  config_error([](io::Json& qc) { qc["config_groups"]["group_0"]["weights"]["num_bits"] = "4"; },
               {"config.json", "config_groups.group_0.weights.num_bits"});
  config_error(
      [](io::Json& qc) { qc["config_groups"]["group_0"]["weights"]["strategy"] = "block"; },
      {"config.json", "weights", "\"block\""});
  config_error([](io::Json& qc) { qc["quantization_status"] = "frozen"; },
               {"config.json", "quantization_status", "frozen"});
  config_error([](io::Json& qc) { qc["quant_method"] = "gptq"; },
               {"config.json", "quant_method", "gptq"});
}

TEST_CASE("compressed-tensors: import writes an rqat artifact with the quant state") {
  test::TempDir tmp("ct_import");
  auto model = tiny_model();
  quant::QuantSpec spec = fp(FpGrid::kNvfp4);
  spec.exclude = {R"(.*\.mlp\.down_proj)"};
  const quant::QuantState state = quantize(*model, spec);
  quant::export_compressed_tensors(*model, state, tmp.path(), tmp / "ct");
  const io::Json config = io::read_json_file(tmp / "ct" / "config.json");
  const auto& ignore = config["quantization_config"]["ignore"];
  REQUIRE(std::find(ignore.begin(), ignore.end(), "model.layers.1.mlp.down_proj") != ignore.end());
  quant::import_compressed_tensors(tmp / "ct", tmp / "imported");
  const quant::QuantState loaded = quant::load_quant_state(tmp / "imported");
  REQUIRE(loaded.layers.size() == state.layers.size());
  for (const auto& [name, w] : state.layers) require_same_layer(loaded.layers.at(name), w);
  // The include lists the quantized layers (the default would also pick the down_proj layers).
  REQUIRE(loaded.spec.quantizes("model.layers.0.self_attn.q_proj"));
  REQUIRE(!loaded.spec.quantizes("model.layers.0.mlp.down_proj"));
  const io::Json imported = io::read_json_file(tmp / "imported" / "config.json");
  REQUIRE(!imported.contains("quantization_config"));
  REQUIRE(imported["torch_dtype"] == "float32");
  const io::CheckpointReader dense(tmp / "imported");
  const std::string q = "model.layers.1.self_attn.v_proj";
  REQUIRE(at::equal(dense.tensor(q + ".weight"), state.layers.at(q).dequantize()));
}
