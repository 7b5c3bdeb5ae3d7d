// The layers GPU engines fuse (quant/fused_layers.h): the group names, one NVFP4 global scale per
// group from its largest weight magnitude (computed independently here), ptq and the trainers'
// RTN start sharing it, and the compressed-tensors export refusing parts that differ.
#include "catch.h"

#include <ATen/ATen.h>

#include <sstream>

#include "model/model_dir.h"
#include "quant/compressed_tensors/export.h"
#include "quant/fp_grid_weight.h"
#include "quant/fused_layers.h"
#include "quant/ptq.h"
#include "quant/rtn.h"
#include "test_util.h"
#include "train/qat_model.h"

using namespace rqat;

namespace {

quant::QuantSpec nvfp4_spec() {
  quant::QuantSpec spec;
  spec.use_grid("nvfp4", "test");
  spec.include = {R"(model\.layers\.\d+\.(mlp\.(gate|up|down)_proj|self_attn\.[qkv]_proj))"};
  return spec;
}

float amax_of(model::CausalLM& model, const std::string& layer) {
  for (const auto& slot : model.linear_layers(true))
    if (slot.name == layer) return (*slot.layer)->effective_weight().abs().max().item<float>();
  FAIL("no layer " << layer);
  return 0;
}

}  // namespace

TEST_CASE("fused layers: groups, one nvfp4 global scale per group, in ptq and the trainers") {
  CHECK(quant::fused_layer_group("model.layers.3.self_attn.k_proj") ==
        "model.layers.3.self_attn.qkv_proj");
  CHECK(quant::fused_layer_group("model.layers.3.self_attn.q_proj") ==
        "model.layers.3.self_attn.qkv_proj");
  CHECK(quant::fused_layer_group("model.layers.0.mlp.up_proj") ==
        "model.layers.0.mlp.gate_up_proj");
  CHECK(quant::fused_layer_group("model.layers.0.mlp.down_proj") == "model.layers.0.mlp.down_proj");
  CHECK(quant::fused_layer_group("model.layers.0.self_attn.o_proj") ==
        "model.layers.0.self_attn.o_proj");
  CHECK(quant::fused_layer_group("lm_head") == "lm_head");
  CHECK(quant::fused_layer_group("model.layers.0.mlp.xup_proj") == "model.layers.0.mlp.xup_proj");

  test::TempDir dir("fused_layers");
  const auto model_dir = test::write_byte_level_model(dir);
  auto model = model::load_causal_lm(model_dir);
  const quant::QuantSpec spec = nvfp4_spec();
  const auto globals = quant::shared_nvfp4_global_scales(*model, spec);
  REQUIRE(globals.size() == 12);  // q, k, v, gate, up, down of 2 blocks
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    const float qkv =
        std::max({amax_of(*model, p + "self_attn.q_proj"), amax_of(*model, p + "self_attn.k_proj"),
                  amax_of(*model, p + "self_attn.v_proj")});
    const float gate_up =
        std::max(amax_of(*model, p + "mlp.gate_proj"), amax_of(*model, p + "mlp.up_proj"));
    for (const char* part : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"})
      CHECK(globals.at(p + part) == quant::nvfp4_global_scale(qkv));
    for (const char* part : {"mlp.gate_proj", "mlp.up_proj"})
      CHECK(globals.at(p + part) == quant::nvfp4_global_scale(gate_up));
    CHECK(globals.at(p + "mlp.down_proj") ==
          quant::nvfp4_global_scale(amax_of(*model, p + "mlp.down_proj")));
  }
  CHECK(globals.at("model.layers.0.self_attn.q_proj") !=
        quant::nvfp4_global_scale(amax_of(*model, "model.layers.0.self_attn.k_proj")));
  quant::QuantSpec mx;
  mx.use_grid("mxfp4", "test");
  CHECK(quant::shared_nvfp4_global_scales(*model, mx).empty());

  // ptq: the layers carry their group's scale.
  {
    auto quantized = model::load_causal_lm(model_dir);
    quant::PtqOptions options;
    options.method = quant::PtqMethod::kRtn;
    options.spec = spec;
    options.verbose = false;
    std::ostringstream log;
    const auto result = quant::quantize_model(*quantized, {}, options, log);
    for (const auto& [name, q] : result.layers) {
      INFO(name);
      CHECK(q.super_scales.item<float>() == globals.at(name));
    }
  }
  // The trainers' RTN start too.
  {
    auto student = model::load_causal_lm(model_dir);
    train::attach_fake_quant_rtn(*student, spec, {});
    const auto state = train::materialize_fake_quant(*student, spec);
    for (const auto& [name, q] : state.layers) {
      INFO(name);
      CHECK(q.super_scales.item<float>() == globals.at(name));
    }
  }

  // Parts of one group quantized on their own scales are refused by the export, naming both.
  quant::QuantState own{spec, {}};
  for (const auto& slot : model->linear_layers(true))
    if (spec.quantizes(slot.name))
      own.layers.emplace(slot.name, quant::rtn_quantize((*slot.layer)->effective_weight(), spec));
  test::require_error(
      [&] { quant::export_compressed_tensors(*model, own, model_dir, dir / "refused"); },
      {"model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj", "gate_up_proj"});
  CHECK_FALSE(std::filesystem::exists(dir / "refused"));
}
