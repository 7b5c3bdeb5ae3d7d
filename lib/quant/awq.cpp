// See awq.h. The search runs on the block as it is (float32 weights), changing each group's layers
// in place for a candidate and putting them back; only the chosen scales are folded.
#include "quant/awq.h"

#include <ATen/ATen.h>

#include <functional>
#include <limits>

#include "io/error.h"
#include "quant/rtn.h"

namespace rqat::quant {

at::Tensor awq_scales(const at::Tensor& mean_abs, double alpha, const at::Tensor& weight_mean) {
  const auto x = mean_abs.to(at::kFloat);
  at::Tensor s =
      weight_mean.defined()
          ? (x.pow(alpha) / (weight_mean.to(at::kFloat).pow(1 - alpha) + 1e-4)).clamp_min(1e-4)
          : x.clamp_min(1e-4).pow(alpha);
  s = s / (s.max() * s.min()).sqrt();
  // As the reference: a scale that overflowed counts as no scaling.
  return at::where(at::isfinite(s), s, at::ones_like(s));
}

at::Tensor awq_weight_mean(const std::vector<at::Tensor>& weights, const QuantSpec& spec) {
  std::vector<at::Tensor> relative;
  for (const auto& w : weights) {
    const auto a = w.to(at::kFloat).abs();
    const int64_t cols = a.size(1), group = spec.effective_group_size(cols);
    std::vector<at::Tensor> parts;
    for (int64_t begin = 0; begin < cols; begin += group) {
      const auto g = a.narrow(1, begin, std::min(group, cols - begin));
      parts.push_back(g / (g.amax(1, /*keepdim=*/true) + 1e-6));
    }
    relative.push_back(at::cat(parts, 1));
  }
  return at::cat(relative, 0).mean(0);
}

namespace {

// Q(W s) / s: the weight a scaled, rounded layer computes with once 1/s is folded out again.
at::Tensor scaled_rtn(const at::Tensor& w, const at::Tensor& s, const QuantSpec& spec) {
  return rtn_quantize(w * s, spec).dequantize() / s;
}

// A per (row, group) bound spread over the group's columns: (rows, cols).
at::Tensor per_column(const at::Tensor& per_group, int64_t group, int64_t cols) {
  return per_group.repeat_interleave(group, 1).narrow(1, 0, cols);
}

}  // namespace

AwqClip awq_clip_search(const at::Tensor& weight, const at::Tensor& inputs, const QuantSpec& spec,
                        const AwqOptions& options) {
  at::NoGradGuard no_grad;
  const auto w = weight.to(at::kFloat);
  const int64_t rows = w.size(0), cols = w.size(1);
  const int64_t group = spec.effective_group_size(cols), groups = spec.num_groups(cols);
  const int64_t stride = std::max<int64_t>(1, inputs.size(0) / options.clip_tokens);
  const auto x = inputs.to(at::kFloat).slice(0, 0, inputs.size(0), stride);
  QuantSpec plain = spec;
  plain.clip_search = false;
  // Per group: the columns, the original partial outputs and the range max|w| of each row.
  std::vector<at::Tensor> x_groups, out_groups, max_groups;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * group, width = std::min(group, cols - begin);
    x_groups.push_back(x.narrow(1, begin, width));
    out_groups.push_back(at::matmul(x_groups.back(), w.narrow(1, begin, width).t()));
    max_groups.push_back(w.narrow(1, begin, width).abs().amax(1));
  }
  const auto original_max = at::stack(max_groups, 1);  // (rows, groups)
  AwqClip best{original_max.clone(), at::ones({rows, groups})};
  auto best_err = at::full({rows, groups}, std::numeric_limits<float>::infinity());
  const int steps = static_cast<int>(options.clip_max_shrink * options.clip_grid);
  for (int i = 0; i < steps; ++i) {
    const float ratio = 1.0f - static_cast<float>(i) / static_cast<float>(options.clip_grid);
    const auto max_abs = original_max * ratio;
    const auto bound = per_column(max_abs, group, cols);
    const auto q = rtn_quantize(at::clamp(w, -bound, bound), plain).dequantize();
    std::vector<at::Tensor> errs;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * group, width = std::min(group, cols - begin);
      const auto out = at::matmul(x_groups[g], q.narrow(1, begin, width).t());
      errs.push_back((out - out_groups[g]).pow(2).mean(0));
    }
    const auto err = at::stack(errs, 1);
    const auto better = err < best_err;
    best_err = at::where(better, err, best_err);
    best.max_abs = at::where(better, max_abs, best.max_abs);
    best.ratio = at::where(better, at::full_like(best.ratio, ratio), best.ratio);
  }
  return best;
}

namespace {

model::DenseLinear& dense(const std::shared_ptr<model::Linear>& layer, const std::string& name) {
  auto* d = dynamic_cast<model::DenseLinear*>(layer.get());
  if (d == nullptr) fail("awq: layer {} is not a plain linear layer (already quantized?)", name);
  return *d;
}

using Layers = std::vector<std::pair<std::string, std::shared_ptr<model::Linear>>>;

struct ScaleGroup {
  std::string previous;
  Layers layers;
  // Applies 1/s to what produces the group's input.
  std::function<void(const at::Tensor& inverse_scale)> fold_previous;
  // The block loss: the output the group's search scores, for the layers as they are now
  // (undefined: the sum of the layers' own outputs).
  std::function<at::Tensor()> module_output;
};

// The layers' weights set to Q(W s) / s for the duration of a computation, then put back.
class ScaledQuantizedWeights {
 public:
  ScaledQuantizedWeights(const Layers& layers, const at::Tensor& s, const QuantSpec& spec)
      : layers_(layers) {
    for (const auto& [name, layer] : layers_) {
      auto& d = dense(layer, name);
      originals_.push_back(d.effective_weight().clone());
      d.assign_weight(scaled_rtn(d.effective_weight().to(at::kFloat), s, spec));
    }
  }
  ScaledQuantizedWeights(const ScaledQuantizedWeights&) = delete;
  ScaledQuantizedWeights& operator=(const ScaledQuantizedWeights&) = delete;
  ~ScaledQuantizedWeights() {
    for (std::size_t i = 0; i < layers_.size(); ++i)
      dense(layers_[i].second, layers_[i].first).assign_weight(originals_[i]);
  }

 private:
  const Layers& layers_;
  std::vector<at::Tensor> originals_;
};

double layer_loss(const ScaleGroup& group, const AwqBlockInputs& inputs, const at::Tensor& s,
                  const QuantSpec& spec) {
  double loss = 0;
  for (const auto& [name, layer] : group.layers) {
    const auto x = inputs.rows.at(name).to(at::kFloat);
    const auto w = layer->effective_weight().to(at::kFloat);
    loss += (at::matmul(x, (w - scaled_rtn(w, s, spec)).t())).pow(2).sum().item<double>();
  }
  return loss;
}

double search_loss(const ScaleGroup& group, const AwqBlockInputs& inputs, const at::Tensor& s,
                   const at::Tensor& reference, const QuantSpec& spec) {
  if (!group.module_output) return layer_loss(group, inputs, s, spec);
  ScaledQuantizedWeights quantized(group.layers, s, spec);
  return (group.module_output() - reference).pow(2).sum().item<double>();
}

std::vector<ScaleGroup> scale_groups(model::DecoderLayer& layer, const std::string& layer_prefix,
                                     const AwqBlockInputs& inputs, const AwqOptions& options) {
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
  const bool block_loss = options.loss == AwqLoss::kBlock;
  std::function<at::Tensor()> attention_output, mlp_output;
  if (block_loss && !inputs.attention_inputs.empty()) {
    attention_output = [&attn, &inputs] {
      std::vector<at::Tensor> outs;
      for (std::size_t b = 0; b < inputs.attention_inputs.size(); ++b)
        outs.push_back(attn.forward(inputs.attention_inputs[b], inputs.attention_contexts[b],
                                    inputs.layer_index)
                           .to(at::kFloat)
                           .flatten());
      return at::cat(outs);
    };
  }
  if (block_loss && inputs.rows.count("mlp.gate_proj"))
    mlp_output = [&mlp, &inputs] {
      const auto& x = inputs.rows.at("mlp.gate_proj");
      return mlp.forward(x.to(mlp.gate_proj->effective_weight().scalar_type())).to(at::kFloat);
    };
  std::vector<ScaleGroup> groups;
  groups.push_back({"input_layernorm",
                    {{"self_attn.q_proj", attn.q_proj},
                     {"self_attn.k_proj", attn.k_proj},
                     {"self_attn.v_proj", attn.v_proj}},
                    fold_norm(*layer.input_layernorm),
                    attention_output});
  if (options.scale_v_to_o && attn.v_proj->out_features() == attn.o_proj->in_features())
    groups.push_back({"self_attn.v_proj",
                      {{"self_attn.o_proj", attn.o_proj}},
                      fold_rows(attn.v_proj, layer_prefix + "self_attn.v_proj"),
                      {}});
  groups.push_back({"post_attention_layernorm",
                    {{"mlp.gate_proj", mlp.gate_proj}, {"mlp.up_proj", mlp.up_proj}},
                    fold_norm(*layer.post_attention_layernorm),
                    mlp_output});
  groups.push_back({"mlp.up_proj",
                    {{"mlp.down_proj", mlp.down_proj}},
                    fold_rows(mlp.up_proj, layer_prefix + "mlp.up_proj"),
                    {}});
  return groups;
}

// The alpha search of one group: the report with the chosen scales.
AwqGroupReport search_group(const ScaleGroup& group, const AwqBlockInputs& inputs,
                            const QuantSpec& search_spec, const AwqOptions& options) {
  // The layers of a group share their input, so their statistics are the same: use the first.
  const auto& mean_abs = inputs.channel_mean_abs.at(group.layers.front().first);
  at::Tensor weight_mean;
  if (options.scaling == AwqScaling::kDuo) {
    std::vector<at::Tensor> weights;
    for (const auto& [name, linear] : group.layers) weights.push_back(linear->effective_weight());
    weight_mean = awq_weight_mean(weights, search_spec);
  }
  const at::Tensor reference = group.module_output ? group.module_output() : at::Tensor();
  AwqGroupReport report;
  report.previous = group.previous;
  for (const auto& [name, linear] : group.layers) report.layers.push_back(name);
  // s = 1: plain RTN, what the chosen scales are measured against.
  report.loss_identity =
      search_loss(group, inputs, at::ones_like(mean_abs, at::kFloat), reference, search_spec);
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < options.grid; ++i) {
    const double alpha = static_cast<double>(i) / options.grid;
    const auto s = awq_scales(mean_abs, alpha, weight_mean);
    const double loss = search_loss(group, inputs, s, reference, search_spec);
    if (loss < best) {
      best = loss;
      report.scales = s;
      report.alpha = alpha;
    }
  }
  report.loss_best = best;
  return report;
}

// auto_clip on every quantized layer of the block but q_proj and k_proj, on its inputs as scaling
// left them (x / s for the consumers of a scaled group).
void clip_block(const std::string& layer_prefix, const AwqBlockInputs& inputs,
                const std::vector<ScaleGroup>& groups,
                const std::map<std::string, at::Tensor>& input_scale, const QuantSpec& spec,
                const AwqOptions& options) {
  for (const auto& group : groups) {
    for (const auto& [name, linear] : group.layers) {
      if (name == "self_attn.q_proj" || name == "self_attn.k_proj") continue;
      if (!spec.quantizes(layer_prefix + name)) continue;
      at::Tensor x = inputs.rows.at(name).to(at::kFloat);
      if (const auto s = input_scale.find(name); s != input_scale.end()) x = x / s->second;
      auto& d = dense(linear, layer_prefix + name);
      const auto w = d.effective_weight().to(at::kFloat);
      const AwqClip clip = awq_clip_search(w, x, spec, options);
      const int64_t cols = w.size(1);
      const auto bound = per_column(clip.max_abs, spec.effective_group_size(cols), cols);
      d.assign_weight(at::clamp(w, -bound, bound));
    }
  }
}

}  // namespace

std::vector<AwqGroupReport> awq_scale_block(model::DecoderLayer& layer,
                                            const std::string& layer_prefix,
                                            const AwqBlockInputs& inputs, const QuantSpec& spec,
                                            const AwqOptions& options) {
  if (options.grid < 1) fail("awq: the alpha grid must have >= 1 point, got {}", options.grid);
  at::NoGradGuard no_grad;
  const std::vector<ScaleGroup> groups = scale_groups(layer, layer_prefix, inputs, options);
  QuantSpec search_spec = spec;
  search_spec.clip_search = false;  // the range search comes after scaling, as in the reference
  std::vector<AwqGroupReport> reports;
  std::map<std::string, at::Tensor> input_scale;
  for (const auto& group : groups) {
    bool all_quantized = true;
    for (const auto& [name, linear] : group.layers) {
      all_quantized = all_quantized && spec.quantizes(layer_prefix + name);
      dense(linear, layer_prefix + name);
      if (!inputs.rows.count(name) || !inputs.channel_mean_abs.count(name))
        fail("awq: no calibration inputs captured for {}{}", layer_prefix, name);
    }
    if (!all_quantized) continue;  // scaling only pays off when every consumer is quantized
    AwqGroupReport report = search_group(group, inputs, search_spec, options);
    // Fold: W' = W diag(s) for the consumers, 1/s into the producer.
    for (const auto& [name, linear] : group.layers) {
      auto& d = dense(linear, layer_prefix + name);
      d.assign_weight(d.effective_weight().to(at::kFloat) * report.scales.unsqueeze(0));
      input_scale[name] = report.scales;
    }
    group.fold_previous(1.0 / report.scales);
    reports.push_back(std::move(report));
  }
  if (options.clipping == AwqClipping::kAuto)
    clip_block(layer_prefix, inputs, groups, input_scale, spec, options);
  return reports;
}

}  // namespace rqat::quant
