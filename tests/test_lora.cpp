// LoRA adapters (model/lora_linear.h, train/lora_model.h): a fresh adapter leaves the logits
// unchanged bit for bit and draws A from PEFT's kaiming-uniform bound; with random A and B the
// layer computes x W^T + b + scale x A^T B^T (plain float64 loops) over a dense, a fake-quantized
// and a packed GPTQ base; the A and B gradients (and the input's) equal their hand-derived formulas
// while the base gets none; attach_lora leaves exactly lora_A and lora_B trainable; merging gives
// the unmerged logits and a checkpoint that loads back to them; dropout is off in eval mode,
// inverted and reproducible from the seed in training mode, and replays its masks under
// activation checkpointing; target regexes select by full name; the PEFT adapter export.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "io/json_file.h"
#include "io/safetensors.h"
#include "model/decoder.h"
#include "model/linear.h"
#include "model/lora_linear.h"
#include "model/model_dir.h"
#include "quant/fake_quant_linear.h"
#include "quant/gptq_packing.h"
#include "quant/load_model.h"
#include "quant/packed_gptq_linear.h"
#include "quant/rtn.h"
#include "test_util.h"
#include "train/lora_model.h"
#include "train/training_optimizer.h"

using rqat::model::CausalLM;
using rqat::model::DenseLinear;
using rqat::model::Family;
using rqat::model::LoraLinear;
using rqat::model::LoraOptions;
using rqat::test::random_tiny_model;
using rqat::test::require_error;
using rqat::test::TempDir;

namespace {

LoraOptions lora_options(int64_t rank, double alpha, double dropout = 0.0, uint64_t seed = 0) {
  LoraOptions o;
  o.rank = rank;
  o.alpha = alpha;
  o.dropout = dropout;
  o.seed = seed;
  return o;
}

at::Tensor random_ids(int64_t batch, int64_t steps, int64_t vocab, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(vocab, {batch, steps}, gen, at::kLong);
}

std::vector<std::shared_ptr<LoraLinear>> adapters(CausalLM& model) {
  std::vector<std::shared_ptr<LoraLinear>> out;
  for (const auto& slot : model.linear_layers(/*include_lm_head=*/true))
    if (auto lora = std::dynamic_pointer_cast<LoraLinear>(*slot.layer)) out.push_back(lora);
  return out;
}

// Overwrites A and B with N(0, std^2) values (B is zero after construction, which would hide
// every term the tests check).
void randomize(LoraLinear& lora, at::Generator& gen, double std) {
  at::NoGradGuard no_grad;
  lora.lora_A().copy_(at::randn(lora.lora_A().sizes(), gen) * std);
  lora.lora_B().copy_(at::randn(lora.lora_B().sizes(), gen) * std);
}

void randomize_all(CausalLM& model, uint64_t seed, double std) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (const auto& lora : adapters(model)) randomize(*lora, gen, std);
}

double max_abs(const at::Tensor& t) { return t.abs().max().item<double>(); }
double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// y[n][o] = sum_i x[n][i] W[o][i] + b[o] + scale * sum_r (sum_i x[n][i] A[r][i]) B[o][r], in
// float64 with plain loops. x (N, in), W (out, in), b (out) or undefined.
at::Tensor reference_lora_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                                  const at::Tensor& a, const at::Tensor& bb, double scale) {
  const auto X = x.to(at::kDouble).contiguous(), W = w.to(at::kDouble).contiguous(),
             A = a.to(at::kDouble).contiguous(), B = bb.to(at::kDouble).contiguous();
  auto Xa = X.accessor<double, 2>();
  auto Wa = W.accessor<double, 2>();
  auto Aa = A.accessor<double, 2>();
  auto Ba = B.accessor<double, 2>();
  const int64_t n = X.size(0), in = X.size(1), out = W.size(0), rank = A.size(0);
  auto y = at::zeros({n, out}, at::kDouble);
  auto Y = y.accessor<double, 2>();
  for (int64_t s = 0; s < n; ++s) {
    std::vector<double> xa(rank, 0.0);
    for (int64_t r = 0; r < rank; ++r)
      for (int64_t i = 0; i < in; ++i) xa[r] += Xa[s][i] * Aa[r][i];
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.defined() ? b[o].item<double>() : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += Xa[s][i] * Wa[o][i];
      double low_rank = 0.0;
      for (int64_t r = 0; r < rank; ++r) low_rank += xa[r] * Ba[o][r];
      Y[s][o] = acc + scale * low_rank;
    }
  }
  return y;
}

// W[o][i] = (code[o][i] - zero[o][g]) * scale[o][g], g = g_idx[i], with plain loops.
at::Tensor reference_dequantize(const rqat::quant::QuantizedWeight& q) {
  auto codes = q.codes.to(at::kInt);
  auto C = codes.accessor<int32_t, 2>();
  auto S = q.scales.accessor<float, 2>();
  auto Z = q.zeros.accessor<float, 2>();
  auto G = q.g_idx.accessor<int32_t, 1>();
  auto w = at::zeros(codes.sizes(), at::kDouble);
  auto Wa = w.accessor<double, 2>();
  for (int64_t o = 0; o < codes.size(0); ++o)
    for (int64_t i = 0; i < codes.size(1); ++i)
      Wa[o][i] = (C[o][i] - static_cast<double>(Z[o][G[i]])) * static_cast<double>(S[o][G[i]]);
  return w;
}

rqat::quant::QuantSpec spec4(int64_t group, bool symmetric) {
  rqat::quant::QuantSpec spec;
  spec.bits = 4;
  spec.group_size = group;
  spec.symmetric = symmetric;
  return spec;
}

}  // namespace

TEST_CASE("a fresh adapter leaves the logits unchanged and draws A like PEFT", "[lora]") {
  for (const auto& [family, tied] :
       {std::pair{Family::kQwen2, false}, std::pair{Family::kQwen3, true},
        std::pair{Family::kLlama, false}}) {
    auto model = random_tiny_model(family, tied, 11);
    const auto ids = random_ids(2, 9, model->config().vocab_size, 12);
    at::NoGradGuard no_grad;
    const auto before = model->forward(ids);
    const auto names = rqat::train::attach_lora(*model, lora_options(16, 32, 0.0, 5), {});
    CHECK(names.size() == 14);  // 7 projections x 2 blocks, never lm_head by default
    const auto after = model->forward(ids);
    CHECK(at::equal(before, after));

    for (const auto& lora : adapters(*model)) {
      INFO(lora->layer_name());
      // kaiming_uniform_(a = sqrt(5)): bound = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)).
      const double fan_in = static_cast<double>(lora->in_features());
      const double bound = std::sqrt(2.0 / (1.0 + 5.0)) * std::sqrt(3.0 / fan_in);
      const auto& A = lora->lora_A();
      CHECK(A.sizes() == at::IntArrayRef({16, lora->in_features()}));
      CHECK(lora->lora_B().sizes() == at::IntArrayRef({lora->out_features(), 16}));
      CHECK(A.scalar_type() == at::kFloat);
      CHECK(max_abs(A) <= bound);
      CHECK(max_abs(A) > 0.9 * bound);  // 768+ uniform draws: P(max < 0.9 bound) < 1e-30
      // Variance of U(-b, b) is b^2 / 3; the sample variance of >= 768 draws is within 15%.
      const double var = A.to(at::kDouble).pow(2).mean().item<double>();
      CHECK(std::abs(var / (bound * bound / 3.0) - 1.0) < 0.15);
      CHECK(max_abs(lora->lora_B()) == 0.0);
      CHECK(lora->scale() == 2.0);
    }
  }

  SECTION("A is reproducible from (seed, layer name) and differs across both") {
    auto m1 = random_tiny_model(Family::kQwen2, false, 3);
    auto m2 = random_tiny_model(Family::kQwen2, false, 4);  // other base weights: A must not care
    auto m3 = random_tiny_model(Family::kQwen2, false, 3);
    rqat::train::attach_lora(*m1, lora_options(4, 8, 0.0, 7), {});
    rqat::train::attach_lora(*m2, lora_options(4, 8, 0.0, 7), {});
    rqat::train::attach_lora(*m3, lora_options(4, 8, 0.0, 8), {});
    const auto a1 = adapters(*m1), a2 = adapters(*m2), a3 = adapters(*m3);
    REQUIRE(a1.size() == a2.size());
    for (size_t i = 0; i < a1.size(); ++i) {
      CHECK(at::equal(a1[i]->lora_A(), a2[i]->lora_A()));
      CHECK_FALSE(at::equal(a1[i]->lora_A(), a3[i]->lora_A()));
    }
    // Same shape, other name (q_proj of blocks 0 and 1).
    CHECK_FALSE(at::equal(a1[0]->lora_A(), a1[7]->lora_A()));
  }
}

TEST_CASE("LoraLinear computes x W^T + b + scale x A^T B^T over each kind of base", "[lora]") {
  const int64_t in = 48, out = 40, rank = 5;
  const double alpha = 7.0;  // scale 1.4
  auto gen = at::make_generator<at::CPUGeneratorImpl>(21);
  const auto w = at::randn({out, in}, gen) * 0.2;
  const auto b = at::randn({out}, gen) * 0.1;

  struct Case {
    std::string what;
    std::shared_ptr<rqat::model::Linear> base;
    at::Tensor reference_weight;  // float64, computed independently of the layer
  };
  std::vector<Case> cases;
  {
    auto dense = std::make_shared<DenseLinear>(in, out, true, at::TensorOptions(at::kFloat));
    dense->assign_weight(w);
    dense->assign_bias(b);
    cases.push_back({"dense", dense, w.to(at::kDouble)});
  }
  {
    const auto spec = spec4(16, false);
    const auto q = rqat::quant::rtn_quantize(w, spec);
    auto fq = std::make_shared<rqat::quant::FakeQuantLinear>(w, q, b);  // frozen scales
    cases.push_back({"fake-quantized", fq, reference_dequantize(q)});
  }
  {
    auto q = rqat::quant::rtn_quantize(w, spec4(16, true));
    q.scales = q.scales.to(at::kHalf).to(at::kFloat);  // GPTQ stores float16 scales
    const auto packed = rqat::quant::pack_gptq_layer(q, "packed");
    auto layer = std::make_shared<rqat::quant::PackedGptqLinear>(
        "packed", packed, 4, 16, rqat::quant::GptqFormat::kV1, in, out, true,
        at::TensorOptions(at::kFloat));
    at::NoGradGuard no_grad;
    layer->named_parameters()["bias"].copy_(b);
    cases.push_back({"packed GPTQ", layer, reference_dequantize(q)});
  }

  for (auto& c : cases) {
    INFO(c.what);
    auto lora = std::make_shared<LoraLinear>(c.base, lora_options(rank, alpha, 0.0, 1), "layer");
    CHECK(lora->scale() == Approx(1.4).epsilon(1e-15));
    CHECK(lora->in_features() == in);
    CHECK(lora->out_features() == out);
    randomize(*lora, gen, 0.3);

    // Frozen base, trainable adapter, registered under PEFT's names.
    std::set<std::string> trainable;
    for (const auto& p : lora->named_parameters(/*recurse=*/true)) {
      if (p.value().requires_grad())
        trainable.insert(p.key());
      else
        CHECK(p.key().starts_with("base_layer."));
    }
    CHECK(trainable == std::set<std::string>{"lora_A", "lora_B"});

    const auto x = at::randn({2, 3, in}, gen);
    at::Tensor y;
    {
      at::NoGradGuard no_grad;
      y = lora->forward(x);
    }
    REQUIRE(y.sizes() == at::IntArrayRef({2, 3, out}));
    const auto ref = reference_lora_forward(x.reshape({-1, in}), c.reference_weight, b,
                                            lora->lora_A(), lora->lora_B(), 1.4);
    // float32 sums of 48 terms of size ~0.5: errors ~1e-6.
    CHECK(max_abs_diff(y.reshape({-1, out}), ref) < 2e-5);
    CHECK(max_abs(y.reshape({-1, out}) - lora->base()->forward(x).reshape({-1, out}).detach()) >
          0.1);  // the adapter term is not negligible

    // effective_weight = W + scale B A; the bias is the base's.
    auto ref_w = c.reference_weight.clone();
    auto RW = ref_w.accessor<double, 2>();
    const auto A = lora->lora_A().to(at::kDouble), B = lora->lora_B().to(at::kDouble);
    auto Aa = A.accessor<double, 2>();
    auto Ba = B.accessor<double, 2>();
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i)
        for (int64_t r = 0; r < rank; ++r) RW[o][i] += 1.4 * Ba[o][r] * Aa[r][i];
    const auto ew = lora->effective_weight();
    CHECK(ew.scalar_type() == at::kFloat);
    CHECK_FALSE(ew.requires_grad());
    CHECK(max_abs_diff(ew, ref_w) < 1e-6);
    REQUIRE(lora->bias().has_value());
    CHECK(max_abs_diff(*lora->bias(), b) == 0.0);
  }

  SECTION("an LSQ base's trainable scales are frozen too") {
    rqat::quant::FakeQuantOptions fq_options;
    fq_options.mode = rqat::quant::ScaleMode::kLsq;
    auto fq = rqat::quant::FakeQuantLinear::from_rtn(w, spec4(16, false), b, fq_options);
    REQUIRE(fq->scales().requires_grad());
    LoraLinear lora(fq, lora_options(2, 2), "lsq");
    CHECK_FALSE(fq->scales().requires_grad());
    CHECK_FALSE(fq->zeros().requires_grad());
    CHECK_FALSE(fq->weight().requires_grad());
  }
}

TEST_CASE("gradients of A, B and x equal their hand-derived formulas; the base gets none",
          "[lora][grad]") {
  const int64_t in = 12, out = 9, rank = 3, n = 5;
  const double scale = 6.0 / 3.0;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
  auto dense = std::make_shared<DenseLinear>(in, out, true, at::TensorOptions(at::kFloat));
  dense->assign_weight(at::randn({out, in}, gen));
  dense->assign_bias(at::randn({out}, gen));
  LoraLinear lora(dense, lora_options(rank, 6.0), "grad");
  randomize(lora, gen, 0.5);
  const auto x = at::randn({n, in}, gen).requires_grad_(true);
  const auto g = at::randn({n, out}, gen);  // L = sum(g * y), so dL/dy = g

  (lora.forward(x) * g).sum().backward();

  // With u = x A^T (n, rank) and v = g B (n, rank):
  //   dL/dB[o][r] = scale sum_n g[n][o] u[n][r]
  //   dL/dA[r][i] = scale sum_n v[n][r] x[n][i]
  //   dL/dx[n][i] = sum_o g[n][o] W[o][i] + scale sum_r v[n][r] A[r][i]
  const auto X = x.detach().to(at::kDouble), G = g.to(at::kDouble),
             A = lora.lora_A().detach().to(at::kDouble), B = lora.lora_B().detach().to(at::kDouble),
             W = dense->effective_weight().detach().to(at::kDouble);
  auto Xa = X.accessor<double, 2>();
  auto Ga = G.accessor<double, 2>();
  auto Aa = A.accessor<double, 2>();
  auto Ba = B.accessor<double, 2>();
  auto Wa = W.accessor<double, 2>();
  auto gA = at::zeros({rank, in}, at::kDouble), gB = at::zeros({out, rank}, at::kDouble),
       gx = at::zeros({n, in}, at::kDouble);
  auto gAa = gA.accessor<double, 2>();
  auto gBa = gB.accessor<double, 2>();
  auto gxa = gx.accessor<double, 2>();
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t r = 0; r < rank; ++r) {
      double u = 0.0, v = 0.0;
      for (int64_t i = 0; i < in; ++i) u += Xa[s][i] * Aa[r][i];
      for (int64_t o = 0; o < out; ++o) v += Ga[s][o] * Ba[o][r];
      for (int64_t o = 0; o < out; ++o) gBa[o][r] += scale * Ga[s][o] * u;
      for (int64_t i = 0; i < in; ++i) {
        gAa[r][i] += scale * v * Xa[s][i];
        gxa[s][i] += scale * v * Aa[r][i];
      }
    }
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o) gxa[s][i] += Ga[s][o] * Wa[o][i];
  }
  REQUIRE(lora.lora_A().grad().defined());
  REQUIRE(lora.lora_B().grad().defined());
  CHECK(max_abs_diff(lora.lora_A().grad(), gA) < 1e-5 * (1 + max_abs(gA)));
  CHECK(max_abs_diff(lora.lora_B().grad(), gB) < 1e-5 * (1 + max_abs(gB)));
  CHECK(max_abs_diff(x.grad(), gx) < 1e-5 * (1 + max_abs(gx)));
  for (const auto& p : dense->parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("attach_lora leaves exactly lora_A and lora_B of each wrapped layer trainable",
          "[lora]") {
  auto model = random_tiny_model(Family::kQwen2, /*tied=*/false, 41);
  const auto names = rqat::train::attach_lora(*model, lora_options(4, 8), {});
  const auto params = rqat::train::trainable_parameters(*model);
  REQUIRE(params.size() == 2 * names.size());
  std::set<std::string> expected, got;
  for (const auto& name : names) {
    expected.insert(name + ".lora_A");
    expected.insert(name + ".lora_B");
  }
  for (const auto& p : params) got.insert(p.name);
  CHECK(got == expected);
  size_t frozen = 0;
  for (const auto& p : model->named_parameters(/*recurse=*/true))
    if (!p.value().requires_grad()) ++frozen;
  // Embeddings, norms, lm_head, every base weight and bias.
  CHECK(frozen == model->named_parameters().size() - params.size());
  CHECK_FALSE(model->lm_head->parameters()[0].requires_grad());
  CHECK_FALSE(model->model->embed_tokens->parameters()[0].requires_grad());

  // A fresh adapter: B gets a gradient, A none yet (dL/dA goes through B = 0); nothing else does.
  const auto ids = random_ids(2, 6, model->config().vocab_size, 42);
  model->forward(ids).pow(2).mean().backward();
  for (const auto& p : model->named_parameters(/*recurse=*/true)) {
    INFO(p.key());
    if (p.key().ends_with(".lora_B")) {
      REQUIRE(p.value().grad().defined());
      CHECK(max_abs(p.value().grad()) > 0);
    } else if (p.key().ends_with(".lora_A")) {
      CHECK((!p.value().grad().defined() || max_abs(p.value().grad()) == 0.0));
    } else {
      CHECK_FALSE(p.value().grad().defined());
    }
  }
}

TEST_CASE("merge_lora reproduces the adapted logits and saves as a plain checkpoint", "[lora]") {
  for (const auto& [family, tied] :
       {std::pair{Family::kQwen2, false}, std::pair{Family::kQwen3, true}}) {
    auto model = random_tiny_model(family, tied, 51);
    const auto ids = random_ids(2, 8, model->config().vocab_size, 52);
    std::set<std::string> plain_names;
    for (const auto& [name, t] : model->state_tensors()) plain_names.insert(name);
    at::NoGradGuard no_grad;
    const auto base_logits = model->forward(ids);

    const auto wrapped = rqat::train::attach_lora(*model, lora_options(4, 16, 0.1, 3), {});
    randomize_all(*model, 53, 0.1);
    model->eval();  // the adapters have dropout: compare deterministic forwards
    const auto lora_logits = model->forward(ids);
    REQUIRE(max_abs_diff(lora_logits, base_logits) > 1e-2);  // the adapters matter

    const auto merged = rqat::train::merge_lora(*model);
    CHECK(merged == wrapped);
    CHECK(adapters(*model).empty());
    for (const auto& slot : model->linear_layers(true))
      CHECK(std::dynamic_pointer_cast<DenseLinear>(*slot.layer) != nullptr);
    std::set<std::string> merged_names;
    for (const auto& [name, t] : model->state_tensors()) {
      merged_names.insert(name);
      CHECK(t.scalar_type() == at::kFloat);
    }
    CHECK(merged_names == plain_names);

    const auto merged_logits = model->forward(ids);
    // Relative to the logits' scale: (W + s B A) x vs W x + s B (A x) differ by float32 rounding.
    CHECK(max_abs_diff(merged_logits, lora_logits) <= 1e-5 * max_abs(lora_logits));
    CHECK(rqat::train::merge_lora(*model).empty());

    TempDir dir("lora_merged");
    rqat::model::save_causal_lm(*model, dir.path());
    auto loaded = rqat::quant::load_model(dir.path());
    CHECK(at::equal(loaded->forward(ids), merged_logits));
  }
}

TEST_CASE("dropout is off in eval mode, inverted and reproducible from the seed in training",
          "[lora][dropout]") {
  // A zero base and A = B = I with alpha = rank make the layer the identity plus dropout, so its
  // output shows the mask: each element is 0 or x / (1 - p).
  const int64_t d = 32;
  const double p = 0.25;
  auto make = [&](uint64_t seed, const std::string& name) {
    auto base = std::make_shared<DenseLinear>(d, d, false, at::TensorOptions(at::kFloat));
    base->assign_weight(at::zeros({d, d}));
    auto lora = std::make_shared<LoraLinear>(base, lora_options(d, d, p, seed), name);
    at::NoGradGuard no_grad;
    lora->lora_A().copy_(at::eye(d));
    lora->lora_B().copy_(at::eye(d));
    return lora;
  };
  auto gen = at::make_generator<at::CPUGeneratorImpl>(61);
  const auto x = at::randn({64, d}, gen);

  auto layer = make(9, "model.layers.0.mlp.up_proj");
  layer->eval();
  CHECK(max_abs_diff(layer->forward(x), x) < 1e-6);
  layer->train();
  const auto y1 = layer->forward(x).detach();
  const auto y2 = layer->forward(x).detach();
  const auto kept = y1.ne(0);
  const double dropped = static_cast<double>(kept.logical_not().sum().item<int64_t>());
  // Binomial(2048, 0.25): mean 512, standard deviation 19.6.
  CHECK(std::abs(dropped - 512.0) < 6 * 19.6);
  CHECK(max_abs_diff(y1.masked_select(kept), (x / (1 - p)).masked_select(kept)) < 1e-5);
  CHECK_FALSE(at::equal(y1, y2));  // each forward draws a new mask

  auto same = make(9, "model.layers.0.mlp.up_proj");
  same->train();
  CHECK(at::equal(same->forward(x), y1));
  CHECK(at::equal(same->forward(x), y2));
  auto other_seed = make(10, "model.layers.0.mlp.up_proj");
  other_seed->train();
  CHECK_FALSE(at::equal(other_seed->forward(x), y1));
  auto other_name = make(9, "model.layers.1.mlp.up_proj");
  other_name->train();
  CHECK_FALSE(at::equal(other_name->forward(x), y1));

  // The global generator plays no part.
  at::manual_seed(1);
  auto a = make(9, "n");
  a->train();
  const auto ya = a->forward(x);
  at::manual_seed(2);
  auto b = make(9, "n");
  b->train();
  CHECK(at::equal(b->forward(x), ya));
}

TEST_CASE("dropout masks are replayed when activation checkpointing recomputes a block",
          "[lora][dropout]") {
  // The same model and adapters trained with and without checkpointing must get the same
  // gradients over two steps; a recompute drawing fresh masks would make them differ.
  auto run = [](bool checkpointing, double dropout) {
    auto model = random_tiny_model(Family::kQwen3, /*tied=*/false, 71);
    rqat::train::attach_lora(*model, lora_options(4, 8, dropout, 72), {});
    randomize_all(*model, 73, 0.1);
    model->set_activation_checkpointing(checkpointing);
    model->train();
    std::vector<std::vector<at::Tensor>> grads;
    for (int step = 0; step < 2; ++step) {
      const auto ids = random_ids(2, 7, model->config().vocab_size, 74 + step);
      for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
      model->forward(ids).pow(2).mean().backward();
      std::vector<at::Tensor> step_grads;
      for (const auto& lora : adapters(*model)) {
        step_grads.push_back(lora->lora_A().grad().clone());
        step_grads.push_back(lora->lora_B().grad().clone());
      }
      grads.push_back(step_grads);
    }
    return grads;
  };
  const auto plain = run(false, 0.3), checkpointed = run(true, 0.3), no_dropout = run(false, 0.0);
  REQUIRE(plain.size() == checkpointed.size());
  for (size_t s = 0; s < plain.size(); ++s) {
    double differs_from_no_dropout = 0;
    for (size_t i = 0; i < plain[s].size(); ++i) {
      INFO("step " << s << " tensor " << i);
      CHECK(max_abs_diff(checkpointed[s][i], plain[s][i]) <= 1e-5 * (max_abs(plain[s][i]) + 1e-6));
      differs_from_no_dropout =
          std::max(differs_from_no_dropout, max_abs_diff(plain[s][i], no_dropout[s][i]));
    }
    CHECK(differs_from_no_dropout > 1e-4);  // dropout was active
  }
}

TEST_CASE("target_modules select linear layers by full-name regex; bad input is refused",
          "[lora][targets]") {
  const std::string b0 = "model.layers.0.", b1 = "model.layers.1.";
  {
    auto model = random_tiny_model(Family::kQwen2, false, 81);
    const auto names =
        rqat::train::attach_lora(*model, lora_options(2, 4), {R"(.*\.self_attn\.(q|v)_proj)"});
    CHECK(names == std::vector<std::string>{b0 + "self_attn.q_proj", b0 + "self_attn.v_proj",
                                            b1 + "self_attn.q_proj", b1 + "self_attn.v_proj"});
    CHECK(adapters(*model).size() == 4);
    CHECK(rqat::train::trainable_parameters(*model).size() == 8);
  }
  {
    auto model = random_tiny_model(Family::kQwen2, false, 82);
    const auto names = rqat::train::attach_lora(*model, lora_options(2, 4),
                                                {R"(model\.layers\.1\.mlp\..*)", "lm_head"});
    CHECK(names == std::vector<std::string>{b1 + "mlp.gate_proj", b1 + "mlp.up_proj",
                                            b1 + "mlp.down_proj", "lm_head"});
    CHECK(std::dynamic_pointer_cast<LoraLinear>(model->lm_head) != nullptr);
  }
  {
    auto model = random_tiny_model(Family::kLlama, false, 83);
    const auto names = rqat::train::attach_lora(*model, lora_options(2, 4),
                                                rqat::train::default_lora_target_modules());
    CHECK(names.size() == 14);
    CHECK(std::find(names.begin(), names.end(), "lm_head") == names.end());
  }

  auto model = random_tiny_model(Family::kQwen2, false, 84);
  // Full-name matching, as PEFT's re.fullmatch: a bare suffix matches nothing.
  require_error([&] { rqat::train::attach_lora(*model, lora_options(2, 4), {"q_proj"}); },
                {"--lora-target-modules", "'q_proj'", "matches no linear layer"});
  require_error([&] { rqat::train::attach_lora(*model, lora_options(2, 4), {"(q_proj"}); },
                {"--lora-target-modules", "(q_proj", "not a valid regular expression"});
  require_error([&] { rqat::train::attach_lora(*model, lora_options(0, 4), {}); }, {"--lora-rank"});
  require_error([&] { rqat::train::attach_lora(*model, lora_options(2, 0), {}); },
                {"--lora-alpha"});
  require_error([&] { rqat::train::attach_lora(*model, lora_options(2, 4, 1.0), {}); },
                {"--lora-dropout"});
  require_error([&] { rqat::train::attach_lora(*model, lora_options(2, 4, -0.1), {}); },
                {"--lora-dropout"});
  // Failed attempts change nothing: everything is still trainable and unwrapped.
  CHECK(adapters(*model).empty());
  CHECK(rqat::train::trainable_parameters(*model).size() == model->parameters().size());
  rqat::train::attach_lora(*model, lora_options(2, 4), {});
  require_error([&] { rqat::train::attach_lora(*model, lora_options(2, 4), {".*q_proj"}); },
                {"model.layers.0.self_attn.q_proj", "already has a LoRA adapter"});
  require_error([] { LoraLinear(nullptr, lora_options(2, 4), "x.y"); }, {"x.y", "base layer"});
}

TEST_CASE("the adapter exports under PEFT's names with a PEFT adapter_config.json",
          "[lora][export]") {
  auto model = random_tiny_model(Family::kQwen2, false, 91);
  const std::vector<std::string> targets{R"(.*\.(q|v)_proj)"};
  const auto options = lora_options(4, 8, 0.05, 92);
  const auto names = rqat::train::attach_lora(*model, options, targets);
  randomize_all(*model, 93, 0.1);

  const auto state = rqat::train::lora_state(*model);
  REQUIRE(state.size() == 2 * names.size());
  const auto loras = adapters(*model);
  for (size_t i = 0; i < names.size(); ++i) {
    CHECK(state[2 * i].first == "base_model.model." + names[i] + ".lora_A.weight");
    CHECK(state[2 * i + 1].first == "base_model.model." + names[i] + ".lora_B.weight");
    CHECK(at::equal(state[2 * i].second, loras[i]->lora_A()));
    CHECK(at::equal(state[2 * i + 1].second, loras[i]->lora_B()));
  }

  TempDir dir("lora_adapter");
  rqat::train::save_lora_adapter(*model, options, targets, "Qwen/Qwen3-0.6B", dir.path());
  const auto file = rqat::io::SafetensorsFile::open(dir / "adapter_model.safetensors");
  REQUIRE(file->entries().size() == state.size());
  for (const auto& [name, tensor] : state) {
    INFO(name);
    REQUIRE(file->contains(name));
    CHECK(at::equal(file->tensor(name), tensor));
  }
  const auto config = rqat::io::read_json_file(dir / "adapter_config.json");
  CHECK(config.at("peft_type") == "LORA");
  CHECK(config.at("task_type") == "CAUSAL_LM");
  CHECK(config.at("r") == 4);
  CHECK(config.at("lora_alpha") == 8.0);
  CHECK(config.at("lora_dropout") == 0.05);
  CHECK(config.at("base_model_name_or_path") == "Qwen/Qwen3-0.6B");
  CHECK(config.at("target_modules").get<std::vector<std::string>>() == names);

  require_error(
      [&] {
        rqat::train::save_lora_adapter(*model, lora_options(8, 8, 0.05), targets, "b",
                                       dir / "other");
      },
      {"rank 4", "model.layers.0.self_attn.q_proj"});
  require_error(
      [&] { rqat::train::save_lora_adapter(*model, options, {".*q_proj"}, "b", dir / "other"); },
      {"--lora-target-modules", "model.layers.0.self_attn.v_proj"});
  auto plain = random_tiny_model(Family::kQwen2, false, 94);
  require_error(
      [&] { rqat::train::save_lora_adapter(*plain, options, targets, "b", dir / "none"); },
      {"no LoRA adapter"});
}
