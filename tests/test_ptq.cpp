// The whole-model PTQ driver: block-wise calibration equals the model's own forward, the hooks
// feed GPTQ the Hessian a plain computation gives, true-sequential order, RTN without data, AWQ
// folding preserves the function and helps on outlier channels, and the quantized state
// round-trips through quant_state.safetensors.
#include "catch.h"

#include <sstream>

#include <ATen/ATen.h>

#include "quant/awq.h"
#include "quant/gptq.h"
#include "quant/ptq.h"
#include "quant/quant_state.h"
#include "quant/rtn.h"
#include "test_util.h"

using namespace rqat;

namespace {

at::Tensor random_ids(const model::CausalLM& model, int64_t n, int64_t t, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(model.config().vocab_size, {n, t}, gen, at::kLong);
}

std::map<std::string, at::Tensor> weights(model::CausalLM& model) {
  std::map<std::string, at::Tensor> w;
  for (const auto& slot : model.linear_layers(true))
    w[slot.name] = (*slot.layer)->effective_weight().detach().clone();
  return w;
}

// Quantizes `model` in place by `method` at W<bits> with groups of `group`, quietly.
quant::PtqResult quantize_quietly(model::CausalLM& model, const at::Tensor& ids,
                                  quant::PtqMethod method, int bits, int64_t group) {
  quant::PtqOptions options;
  options.method = method;
  options.spec.bits = bits;
  options.spec.group_size = group;
  options.verbose = false;
  std::ostringstream log;
  return quant::quantize_model(model, ids, options, log);
}

at::Tensor fp16_dequantized(quant::QuantizedWeight q) {
  q.scales = q.scales.to(at::kHalf).to(at::kFloat);
  return q.dequantize();
}

}  // namespace

TEST_CASE("block-wise forward equals hidden_states", "[ptq]") {
  at::NoGradGuard no_grad;
  for (auto family : {model::Family::kQwen2, model::Family::kQwen3, model::Family::kLlama}) {
    auto model = test::random_tiny_model(family, false, 3);
    const auto ids = random_ids(*model, 2, 9, 5);
    auto ctx = model->sequence_context(ids);
    auto x = model->embed(ids);
    for (int64_t i = 0; i < model->num_layers(); ++i) x = model->layer(i).forward(x, ctx, i);
    x = model->model->norm->forward(x);
    CHECK(at::allclose(x, model->hidden_states(ids), 1e-6, 1e-6));
  }
}

TEST_CASE("RTN without calibration quantizes exactly the selected layers", "[ptq]") {
  auto model = test::random_tiny_model(model::Family::kQwen2, false, 4);
  const auto before = weights(*model);
  const auto embed = model->model->embed_tokens->weight.clone();
  quant::PtqOptions options;
  options.method = quant::PtqMethod::kRtn;
  options.spec.bits = 3;
  options.spec.group_size = 8;
  options.spec.exclude = {R"(.*\.mlp\.down_proj)"};
  options.verbose = false;
  std::ostringstream log;
  const auto result = quant::quantize_model(*model, {}, options, log);
  const auto after = weights(*model);
  for (const auto& [name, w] : before) {
    const bool selected = options.spec.quantizes(name);
    CHECK(result.layers.count(name) == (selected ? 1u : 0u));
    if (!selected) {
      CHECK(at::equal(after.at(name), w));
      continue;
    }
    // Closed form: the RTN state with float16-rounded scales, dequantized.
    CHECK(at::equal(after.at(name), fp16_dequantized(quant::rtn_quantize(w, options.spec))));
    CHECK(std::isnan(result.reports.front().relative_error));
  }
  CHECK(before.count("lm_head") == 1);
  CHECK(result.layers.count("lm_head") == 0);
  CHECK(at::equal(model->model->embed_tokens->weight, embed));
}

TEST_CASE("GPTQ through the hooks equals GPTQ on a Hessian computed plainly", "[ptq]") {
  at::NoGradGuard no_grad;
  auto model = test::random_tiny_model(model::Family::kLlama, true, 6);
  auto reference = test::random_tiny_model(model::Family::kLlama, true, 6);
  const auto ids = random_ids(*model, 5, 12, 8);
  quant::PtqOptions options;
  options.method = quant::PtqMethod::kGptq;
  options.spec.bits = 4;
  options.spec.group_size = -1;
  options.batch_size = 2;  // batches of 2, 2, 1 rows: the running average must still be exact
  options.verbose = false;
  std::ostringstream log;
  const auto result = quant::quantize_model(*model, ids, options, log);

  // Block 0's q/k/v see input_layernorm(embed(ids)) of the original model.
  auto& layer = reference->layer(0);
  const auto x2 = layer.input_layernorm->forward(reference->embed(ids));
  const auto rows = x2.reshape({-1, x2.size(-1)}).to(at::kDouble);
  const auto h = (2.0 / rows.size(0)) * at::matmul(rows.t(), rows);
  for (const char* name : {"q_proj", "k_proj", "v_proj"}) {
    const std::string full = std::string("model.layers.0.self_attn.") + name;
    auto* linear = name[0] == 'q'   ? layer.self_attn->q_proj.get()
                   : name[0] == 'k' ? layer.self_attn->k_proj.get()
                                    : layer.self_attn->v_proj.get();
    const auto expected =
        quant::gptq_quantize(linear->effective_weight(), h.to(at::kFloat), options.spec, {});
    const auto& got = result.layers.at(full);
    // The Hessians agree to float rounding; codes may differ at exact rounding ties only.
    const double mismatch = (got.codes != expected.codes).to(at::kDouble).mean().item<double>();
    CHECK(mismatch < 1e-3);
  }
  // o_proj is calibrated after q/k/v were quantized (true-sequential): its Hessian comes from the
  // quantized attention, so at least its error report exists and is finite.
  bool saw_o = false;
  for (const auto& r : result.reports) {
    if (r.name == "model.layers.0.self_attn.o_proj") {
      saw_o = true;
      CHECK(std::isfinite(r.relative_error));
    }
  }
  CHECK(saw_o);
  // Order of quantization: q, k, v, o, gate, up, down per block.
  REQUIRE(result.reports.size() >= 7);
  CHECK(result.reports[3].name == "model.layers.0.self_attn.o_proj");
  CHECK(result.reports[6].name == "model.layers.0.mlp.down_proj");
}

TEST_CASE("GPTQ's per-layer errors are below RTN's on the same model", "[ptq]") {
  auto ids_model = test::random_tiny_model(model::Family::kQwen3, false, 9);
  const auto ids = random_ids(*ids_model, 6, 16, 10);
  double rtn_error = 0, gptq_error = 0;
  for (auto method : {quant::PtqMethod::kRtn, quant::PtqMethod::kGptq}) {
    auto model = test::random_tiny_model(model::Family::kQwen3, false, 9);
    const auto result = quantize_quietly(*model, ids, method, 3, 16);
    double total = 0;
    for (const auto& r : result.reports) total += r.relative_error;
    (method == quant::PtqMethod::kRtn ? rtn_error : gptq_error) = total / result.reports.size();
  }
  INFO("mean relative error: RTN " << rtn_error << ", GPTQ " << gptq_error);
  CHECK(gptq_error < rtn_error);
}

TEST_CASE("AWQ folding keeps the block's function; its scales help with outlier channels",
          "[ptq][awq]") {
  at::NoGradGuard no_grad;
  auto model = test::random_tiny_model(model::Family::kQwen2, false, 11);
  const auto ids = random_ids(*model, 3, 10, 12);
  auto ctx = model->sequence_context(ids);
  auto x = model->embed(ids);
  x.select(-1, 1).mul_(40.0);  // an outlier channel, as real activations have
  auto& layer = model->layer(0);
  const auto before = layer.forward(x, ctx, 0);

  quant::QuantSpec spec;
  spec.bits = 3;
  spec.group_size = 8;
  quant::AwqBlockInputs inputs;
  // Capture the block's layer inputs plainly.
  auto capture = [&](const std::string& name, const at::Tensor& in) {
    const auto rows = in.reshape({-1, in.size(-1)}).to(at::kFloat);
    inputs.rows[name] = rows;
    inputs.channel_mean_abs[name] = rows.abs().mean(0);
  };
  const auto h1 = layer.input_layernorm->forward(x);
  for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}) capture(n, h1);
  // o_proj input: rebuild the attention output as the layer computes it.
  std::map<std::string, at::Tensor> seen;
  {
    auto& attn = *layer.self_attn;
    auto o = attn.o_proj;
    struct Spy : model::Linear {
      std::shared_ptr<model::Linear> inner;
      at::Tensor* out;
      at::Tensor forward(const at::Tensor& in) override {
        *out = in;
        return inner->forward(in);
      }
      int64_t in_features() const override { return inner->in_features(); }
      int64_t out_features() const override { return inner->out_features(); }
      at::Tensor effective_weight() const override { return inner->effective_weight(); }
      std::optional<at::Tensor> bias() const override { return inner->bias(); }
    };
    auto spy = std::make_shared<Spy>();
    spy->inner = o;
    spy->out = &seen["o"];
    attn.o_proj = spy;
    attn.forward(h1, ctx, 0);
    attn.o_proj = o;
  }
  capture("self_attn.o_proj", seen["o"]);
  const auto mid = x + layer.self_attn->forward(h1, ctx, 0);
  const auto h2 = layer.post_attention_layernorm->forward(mid);
  capture("mlp.gate_proj", h2);
  capture("mlp.up_proj", h2);
  const auto act = at::silu(layer.mlp->gate_proj->forward(h2)) * layer.mlp->up_proj->forward(h2);
  capture("mlp.down_proj", act);

  const auto q_weight = layer.self_attn->q_proj->effective_weight().clone();
  // llm-awq's activation scaling scored per layer, without clipping (rqat's earlier form).
  quant::AwqOptions options;
  options.scaling = quant::AwqScaling::kActivation;
  options.loss = quant::AwqLoss::kLayer;
  options.clipping = quant::AwqClipping::kNone;
  const auto reports = quant::awq_scale_block(layer, "model.layers.0.", inputs, spec, options);
  REQUIRE(reports.size() >= 3);
  // Unquantized, the folded block computes the same function.
  CHECK(at::allclose(layer.forward(x, ctx, 0), before, 1e-4, 1e-4));
  // With the outlier channel, the q/k/v group picks a non-trivial alpha and a lower loss than
  // plain RTN; recompute both losses here for q_proj alone from the closed form.
  const auto& qkv = reports.front();
  CHECK(qkv.previous == "input_layernorm");
  CHECK(qkv.alpha > 0);
  CHECK(qkv.loss_best < qkv.loss_identity);
  const auto xs = inputs.rows.at("self_attn.q_proj");
  const auto s = quant::awq_scales(inputs.channel_mean_abs.at("self_attn.q_proj"), qkv.alpha);
  const auto rtn_q = quant::rtn_quantize(q_weight, spec).dequantize();
  const auto awq_q = quant::rtn_quantize(q_weight * s, spec).dequantize() / s;
  const double rtn_loss = at::matmul(xs, (q_weight - rtn_q).t()).pow(2).sum().item<double>();
  const double awq_loss = at::matmul(xs, (q_weight - awq_q).t()).pow(2).sum().item<double>();
  INFO("q_proj output error: RTN " << rtn_loss << ", AWQ " << awq_loss);
  CHECK(awq_loss < rtn_loss);
}

TEST_CASE("AWQ auto_clip finds a known best range; duo scaling's weight means", "[ptq][awq]") {
  // Every (row, group) of 32 columns: column 0 holds an outlier M whose input is always 0, the
  // others -v, 0 or v. Clamped to 0.7 M = 2v, the 2-bit min-max grid over [-v, 2v] is
  // {-v, 0, v, 2v}: every active weight exact, so the group output error is 0 there and > 0 at
  // every other ratio of the grid (1, 0.95, ..., 0.55): the search must pick 0.7 everywhere.
  const int64_t rows = 4, cols = 64, group = 32;
  const float v = 0.1f, outlier = 2 * v / 0.7f;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(61);
  auto w = (at::randint(3, {rows, cols}, gen, at::kLong) - 1).to(at::kFloat) * v;
  for (int64_t g = 0; g < cols / group; ++g) {
    w.select(1, g * group).fill_(outlier);
    w.select(1, g * group + 1).fill_(-v);
    w.select(1, g * group + 2).fill_(v);
  }
  auto x = at::randn({600, cols}, gen);
  x.select(1, 0).zero_();
  x.select(1, group).zero_();
  quant::QuantSpec spec;
  spec.bits = 2;
  spec.group_size = group;
  const quant::AwqOptions options;
  const auto clip = quant::awq_clip_search(w, x, spec, options);
  CHECK(clip.ratio.sizes() == at::IntArrayRef({rows, cols / group}));
  CHECK(at::allclose(clip.ratio, at::full({rows, cols / group}, 0.7f)));
  CHECK(at::allclose(clip.max_abs, at::full({rows, cols / group}, 2 * v), 1e-5, 1e-7));
  // The clamped layer's output error is (nearly) zero; unclipped RTN's is not.
  const auto clamped = at::clamp(w, -2 * v, 2 * v);
  const auto out_error = [&](const at::Tensor& q) {
    return at::matmul(x, (w - q).t()).pow(2).mean().item<double>();
  };
  CHECK(out_error(quant::rtn_quantize(clamped, spec).dequantize()) < 1e-10);
  CHECK(out_error(quant::rtn_quantize(w, spec).dequantize()) > 1e-4);

  // Duo scaling: w_mean per input channel = mean over rows of |w| / max|w| of its group.
  const auto a = at::tensor({1.0f, -2.0f, 3.0f, 4.0f}).view({1, 4});
  const auto b = at::tensor({-3.0f, 4.0f, 0.0f, 1.0f}).view({1, 4});
  quant::QuantSpec pairs;
  pairs.group_size = 2;
  const auto mean = quant::awq_weight_mean({a, b}, pairs);
  const std::vector<double> expected = {(0.5 + 0.75) / 2, (1.0 + 1.0) / 2, (0.75 + 0.0) / 2,
                                        (1.0 + 1.0) / 2};
  for (int i = 0; i < 4; ++i) CHECK(mean[i].item<double>() == Approx(expected[i]).epsilon(1e-5));
  // s = x^a / (w^(1-a) + 1e-4), normalized by sqrt(max s min s).
  const auto x_mean = at::tensor({1.0f, 4.0f, 0.5f, 2.0f});
  const auto s = quant::awq_scales(x_mean, 0.5, mean);
  std::vector<double> raw(4);
  for (int i = 0; i < 4; ++i)
    raw[i] = std::max(
        std::sqrt(x_mean[i].item<double>()) / (std::sqrt(mean[i].item<double>()) + 1e-4), 1e-4);
  const double norm = std::sqrt(*std::max_element(raw.begin(), raw.end()) *
                                *std::min_element(raw.begin(), raw.end()));
  for (int i = 0; i < 4; ++i) CHECK(s[i].item<double>() == Approx(raw[i] / norm).epsilon(1e-5));
}

TEST_CASE("AWQ with the reference search beats RTN on a model with outlier channels",
          "[ptq][awq]") {
  // A random model whose embeddings carry two outlier channels, as trained models' activations do;
  // the end-to-end logits error of AWQ (defaults: duo scaling, module-output loss, auto_clip) is
  // below RTN's at the same spec.
  const auto outlier_model = [] {
    auto model = test::random_tiny_model(model::Family::kQwen3, false, 71);
    at::NoGradGuard no_grad;
    auto& embed = model->model->embed_tokens->weight;
    embed.select(1, 3).mul_(30.0);
    embed.select(1, 17).mul_(20.0);
    return model;
  };
  auto reference = outlier_model();
  const auto ids = random_ids(*reference, 8, 24, 72);
  const auto held_out = random_ids(*reference, 4, 24, 73);
  const at::Tensor expected = reference->forward(held_out).detach();
  std::map<quant::PtqMethod, double> error;
  for (auto method : {quant::PtqMethod::kRtn, quant::PtqMethod::kAwq}) {
    auto model = outlier_model();
    quantize_quietly(*model, ids, method, 3, 16);
    error[method] = (model->forward(held_out).detach() - expected).pow(2).mean().item<double>();
  }
  INFO("logits MSE: RTN " << error[quant::PtqMethod::kRtn] << ", AWQ "
                          << error[quant::PtqMethod::kAwq]);
  CHECK(error[quant::PtqMethod::kAwq] < error[quant::PtqMethod::kRtn]);
}

TEST_CASE("quant_state.safetensors round-trips; errors name the file", "[ptq]") {
  test::TempDir dir("quant_state");
  auto model = test::random_tiny_model(model::Family::kQwen2, true, 13);
  quant::QuantState state;
  state.spec.bits = 2;
  state.spec.group_size = 8;
  state.spec.symmetric = true;
  for (const auto& slot : model->linear_layers())
    state.layers[slot.name] = quant::rtn_quantize((*slot.layer)->effective_weight(), state.spec);
  quant::save_quant_state(dir.path(), state);
  const auto loaded = quant::load_quant_state(dir.path());
  CHECK(loaded.spec.to_json() == state.spec.to_json());
  REQUIRE(loaded.layers.size() == state.layers.size());
  for (const auto& [name, q] : state.layers) {
    const auto& l = loaded.layers.at(name);
    CHECK(at::equal(l.codes, q.codes));
    CHECK(at::equal(l.scales, q.scales));
    CHECK(at::equal(l.zeros, q.zeros));
    CHECK(at::equal(l.g_idx, q.g_idx));
    CHECK(at::equal(l.dequantize(), q.dequantize()));
  }
  test::require_error([&] { quant::load_quant_state(dir / "nowhere"); }, {"quant_state"});
}

TEST_CASE("PTQ refuses bad settings before any work", "[ptq]") {
  auto model = test::random_tiny_model(model::Family::kQwen2, false, 14);
  const auto before = weights(*model);
  std::ostringstream log;
  quant::PtqOptions options;
  options.spec.bits = 5;
  test::require_error([&] { quant::quantize_model(*model, {}, options, log); }, {"bits", "5"});
  options.spec.bits = 4;
  options.method = quant::PtqMethod::kGptq;
  test::require_error([&] { quant::quantize_model(*model, {}, options, log); }, {"calib"});
  options.spec.include = {"nothing.matches"};
  test::require_error(
      [&] { quant::quantize_model(*model, random_ids(*model, 1, 4, 1), options, log); },
      {"selects no linear layer"});
  test::require_error([] { rqat::parse_enum<quant::PtqMethod>("smoothquant", "--method"); },
                      {"--method", "smoothquant"});
  for (const auto& [name, w] : weights(*model)) CHECK(at::equal(before.at(name), w));
}
