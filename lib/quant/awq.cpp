#include "quant/awq.h"

#include <ATen/ATen.h>

#include <limits>

#include "io/error.h"
#include "quant/rtn.h"

namespace rqat::quant {

at::Tensor awq_scales(const at::Tensor& mean_abs, double alpha) {
  auto s = mean_abs.to(at::kFloat).clamp_min(1e-4).pow(alpha);
  return s / (s.max() * s.min()).sqrt();
}

namespace {

model::DenseLinear& dense(const std::shared_ptr<model::Linear>& layer, const std::string& name) {
  auto* d = dynamic_cast<model::DenseLinear*>(layer.get());
  if (d == nullptr) fail("awq: layer {} is not a plain linear layer (already quantized?)", name);
  return *d;
}

struct ScaleGroup {
  std::string previous;
  std::vector<std::pair<std::string, std::shared_ptr<model::Linear>>> layers;
  // Applies 1/s to what produces the group's input.
  std::function<void(const at::Tensor& inverse_scale)> fold_previous;
};

double search_loss(const ScaleGroup& group, const AwqBlockInputs& inputs, const at::Tensor& s,
                   const QuantSpec& spec) {
  double loss = 0;
  for (const auto& [name, layer] : group.layers) {
    const auto x = inputs.rows.at(name).to(at::kFloat);
    const auto w = layer->effective_weight().to(at::kFloat);
    const auto q = rtn_quantize(w * s, spec).dequantize() / s;
    loss += (at::matmul(x, (w - q).t())).pow(2).sum().item<double>();
  }
  return loss;
}

}  // namespace

std::vector<AwqGroupReport> awq_scale_block(model::DecoderLayer& layer,
                                            const std::string& layer_prefix,
                                            const AwqBlockInputs& inputs, const QuantSpec& spec,
                                            const AwqOptions& options) {
  if (options.grid < 1) fail("awq: the alpha grid must have >= 1 point, got {}", options.grid);
  at::NoGradGuard no_grad;
  auto& attn = *layer.self_attn;
  auto& mlp = *layer.mlp;
  auto fold_norm = [](model::RMSNorm& norm) {
    return [&norm](const at::Tensor& inv) { norm.weight.mul_(inv.to(norm.weight.dtype())); };
  };
  auto fold_rows = [](std::shared_ptr<model::Linear> linear, std::string name) {
    return [linear, name](const at::Tensor& inv) {
      auto& d = dense(linear, name);
      const auto w = d.effective_weight().to(at::kFloat) * inv.unsqueeze(1);
      d.assign_weight(w);
      if (auto b = d.bias()) d.assign_bias(b->to(at::kFloat) * inv);
    };
  };
  std::vector<ScaleGroup> groups;
  groups.push_back({"input_layernorm",
                    {{"self_attn.q_proj", attn.q_proj},
                     {"self_attn.k_proj", attn.k_proj},
                     {"self_attn.v_proj", attn.v_proj}},
                    fold_norm(*layer.input_layernorm)});
  if (options.scale_v_to_o && attn.v_proj->out_features() == attn.o_proj->in_features())
    groups.push_back({"self_attn.v_proj",
                      {{"self_attn.o_proj", attn.o_proj}},
                      fold_rows(attn.v_proj, layer_prefix + "self_attn.v_proj")});
  groups.push_back({"post_attention_layernorm",
                    {{"mlp.gate_proj", mlp.gate_proj}, {"mlp.up_proj", mlp.up_proj}},
                    fold_norm(*layer.post_attention_layernorm)});
  groups.push_back({"mlp.up_proj",
                    {{"mlp.down_proj", mlp.down_proj}},
                    fold_rows(mlp.up_proj, layer_prefix + "mlp.up_proj")});

  QuantSpec search_spec = spec;
  search_spec.clip_search = false;  // the range search comes after scaling, as in the reference
  std::vector<AwqGroupReport> reports;
  for (auto& group : groups) {
    bool all_quantized = true;
    for (const auto& [name, linear] : group.layers) {
      all_quantized = all_quantized && spec.quantizes(layer_prefix + name);
      dense(linear, layer_prefix + name);
      if (!inputs.rows.count(name) || !inputs.channel_mean_abs.count(name))
        fail("awq: no calibration inputs captured for {}{}", layer_prefix, name);
    }
    if (!all_quantized) continue;  // scaling only pays off when every consumer is quantized
    // The layers of a group share their input, so their statistics are the same: use the first.
    const auto& mean_abs = inputs.channel_mean_abs.at(group.layers.front().first);
    AwqGroupReport report;
    report.previous = group.previous;
    for (const auto& [name, linear] : group.layers) report.layers.push_back(name);
    double best = std::numeric_limits<double>::infinity();
    at::Tensor best_scale;
    for (int i = 0; i < options.grid; ++i) {
      const double alpha = static_cast<double>(i) / options.grid;
      const auto s = awq_scales(mean_abs, alpha);
      const double loss = search_loss(group, inputs, s, search_spec);
      if (i == 0) report.loss_identity = loss;  // alpha 0 gives s = 1 exactly: plain RTN
      if (loss < best) {
        best = loss;
        best_scale = s;
        report.alpha = alpha;
      }
    }
    report.loss_best = best;
    // Fold: W' = W diag(s) for the consumers, 1/s into the producer.
    for (const auto& [name, linear] : group.layers) {
      auto& d = dense(linear, layer_prefix + name);
      d.assign_weight(d.effective_weight().to(at::kFloat) * best_scale.unsqueeze(0));
    }
    group.fold_previous(1.0 / best_scale);
    reports.push_back(std::move(report));
  }
  return reports;
}

}  // namespace rqat::quant
