#include "train/qat_model.h"

#include <algorithm>
#include <map>

#include "io/error.h"
#include "model/linear.h"
#include "quant/activation_quant.h"
#include "quant/fused_layers.h"
#include "quant/gptq_checkpoint.h"
#include "quant/rtn.h"

namespace rqat::train {
namespace fs = std::filesystem;

namespace {

// The options of one layer: its name, and the spec's activation grid.
quant::FakeQuantOptions named(quant::FakeQuantOptions options, const std::string& name,
                              const quant::QuantSpec& spec) {
  options.name = name;
  options.activations = spec.activations;
  return options;
}

}  // namespace

std::vector<std::string> attach_fake_quant(model::CausalLM& model, const quant::QuantState& state,
                                           const quant::FakeQuantOptions& options,
                                           const std::string& where) {
  std::map<std::string, model::LinearSlot> slots;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true))
    slots.emplace(slot.name, slot);
  for (const auto& [name, weight] : state.layers)
    if (!slots.count(name)) fail("{}: layer {} is not a linear layer of the model", where, name);
  std::vector<std::string> replaced;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true)) {
    const auto it = state.layers.find(slot.name);
    if (it == state.layers.end()) continue;
    const auto& layer = **slot.layer;
    if (it->second.out_features() != layer.out_features() ||
        it->second.in_features() != layer.in_features())
      fail("{}: layer {} is {}x{} in the quantized state but {}x{} in the model", where, slot.name,
           it->second.out_features(), it->second.in_features(), layer.out_features(),
           layer.in_features());
    auto fq = quant::FakeQuantLinear::from_quantized(it->second, layer.bias(),
                                                     named(options, slot.name, state.spec));
    model.replace_linear(slot, fq);
    replaced.push_back(slot.name);
  }
  return replaced;
}

std::vector<std::string> attach_fake_quant_rtn(model::CausalLM& model, const quant::QuantSpec& spec,
                                               const quant::FakeQuantOptions& options) {
  spec.validate("--");
  // nvfp4: one global scale per group of layers GPU engines fuse (quant/fused_layers.h).
  const std::map<std::string, float> nvfp4_globals = quant::shared_nvfp4_global_scales(model, spec);
  std::vector<std::string> replaced;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true)) {
    if (!spec.quantizes(slot.name)) continue;
    const auto& layer = **slot.layer;
    // Scales rounded to float16 as ptq does: GPTQ checkpoints store float16 scales, so frozen
    // scales export exactly. The master weight stays the full-precision one.
    const at::Tensor weight = layer.effective_weight().detach();
    quant::QuantizedWeight q =
        quant::rtn_quantize(weight, spec, {}, quant::shared_global_scale(nvfp4_globals, slot.name));
    if (!q.on_format_grid())
      q.scales = q.scales.to(at::kHalf).to(at::kFloat);  // a grid's are stored
    auto fq = std::make_shared<quant::FakeQuantLinear>(weight, q, layer.bias(),
                                                       named(options, slot.name, spec));
    model.replace_linear(slot, fq);
    replaced.push_back(slot.name);
  }
  if (replaced.empty()) fail("--include selects no linear layer of the model");
  return replaced;
}

int64_t count_fake_quant_layers(model::CausalLM& model) {
  int64_t n = 0;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true))
    if (std::dynamic_pointer_cast<quant::FakeQuantLinear>(*slot.layer)) ++n;
  return n;
}

quant::QuantState materialize_fake_quant(model::CausalLM& model, const quant::QuantSpec& spec) {
  quant::QuantState state;
  state.spec = spec;
  torch::NoGradGuard no_grad;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true)) {
    auto fq = std::dynamic_pointer_cast<quant::FakeQuantLinear>(*slot.layer);
    if (!fq) continue;
    quant::QuantizedWeight q = fq->to_quantized();
    const at::Tensor weight = q.dequantize();
    const auto bias = fq->bias();
    auto dense = std::make_shared<model::DenseLinear>(fq->in_features(), fq->out_features(),
                                                      bias.has_value(), fq->weight().options());
    dense->assign_weight(weight);
    if (bias) dense->assign_bias(bias->detach());
    model.replace_linear(slot, dense);
    state.layers.emplace(slot.name, std::move(q));
  }
  return state;
}

QuantPlan plan_quantization(const fs::path& model_dir, const quant::QuantSpec& spec,
                            QuantInit init) {
  using quant::QuantSpec;
  QuantPlan plan;
  const bool has_state = fs::exists(model_dir / quant::kQuantStateFile);
  if (spec.bits == QuantSpec::kFullPrecisionBits) {
    if (init == QuantInit::kQuantState)
      fail("--init state contradicts --bits 16 (full-precision training)");
    return plan;
  }
  plan.quantize = true;
  plan.from_state = init == QuantInit::kQuantState || (init == QuantInit::kAuto && has_state);
  if (plan.from_state) {
    if (!has_state)
      fail("--init state: {} has no {} (make one with ptq, or use --init rtn)", model_dir.string(),
           quant::kQuantStateFile);
    // The spec comes with the state; activations may be added (a W4A16 start trained as W4A4).
    plan.spec.activations = spec.activations;
    return plan;
  }
  const bool bits_given = spec.bits != QuantSpec::kBitsOfInput;
  if (!bits_given && !spec.grid_name())
    fail("--bits is required: {} has no {} to start from (2, 3, 4, 8, or 16 for full precision)",
         model_dir.string(), quant::kQuantStateFile);
  plan.spec = spec;
  if (!bits_given) plan.spec.use_grid(*spec.grid_name(), "--grid");  // the grid's own bits
  plan.spec.validate("--");
  return plan;
}

namespace {

// A per-tensor scale is stored once per row; learning it per row would no longer be per tensor.
void check_per_tensor_mode(const quant::QuantSpec& spec, const quant::FakeQuantOptions& options) {
  if (spec.per_tensor && options.mode != quant::ScaleMode::kFrozen)
    fail(
        "--scale-mode {} learns one scale per row and group; a per-tensor spec (--per-tensor) "
        "trains with --scale-mode frozen only",
        enum_name(options.mode));
}

// Refusals of a v1 export that can be made before any work (see attach_quant_plan).
void check_v1_export(const quant::QuantSpec& spec, const quant::FakeQuantOptions& options) {
  if (spec.symmetric) return;
  if (options.mode != quant::ScaleMode::kFrozen)
    fail(
        "--export gptq with --scale-mode {}: learned asymmetric zero points may reach 0, which "
        "the v1 format (zero - 1 stored) cannot hold; export gptq_v2, or use --sym",
        enum_name(options.mode));
}

}  // namespace

quant::QuantSpec attach_quant_plan(model::CausalLM& model, const QuantPlan& plan,
                                   const fs::path& model_dir, int bits,
                                   const quant::FakeQuantOptions& options,
                                   std::optional<quant::GptqFormat> gptq_export,
                                   std::vector<std::string>& layers) {
  if (!plan.quantize) return plan.spec;
  const bool v1 = gptq_export == quant::GptqFormat::kV1;
  if (plan.from_state) {
    quant::QuantState state = quant::load_quant_state(model_dir);
    if (plan.spec.activations) state.spec.activations = plan.spec.activations;
    const std::string state_file = (model_dir / quant::kQuantStateFile).string();
    if (bits != quant::QuantSpec::kBitsOfInput && bits != state.spec.bits)
      fail("--bits {} differs from the {} bits of {}; use --init rtn to requantize", bits,
           state.spec.bits, state_file);
    // The state's own zero points decide a v1 export, whatever its spec says.
    if (gptq_export) quant::check_gptq_packable(model, state.spec);
    if (v1) {
      check_v1_export(state.spec, options);
      quant::check_v1_zero_points(state.layers, state_file);
    }
    check_per_tensor_mode(state.spec, options);
    layers = attach_fake_quant(model, state, options, state_file);
    return state.spec;
  }
  quant::QuantSpec spec = plan.spec;
  if (v1) {
    check_v1_export(spec, options);
    spec.v1_zeros = spec.v1_zeros || !spec.symmetric;
  }
  if (gptq_export) quant::check_gptq_exportable(model, spec, *gptq_export);
  check_per_tensor_mode(spec, options);
  layers = attach_fake_quant_rtn(model, spec, options);
  return spec;
}

std::vector<std::string> calibrate_student_inputs(model::CausalLM& model,
                                                  const data::SequenceSet& set, int64_t count,
                                                  int64_t micro_batch, int64_t pad_id,
                                                  c10::Device device) {
  const int64_t n = std::min<int64_t>(count, static_cast<int64_t>(set.sequences.size()));
  const int64_t step = std::max<int64_t>(1, micro_batch);
  const auto scales = quant::calibrate_input_global_scales(model, [&] {
    for (int64_t begin = 0; begin < n; begin += step) {
      std::vector<int64_t> indices;
      for (int64_t i = begin; i < std::min(n, begin + step); ++i) indices.push_back(i);
      const data::TokenBatch batch = data::collate(set, indices, pad_id);
      const at::Tensor mask =
          batch.attention_mask.defined() ? batch.attention_mask.to(device) : at::Tensor();
      model.forward(batch.input_ids.to(device), mask);
    }
  });
  std::vector<std::string> names;
  for (const auto& [name, scale] : scales) names.push_back(name);
  return names;
}

}  // namespace rqat::train
