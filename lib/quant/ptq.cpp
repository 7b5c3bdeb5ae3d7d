#include "quant/ptq.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <ostream>

#include "io/error.h"
#include "quant/activation_quant.h"
#include "quant/capturing_linear.h"
#include "quant/fused_layers.h"
#include "quant/gguf/grid.h"
#include "quant/hessian.h"
#include "quant/rtn.h"

namespace rqat::quant {

const std::vector<std::vector<std::string>>& sequential_groups() {
  static const std::vector<std::vector<std::string>> groups = {
      {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
      {"self_attn.o_proj"},
      {"mlp.gate_proj", "mlp.up_proj"},
      {"mlp.down_proj"}};
  return groups;
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

model::DenseLinear& dense_layer(const model::LinearSlot& slot) {
  auto* d = dynamic_cast<model::DenseLinear*>(slot.layer->get());
  if (d == nullptr)
    fail("ptq: layer {} is not a plain linear layer (already quantized?)", slot.name);
  return *d;
}

// The slots of block `index` by local name ("self_attn.q_proj").
std::map<std::string, model::LinearSlot> block_slots(std::vector<model::LinearSlot>& all,
                                                     int64_t index) {
  const std::string prefix = fmt::format("model.layers.{}.", index);
  std::map<std::string, model::LinearSlot> slots;
  for (auto& slot : all)
    if (slot.name.rfind(prefix, 0) == 0) slots.emplace(slot.name.substr(prefix.size()), slot);
  return slots;
}

// The calibration batches of one block: hidden states in, and the attention context per batch.
struct BlockData {
  std::vector<at::Tensor> hidden;  // (b, T, hidden) each
  std::vector<model::AttentionContext> contexts;
  int64_t bytes() const {
    int64_t total = 0;
    for (const auto& h : hidden) total += h.numel() * h.element_size();
    return total;
  }
};

void run_block(model::DecoderLayer& layer, int64_t index, const BlockData& data) {
  for (std::size_t b = 0; b < data.hidden.size(); ++b)
    layer.forward(data.hidden[b], data.contexts[b], index);
}

// Rounds scales to float16 (as GPTQ checkpoints store them) and returns the weight the codes then
// stand for. A GGUF grid's scales are already what its blocks store (fp16, or fp16 times an
// integer sub-block scale).
at::Tensor finalize(QuantizedWeight& q) {
  if (!q.on_format_grid()) q.scales = q.scales.to(at::kHalf).to(at::kFloat);
  return q.dequantize();
}

double relative_error(const at::Tensor& w, const at::Tensor& q, const at::Tensor& h) {
  // ||(W - Q) X||^2 / ||W X||^2 = tr(D H D^T) / tr(W H W^T) with H = 2 X X^T / n.
  const auto d = (w - q).to(at::kDouble);
  const auto wd = w.to(at::kDouble);
  const auto hd = h.to(at::kDouble);
  const double num = (at::matmul(d, hd) * d).sum().item<double>();
  const double den = (at::matmul(wd, hd) * wd).sum().item<double>();
  return den > 0 ? num / den : (num > 0 ? std::numeric_limits<double>::infinity() : 0.0);
}

void log_layer(std::ostream& log, const LayerReport& r) {
  std::string line = fmt::format("  {:<40} {:>6}x{:<6}", r.name, r.out_features, r.in_features);
  if (!std::isnan(r.relative_error)) line += fmt::format(" rel.err {:.3e}", r.relative_error);
  if (!std::isnan(r.damp_used) && (r.damp_increases > 0 || r.dead_columns > 0))
    line += fmt::format(" damp {:.3g} (+{}), dead columns {}", r.damp_used, r.damp_increases,
                        r.dead_columns);
  line += fmt::format(" {:.2f} s\n", r.seconds);
  log << line << std::flush;
}

class Quantizer {
 public:
  // nvfp4_globals: the global scale of each layer on the nvfp4 grid, shared within the groups
  // GPU engines fuse (quant/fused_layers.h), from the weights before any is quantized.
  Quantizer(const PtqOptions& options, std::ostream& log, PtqResult& result,
            std::map<std::string, float> nvfp4_globals)
      : options_(options), log_(log), result_(result), nvfp4_globals_(std::move(nvfp4_globals)) {}

  // Quantizes one layer from its weight and (optional) Hessian of `tokens` calibration tokens and
  // writes the result back.
  void quantize_layer(const model::LinearSlot& slot, const at::Tensor& hessian, int64_t tokens) {
    auto& layer = dense_layer(slot);
    const auto start = Clock::now();
    const auto w = layer.effective_weight().detach().to(at::kFloat);
    LayerReport report;
    report.name = slot.name;
    report.out_features = w.size(0);
    report.in_features = w.size(1);
    at::Tensor importance;  // --imatrix: llama.cpp's weights, exactly as the file will hold them
    if (options_.importance.imatrix) {
      auto& record = result_.importance[slot.name];
      record = importance_from_hessian(hessian, tokens);
      importance = record.weights();
    }
    QuantizedWeight q;
    if (options_.method == PtqMethod::kGptq) {
      GptqReport gptq;
      q = gptq_quantize(w, hessian.clone(), options_.spec, options_.gptq, &gptq, importance,
                        shared_global_scale(nvfp4_globals_, slot.name));
      report.damp_used = gptq.damp_used;
      report.damp_increases = gptq.damp_increases;
      report.dead_columns = gptq.dead_columns;
    } else {
      q = rtn_quantize(w, options_.spec, importance,
                       shared_global_scale(nvfp4_globals_, slot.name));
    }
    const auto dequantized = finalize(q).to(w.device());
    if (hessian.defined()) {
      // In the output space of the layer before AWQ folded 1/s into its rows: rows times s.
      const auto found = output_scales_.find(slot.name);
      const at::Tensor rows = found == output_scales_.end()
                                  ? at::ones({w.size(0), 1}, w.options())
                                  : found->second.to(w.device()).unsqueeze(1);
      report.relative_error = relative_error(w * rows, dequantized * rows, hessian.to(w.device()));
    }
    layer.assign_weight(dequantized);
    report.seconds = seconds_since(start);
    if (options_.verbose) log_layer(log_, report);
    result_.layers[slot.name] = std::move(q);
    result_.reports.push_back(std::move(report));
  }

  // AWQ scaled the rows (outputs) of layer `name` by 1 / s: its error is reported times s.
  void set_output_scale(const std::string& name, const at::Tensor& s) { output_scales_[name] = s; }

 private:
  std::map<std::string, at::Tensor> output_scales_;
  const PtqOptions& options_;
  std::ostream& log_;
  PtqResult& result_;
  std::map<std::string, float> nvfp4_globals_;
};

// A GGUF grid: RTN or GPTQ choose its codes, and every selected layer's rows hold whole blocks.
void check_gguf_grid_fits(model::CausalLM& model, const QuantSpec& spec, PtqMethod method) {
  check_grid_method(spec, method);
  const std::string grid = gguf_grid_name(*spec.gguf_grid);
  const int64_t block = gguf_grid_info(*spec.gguf_grid).block;
  for (const auto& slot : model.linear_layers(true)) {
    if (!spec.quantizes(slot.name)) continue;
    const int64_t in = (*slot.layer)->in_features();
    if (in % block != 0)
      fail("--grid {}: {} has rows of {} values, not a whole number of {}-value blocks", grid,
           slot.name, in, block);
  }
}

void check_inputs(model::CausalLM& model, const at::Tensor& ids, const PtqOptions& options) {
  options.spec.validate("--");
  if (options.batch_size < 1) fail("--batch-size must be >= 1, got {}", options.batch_size);
  if (options.spec.gguf_grid) check_gguf_grid_fits(model, options.spec, options.method);
  if (options.spec.fp_grid) check_grid_method(options.spec, options.method);
  check_calibration_needs(options, ids.defined());
  if (!ids.defined()) return;
  if (ids.dim() != 2 || ids.size(0) < 1 || ids.size(1) < 1)
    fail("calibration ids must be (samples, tokens), got {}", c10::str(ids.sizes()));
  if (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= model.config().vocab_size)
    fail("calibration ids fall outside the model's vocabulary of {}", model.config().vocab_size);
  int64_t selected = 0;
  for (const auto& slot : model.linear_layers(true)) selected += options.spec.quantizes(slot.name);
  if (selected == 0) fail("the quantization spec selects no linear layer of this model");
}

}  // namespace

void check_grid_method(const QuantSpec& spec, PtqMethod method) {
  const auto grid = spec.grid_name();
  if (grid && method != PtqMethod::kRtn && method != PtqMethod::kGptq)
    fail("--grid {}: --method {} does not choose codes on a {} grid (use rtn or gptq)", *grid,
         enum_name(method), spec.gguf_grid ? "GGUF" : "floating-point");
}

void check_calibration_needs(const PtqOptions& options, bool has_calibration) {
  if (options.importance.imatrix && !options.spec.gguf_grid)
    fail("--imatrix weights llama.cpp's quantization of a GGUF grid: add --grid gguf-TYPE");
  if (options.spec.activations == FpGrid::kNvfp4 && options.method == PtqMethod::kNf4)
    fail("--act-grid nvfp4: --method nf4 keeps no quant state to hold input global scales");
  if (has_calibration) return;
  if (options.spec.activations == FpGrid::kNvfp4)
    fail(
        "--act-grid nvfp4 needs calibration data (--calib FILE): each layer's input global scale "
        "is calibrated on it");
  if (options.method != PtqMethod::kRtn && options.method != PtqMethod::kNf4)
    fail("--method {} needs calibration data (--calib FILE)", enum_name(options.method));
  if (options.importance.imatrix) fail("--imatrix needs calibration data (--calib FILE)");
}

PtqResult quantize_model(model::CausalLM& model, const at::Tensor& calibration_ids,
                         const PtqOptions& options, std::ostream& log) {
  check_inputs(model, calibration_ids, options);
  at::NoGradGuard no_grad;
  PtqResult result;
  Quantizer quantizer(options, log, result, shared_nvfp4_global_scales(model, options.spec));
  const auto start = Clock::now();
  auto slots = model.linear_layers(/*include_lm_head=*/true);

  if (options.method == PtqMethod::kNf4) {  // from the weights alone, decoded in place
    for (const auto& slot : slots) {
      if (!options.spec.quantizes(slot.name)) continue;
      const auto start_layer = Clock::now();
      auto& layer = dense_layer(slot);
      Nf4Weight q =
          nf4_quantize(layer.effective_weight(), options.nf4.block_size, options.nf4.double_quant);
      layer.assign_weight(nf4_dequantize(q));
      LayerReport report;
      report.name = slot.name;
      report.out_features = q.shape[0];
      report.in_features = q.shape[1];
      report.seconds = seconds_since(start_layer);
      result.reports.push_back(std::move(report));
      result.nf4_layers.emplace_back(slot.name, std::move(q));
    }
    result.seconds = seconds_since(start);
    return result;
  }
  if (!calibration_ids.defined()) {  // RTN from the weights alone
    for (const auto& slot : slots)
      if (options.spec.quantizes(slot.name)) quantizer.quantize_layer(slot, {}, 0);
    result.seconds = seconds_since(start);
    return result;
  }

  const auto device = model.options().device();
  const auto ids = calibration_ids.to(device);
  BlockData data;
  for (int64_t begin = 0; begin < ids.size(0); begin += options.batch_size) {
    const auto batch = ids.slice(0, begin, std::min(begin + options.batch_size, ids.size(0)));
    data.contexts.push_back(model.sequence_context(batch));
    data.hidden.push_back(model.embed(batch));
  }

  for (int64_t index = 0; index < model.num_layers(); ++index) {
    auto& layer = model.layer(index);
    auto local = block_slots(slots, index);
    const std::string prefix = fmt::format("model.layers.{}.", index);
    if (options.verbose) log << fmt::format("block {}/{}\n", index + 1, model.num_layers());
    if (options.on_block) options.on_block(index, model.num_layers());
    int64_t captured_bytes = 0;

    if (options.method == PtqMethod::kAwq) {
      // One pass capturing every layer's input statistics, then the scale search and folding.
      AwqBlockInputs inputs;
      const int64_t total_rows = ids.size(0) * ids.size(1);
      const int64_t stride =
          std::max<int64_t>(1, (total_rows + options.awq.max_rows - 1) / options.awq.max_rows);
      std::map<std::string, std::vector<at::Tensor>> kept;
      std::vector<std::unique_ptr<ScopedCapture>> captures;
      // The attention module's loss needs whole sequences: the first batches, up to max_rows
      // tokens, of q_proj's input (the attention's input), with their contexts.
      std::size_t batch = 0;
      int64_t attention_tokens = 0;
      inputs.layer_index = index;
      for (auto& [name, slot] : local) {
        captures.push_back(
            std::make_unique<ScopedCapture>(slot, [&, name = name](const at::Tensor& x) {
              if (name == "self_attn.q_proj") {
                if (attention_tokens < options.awq.max_rows) {
                  inputs.attention_inputs.push_back(x.detach().clone());
                  inputs.attention_contexts.push_back(data.contexts[batch]);
                  attention_tokens += x.numel() / x.size(-1);
                }
                ++batch;
              }
              const auto rows = x.reshape({-1, x.size(-1)}).to(at::kFloat);
              auto sum = rows.abs().sum(0);
              auto& mean = inputs.channel_mean_abs[name];
              mean = mean.defined() ? mean + sum : sum;
              kept[name].push_back(rows.slice(0, 0, rows.size(0), stride));
            }));
      }
      run_block(layer, index, data);
      captures.clear();
      for (auto& [name, parts] : kept) {
        inputs.rows[name] = at::cat(parts, 0);
        inputs.channel_mean_abs[name] =
            inputs.channel_mean_abs[name] / static_cast<double>(total_rows);
        captured_bytes += inputs.rows[name].numel() * 4;
      }
      for (const auto& x : inputs.attention_inputs) captured_bytes += x.numel() * x.element_size();
      auto groups = awq_scale_block(layer, prefix, inputs, options.spec, options.awq);
      for (auto& g : groups) {
        if (options.verbose)
          log << fmt::format("  awq {} -> {}: alpha {:.2f}, loss {:.4g} -> {:.4g}\n", g.previous,
                             fmt::join(g.layers, ", "), g.alpha, g.loss_identity, g.loss_best);
        g.previous = prefix + g.previous;
        if (local.count(g.previous.substr(prefix.size())))
          quantizer.set_output_scale(g.previous, g.scales);  // v_proj, up_proj
        result.awq_groups.push_back(std::move(g));
      }
    }

    for (const auto& group : sequential_groups()) {
      std::vector<std::string> names;
      for (const auto& name : group)
        if (local.count(name) && options.spec.quantizes(prefix + name)) names.push_back(name);
      if (names.empty()) continue;
      std::map<std::string, HessianAccumulator> hessians;
      {
        std::vector<std::unique_ptr<ScopedCapture>> captures;
        for (const auto& name : names) {
          auto& acc = hessians.try_emplace(name, local.at(name).layer->get()->in_features(), device)
                          .first->second;
          captures.push_back(std::make_unique<ScopedCapture>(
              local.at(name), [&acc](const at::Tensor& x) { acc.add(x); }));
        }
        run_block(layer, index, data);
      }
      for (const auto& name : names) {
        const auto& h = hessians.at(name).hessian();
        captured_bytes = std::max(captured_bytes, h.numel() * 4);
        quantizer.quantize_layer(local.at(name), h, hessians.at(name).samples());
      }
    }
    // The next block's inputs come from this block with its quantized weights. Under NVFP4
    // activations the same pass calibrates each quantized layer's input global scale (on the
    // weight-quantized model's inputs, as llm-compressor observes them).
    std::map<std::string, at::Tensor> input_amax;
    {
      std::vector<std::unique_ptr<ScopedCapture>> captures;
      if (options.spec.activations == FpGrid::kNvfp4)
        for (auto& [name, slot] : local)
          if (options.spec.quantizes(prefix + name))
            captures.push_back(std::make_unique<ScopedCapture>(
                slot, [&amax = input_amax[prefix + name]](const at::Tensor& x) {
                  observe_input_amax(amax, x);
                }));
      for (std::size_t b = 0; b < data.hidden.size(); ++b)
        data.hidden[b] = layer.forward(data.hidden[b], data.contexts[b], index);
    }
    for (const auto& [name, amax] : input_amax)
      result.layers.at(name).input_global_scale = input_global_scale_from_amax(amax, name);
    result.peak_activation_bytes =
        std::max(result.peak_activation_bytes, 2 * data.bytes() + captured_bytes);
  }
  // lm_head (only when the spec asks for it): its inputs are the final normed hidden states.
  for (auto& slot : slots) {
    if (slot.name != "lm_head" || !options.spec.quantizes(slot.name)) continue;
    HessianAccumulator acc(slot.layer->get()->in_features(), device);
    const bool calibrates_input = options.spec.activations == FpGrid::kNvfp4;
    at::Tensor input_amax;
    for (const auto& h : data.hidden) {
      const at::Tensor normed = model.model->norm->forward(h);
      acc.add(normed);
      if (calibrates_input) observe_input_amax(input_amax, normed);
    }
    quantizer.quantize_layer(slot, acc.hessian(), acc.samples());
    if (calibrates_input)
      result.layers.at(slot.name).input_global_scale =
          input_global_scale_from_amax(input_amax, slot.name);
  }
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace rqat::quant
