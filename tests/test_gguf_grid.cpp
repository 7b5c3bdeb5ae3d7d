// llama.cpp's block types as quantization grids (quant/gguf/grid.h), on fresh random rows and
// awkward ones (an all-zero row, one huge outlier, negative-only, values whose fp16 scales are
// denormal or zero):
//   - a GGUF tensor taken apart into a grid weight dequantizes to the very values of the blocks,
//     and puts back together into the same bytes;
//   - any codes on the grid (random ones, as training leaves them) write blocks that dequantize to
//     the grid weight's values exactly: the export loses nothing;
//   - the fake quantizer's forward on a grid equals its to_quantized() weight bit for bit, with
//     the clipped straight-through gradient, and a trained layer still exports exactly;
//   - GPTQ on a grid keeps llama.cpp's scales, chooses codes on them, and beats RTN on the grid
//     (llama.cpp's own reference quantization) in the layer's output error;
//   - the spec, the quant state file and the refusals (wrong shapes, scales off the grid).
// Bit-for-bit agreement of the blocks with llama.cpp's own dequantizers is test_gguf_export.py's
// (for the reference quantizer's codes) and test_gguf_grid_cli.py's (for codes rqat chose).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "io/gguf_file.h"
#include "quant/fake_quant_linear.h"
#include "quant/gguf/blocks.h"
#include "quant/gguf/grid_blocks.h"
#include "quant/gptq.h"
#include "quant/quant_state.h"
#include "quant/rtn.h"
#include "test_util.h"

using namespace rqat;
using io::GgufType;

namespace {

const GgufType kGridTypes[] = {GgufType::kQ8_0, GgufType::kQ4_0, GgufType::kQ4_1, GgufType::kQ2_K,
                               GgufType::kQ3_K, GgufType::kQ4_K, GgufType::kQ5_K, GgufType::kQ6_K};

// Gaussian rows of 512 values, then the awkward ones.
at::Tensor awkward_rows(at::Generator& gen) {
  auto w = at::randn({9, 512}, gen) * 0.05;
  w[0].zero_();
  w[1][7] = 10.0;  // 200 times the others
  w[2] = -w[2].abs();
  w[3] *= 1e-4;                    // fp16-denormal block scales
  w[4] *= 1e-9;                    // scales that round to 0
  w[5].narrow(0, 0, 256).zero_();  // a zero block beside a normal one
  return w;
}

// "" when equal, else where the first differing byte lies (block and byte within it).
std::string first_difference(GgufType type, const std::string& a, const std::string& b) {
  if (a == b) return "";
  const int64_t block_bytes = io::gguf_type_info(type).block_bytes;
  size_t i = 0;
  while (i < std::min(a.size(), b.size()) && a[i] == b[i]) ++i;
  return fmt::format("sizes {} / {}; first difference in block {} at byte {}", a.size(), b.size(),
                     static_cast<int64_t>(i) / block_bytes, static_cast<int64_t>(i) % block_bytes);
}

}  // namespace

TEST_CASE("GGUF blocks taken apart as a grid weight come back as the same values and bytes",
          "[gguf_grid]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto w = awkward_rows(gen);
  for (const auto type : kGridTypes) {
    INFO(enum_name(type));
    const std::string bytes = quant::quantize_gguf_tensor(type, w);
    const auto grid = quant::gguf_grid_from_blocks(type, bytes, w.size(0), w.size(1));
    grid.validate("grid");
    const auto info = quant::gguf_grid_info(type);
    CHECK(grid.bits == info.bits);
    CHECK(grid.group_size == info.sub_block);
    CHECK((grid.scales >= 0).all().item<bool>());
    CHECK(at::equal(grid.dequantize(), quant::dequantize_gguf_tensor(type, bytes, w.sizes())));
    // Bytes too, except where a block's fp16 scale d underflowed to 0 (rows 3 and 4: values of 1e-4
    // and 1e-9): there llama.cpp still writes the sub-block scales it computed before rounding d,
    // integers that multiply to 0 and that a grid weight (all of whose values are 0) does not keep.
    const auto kept = at::tensor(std::vector<int64_t>{0, 1, 2, 5, 6, 7, 8});
    const auto w_kept = w.index_select(0, kept);
    const std::string kept_bytes = quant::quantize_gguf_tensor(type, w_kept);
    const auto kept_grid = quant::gguf_grid_from_blocks(type, kept_bytes, w_kept.size(0), 512);
    CHECK(first_difference(type, quant::gguf_grid_to_blocks(type, kept_grid, "grid"), kept_bytes) ==
          "");
    // gguf_grid_quantize is the same thing in one call (RTN on the grid).
    quant::QuantSpec spec;
    spec.use_gguf_grid(type);
    const auto rtn = quant::rtn_quantize(w, spec);
    CHECK(at::equal(rtn.dequantize(), grid.dequantize()));
  }
}

TEST_CASE("any codes on a GGUF grid export to blocks with exactly the grid's values",
          "[gguf_grid]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(12);
  const auto w = awkward_rows(gen);
  for (const auto type : kGridTypes) {
    INFO(enum_name(type));
    auto grid = quant::gguf_grid_quantize(type, w);
    const int64_t max_code = (int64_t{1} << grid.bits) - 1;
    grid.codes = at::randint(0, max_code + 1, grid.codes.sizes(), gen, at::kByte);
    const std::string bytes = quant::gguf_grid_to_blocks(type, grid, "grid");
    const auto read = quant::dequantize_gguf_tensor(type, bytes, w.sizes());
    CHECK(at::equal(read, grid.dequantize()));
    // And the mirrored zero points are really used: q4_0 picks negative steps for rows whose
    // largest magnitude is positive, which the grid stores as positive steps, mirrored.
    if (type == GgufType::kQ4_0) CHECK((grid.zeros == 7).any().item<bool>());
  }
}

TEST_CASE("the fake quantizer on a GGUF grid: forward equals the exported weight, STE gradient",
          "[gguf_grid]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(13);
  for (const auto type : kGridTypes) {
    INFO(enum_name(type));
    const auto w = at::randn({6, 256}, gen) * 0.05;
    const auto grid = quant::gguf_grid_quantize(type, w);
    quant::FakeQuantLinear layer(w, grid);
    // Move the master weight as training would, some of it outside the grid's range.
    {
      at::NoGradGuard no_grad;
      layer.weight().add_(at::randn(w.sizes(), gen) * 0.02);
    }
    const auto wq = layer.fake_quantized_weight();
    const auto exported = layer.to_quantized();
    CHECK(exported.gguf_grid == type);
    CHECK(at::equal(wq.detach(), exported.dequantize()));
    const std::string bytes = quant::gguf_grid_to_blocks(type, exported, "layer");
    CHECK(at::equal(quant::dequantize_gguf_tensor(type, bytes, w.sizes()), exported.dequantize()));
    // Codes moved: the trained layer is not the initial one.
    CHECK(!at::equal(exported.codes, grid.codes));
    // Clipped STE: gradient 1 where the unclamped code is in range, 0 where it is clamped.
    wq.sum().backward();
    const auto grad = layer.weight().grad();
    CHECK(((grad == 0) | (grad == 1)).all().item<bool>());
    const auto index = exported.g_idx.to(at::kLong);
    const auto s = exported.scales.index_select(1, index);
    const auto o = exported.zeros.index_select(1, index);
    const auto info = quant::gguf_grid_info(type);
    const auto master = layer.weight().detach();
    const auto raw = info.min_form ? at::round((master + o) / s) : at::round(master / s) + o;
    const auto inside = (raw >= 0) & (raw <= (1 << info.bits) - 1) & (s > 0);
    CHECK(at::equal(grad == 1, inside));
    CHECK((grad == 0).any().item<bool>());
    quant::FakeQuantOptions clip;
    clip.mode = quant::ScaleMode::kLearnableClip;
    test::require_error([&] { quant::FakeQuantLinear(w, grid, std::nullopt, clip); },
                        {"--scale-mode clip", "grid", "frozen or lsq"});
  }
}

TEST_CASE("LSQ on a GGUF grid learns the format's fp16 scales and still exports exactly",
          "[gguf_grid]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(15);
  for (const auto type : kGridTypes) {
    INFO(enum_name(type));
    const auto info = quant::gguf_grid_info(type);
    const auto w = awkward_rows(gen);
    const auto grid = quant::gguf_grid_quantize(type, w);
    quant::FakeQuantOptions lsq;
    lsq.mode = quant::ScaleMode::kLsq;
    quant::FakeQuantLinear layer(w, grid, std::nullopt, lsq);
    quant::FakeQuantLinear frozen(w, grid);
    // Learning changes nothing in the forward until a scale moves.
    CHECK(at::equal(layer.fake_quantized_weight().detach(), frozen.fake_quantized_weight()));
    {
      at::NoGradGuard no_grad;
      const auto noise = at::randn(w.sizes(), gen) * 0.02;
      layer.weight().add_(noise);
      frozen.weight().add_(noise);
    }
    const auto upstream = at::randn(w.sizes(), gen);
    (layer.fake_quantized_weight() * upstream).sum().backward();

    // The closed form: per weight, with its step s, offset o and code q (clamped),
    //   zero form: d w_q / d s = q - o - w / s inside the range, q - o where clamped;
    //   min form:  d w_q / d s = q - (w + o) / s inside, q where clamped; d w_q / d min = 0 / -1;
    // summed over the weights that share the learned value (K-quants: a super-block, each
    // weight's term times its sub-block's integer).
    const auto state = layer.to_quantized();
    const auto index = state.g_idx.to(at::kLong);
    // The codes in float32, as the layer rounds (a tie could round the other way in float64).
    const auto s32 = state.scales.index_select(1, index), o32 = state.zeros.index_select(1, index);
    const auto master32 = layer.weight().detach();
    const double max_code = (1 << info.bits) - 1;
    const auto live = s32 > 0;
    const auto raw =
        info.min_form ? at::round((master32 + o32) / s32) : at::round(master32 / s32) + o32;
    const auto inside = live & (raw >= 0) & (raw <= max_code);
    const auto s = s32.to(at::kDouble), o = o32.to(at::kDouble), master = master32.to(at::kDouble);
    const auto q =
        at::where(live, at::clamp(raw, 0, max_code), info.min_form ? 0 * o32 : o32).to(at::kDouble);
    const auto safe_s = at::where(live, s, at::ones_like(s));
    const auto ds = info.min_form ? at::where(inside, q - (master + o) / safe_s, q)
                                  : at::where(inside, q - o - master / safe_s, q - o);
    const auto dmin = at::where(inside, at::zeros_like(s), -at::ones_like(s));
    const auto g = upstream.to(at::kDouble);
    const int64_t rows = w.size(0), cols = w.size(1);
    const auto per = [&](const at::Tensor& e, int64_t n) {  // sums of n consecutive columns
      return e.reshape({rows, cols / n, n}).sum(2);
    };
    const auto close = [](const at::Tensor& got, const at::Tensor& want) {
      const double scale = want.abs().max().item<double>() + 1e-30;
      return (got.to(at::kDouble) - want).abs().max().item<double>() / scale;
    };
    // Each parameter's gradient within 1e-5 of the largest (float32 sums of 256 terms).
    // The steps are learned as logs of their magnitudes: d / d log|d| = |d| d / d|d|.
    const auto params = layer.named_parameters();
    CHECK(!layer.scales().requires_grad());
    if (info.super_scales) {
      const auto log_super = params["log_super_scales"];
      REQUIRE(log_super.grad().defined());
      const auto magnitude = log_super.detach().exp().to(at::kDouble);
      const auto mult = layer.named_buffers()["grid_multipliers"].to(at::kDouble);
      const auto expand = [&](const at::Tensor& m) { return m.index_select(1, index); };
      const auto want_d = per(g * ds * expand(mult.select(2, 0)), info.block);
      CHECK(close(log_super.grad().select(2, 0), magnitude.select(2, 0) * want_d) < 1e-5);
      if (info.min_form) {
        const auto want_m = per(g * dmin * expand(mult.select(2, 1)), info.block);
        CHECK(close(log_super.grad().select(2, 1), magnitude.select(2, 1) * want_m) < 1e-5);
      }
    } else {
      const auto log_scales = params["log_scales"];
      REQUIRE(log_scales.grad().defined());
      // A block whose step is 0 (an all-zero block) has nothing to learn.
      const auto want = per(g * ds * live, info.sub_block);
      CHECK(close(log_scales.grad(), log_scales.detach().exp().to(at::kDouble) * want) < 1e-5);
      if (info.min_form)
        CHECK(close(layer.zeros().grad(), per(g * dmin, info.sub_block)) < 1e-5);
      else
        CHECK(!layer.zeros().requires_grad());
    }
    CHECK(close(layer.weight().grad(), g * inside) == 0);

    // An optimizer's step on the scales: the next forward rounds them to fp16, the export writes
    // those, and llama.cpp's dequantization of the blocks is the forward's weight bit for bit.
    {
      at::NoGradGuard no_grad;
      for (auto& p : layer.parameters())
        if (p.requires_grad() && p.grad().defined() && p.dim() >= 2)
          p.sub_(1e-2 * p.grad().sign() * p.abs());  // a few fp16 steps
    }
    const auto wq = layer.fake_quantized_weight().detach();
    const auto trained = layer.to_quantized();
    CHECK(at::equal(wq, trained.dequantize()));
    CHECK(!at::equal(trained.scales, grid.scales));
    const std::string bytes = quant::gguf_grid_to_blocks(type, trained, "layer");
    CHECK(at::equal(quant::dequantize_gguf_tensor(type, bytes, w.sizes()), wq));
    if (info.super_scales)
      CHECK(at::equal(trained.super_scales, trained.super_scales.to(at::kHalf).to(at::kFloat)));
    else
      CHECK(at::equal(trained.scales, trained.scales.to(at::kHalf).to(at::kFloat)));

    // LSQ's gradient scale divides the scales' gradients by sqrt(values sharing them * max code).
    lsq.lsq_grad_scale = true;
    quant::FakeQuantLinear scaled(w, grid, std::nullopt, lsq);
    quant::FakeQuantOptions lsq_plain;
    lsq_plain.mode = quant::ScaleMode::kLsq;
    quant::FakeQuantLinear plain(w, grid, std::nullopt, lsq_plain);
    for (auto* l : {&scaled, &plain}) (l->fake_quantized_weight() * upstream).sum().backward();
    const std::string learned = info.super_scales ? "log_super_scales" : "log_scales";
    const double shared = static_cast<double>(info.super_scales ? info.block : info.sub_block);
    CHECK(close(scaled.named_parameters()[learned].grad(),
                plain.named_parameters()[learned].grad().to(at::kDouble) /
                    std::sqrt(shared * max_code)) < 1e-6);

    // A step learned down to 0 in fp16 stops training with a message.
    {
      at::NoGradGuard no_grad;
      layer.named_parameters()[learned].fill_(-30);
    }
    test::require_error(
        [&] { layer.fake_quantized_weight(); },
        {"fake_quant_linear", "no longer finite and > 0", "lower the learning rate"});
  }
}

TEST_CASE("GPTQ on a GGUF grid keeps llama.cpp's scales and beats RTN on the grid", "[gguf_grid]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(14);
  // Correlated inputs, so that error feedback has something to exploit.
  const auto mix = at::randn({256, 256}, gen) * 0.2 + at::eye(256);
  const auto x = at::matmul(at::randn({2048, 256}, gen), mix);
  const auto h = 2 * at::matmul(x.t(), x) / x.size(0);
  const auto w = at::randn({32, 256}, gen) * 0.05;
  const auto output_error = [&](const at::Tensor& q) {
    const auto d = (w - q).to(at::kDouble);
    return (at::matmul(d, h.to(at::kDouble)) * d).sum().item<double>();
  };
  for (const auto type : kGridTypes) {
    INFO(enum_name(type));
    quant::QuantSpec spec;
    spec.use_gguf_grid(type);
    const auto rtn = quant::rtn_quantize(w, spec);
    for (const bool act_order : {false, true}) {
      quant::GptqOptions options;
      options.act_order = act_order;
      options.return_output = true;
      quant::GptqReport report;
      const auto q = quant::gptq_quantize(w, h.clone(), spec, options, &report);
      CHECK(q.gguf_grid == type);
      CHECK(at::equal(q.scales, rtn.scales));
      CHECK(at::equal(q.zeros, rtn.zeros));
      CHECK(at::equal(q.g_idx, rtn.g_idx));  // contiguous even with act-order
      CHECK(at::equal(report.output, q.dequantize()));
      const std::string bytes = quant::gguf_grid_to_blocks(type, q, "gptq");
      CHECK(at::equal(quant::dequantize_gguf_tensor(type, bytes, w.sizes()), q.dequantize()));
      const double gptq_error = output_error(q.dequantize()),
                   rtn_error = output_error(rtn.dequantize());
      std::cout << fmt::format("{} act_order={}: output error GPTQ {:.4e} / RTN {:.4e} = {:.3f}\n",
                               enum_name(type), act_order, gptq_error, rtn_error,
                               gptq_error / rtn_error);
      CHECK(gptq_error < rtn_error);
    }
  }
}

TEST_CASE("a GGUF grid in the spec and the quant state file", "[gguf_grid]") {
  quant::QuantSpec spec;
  spec.use_gguf_grid(GgufType::kQ3_K);
  CHECK(spec.bits == 3);
  CHECK(spec.group_size == 16);
  const auto json = spec.to_json();
  CHECK(json["grid"] == "gguf-q3_k");
  const auto back = quant::QuantSpec::from_json(json, "quant");
  CHECK(back.gguf_grid == GgufType::kQ3_K);
  CHECK(spec.describe() == "gguf-q3_k grid (W3, groups of 16)");
  auto wrong = json;
  wrong["bits"] = 4;
  test::require_error([&] { quant::QuantSpec::from_json(wrong, "quant"); },
                      {"quant.grid = gguf-q3_k", "3-bit", "quant.bits = 4"});
  test::require_error([] { quant::parse_gguf_grid("gguf-q7_k", "--grid"); },
                      {"--grid = 'gguf-q7_k'", "gguf-q4_k"});
  test::require_error([] { quant::parse_gguf_grid("gguf-f16", "--grid"); },
                      {"--grid", "gguf-q2_k"});

  auto gen = at::make_generator<at::CPUGeneratorImpl>(15);
  test::TempDir dir("gguf_grid");
  quant::QuantState state;
  state.spec = spec;
  state.layers["model.layers.0.mlp.up_proj"] =
      quant::gguf_grid_quantize(GgufType::kQ3_K, at::randn({4, 512}, gen));
  quant::save_quant_state(dir.path(), state);
  const auto loaded = quant::load_quant_state(dir.path());
  const auto& a = state.layers.begin()->second;
  const auto& b = loaded.layers.at("model.layers.0.mlp.up_proj");
  CHECK(b.gguf_grid == GgufType::kQ3_K);
  CHECK(at::equal(a.super_scales, b.super_scales));
  CHECK(quant::gguf_grid_to_blocks(GgufType::kQ3_K, a, "a") ==
        quant::gguf_grid_to_blocks(GgufType::kQ3_K, b, "b"));
}

TEST_CASE("GGUF grid refusals name the layer and what is off", "[gguf_grid]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(16);
  test::require_error(
      [&] {
        quant::gguf_grid_quantize(GgufType::kQ4_K, at::randn({2, 96}, gen));
      },
      {"96 values", "256-value", "q4_k"});
  auto grid = quant::gguf_grid_quantize(GgufType::kQ4_K, at::randn({2, 256}, gen));
  auto off = grid;
  off.scales = grid.scales * 1.001f;  // no longer fp16 d times an integer
  test::require_error([&] { quant::gguf_grid_to_blocks(GgufType::kQ4_K, off, "model.x"); },
                      {"model.x", "scale", "not storable in q4_k"});
  test::require_error([&] { quant::gguf_grid_to_blocks(GgufType::kQ5_K, grid, "model.x"); },
                      {"model.x", "not on the gguf-q5_k grid"});
  auto q40 = quant::gguf_grid_quantize(GgufType::kQ4_0, at::randn({2, 64}, gen));
  q40.zeros.fill_(5);
  test::require_error([&] { q40.validate("model.y"); }, {"model.y", "zero points are 8"});
}
