// The packed GPTQ checkpoint format: bit packing for 2/3/4/8 bits against a plain bit-stream
// reference and the reference packers' 3-bit interleave, v1/v2 zero-point storage, the refusals,
// and a model-level round trip (RTN codes made here -> export -> quant::load_model -> logits of the
// model with the dequantized weights). The hidden test "[gptq_export_fixture]" writes exports for
// tests/python/test_gptq_layout.py, which re-reads them with a numpy implementation of the layout.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/error.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "model/init.h"
#include "model/model_dir.h"
#include "generation/generation_engine.h"
#include "quant/gptq_checkpoint.h"
#include "quant/gptq_packing.h"
#include "quant/load_model.h"
#include "quant/packed_gptq_linear.h"
#include "test_util.h"

using namespace rqat;
using quant::GptqFormat;
using quant::QuantizedWeight;

namespace {

at::Generator generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// The plain definition of the layout: value i of a column occupies bits [i*bits, (i+1)*bits) of the
// column's little-endian bit stream, word w holding stream bits [32w, 32w+32).
at::Tensor reference_pack_rows(const at::Tensor& values, int bits) {
  const at::Tensor v = values.to(at::kLong).contiguous();
  const int64_t n = v.size(0), m = v.size(1);
  std::vector<uint32_t> words(static_cast<size_t>(n * bits / 32 * m), 0);
  const int64_t* vp = v.data_ptr<int64_t>();
  for (int64_t j = 0; j < m; ++j) {
    for (int64_t i = 0; i < n; ++i) {
      for (int b = 0; b < bits; ++b) {
        const uint32_t bit = (vp[i * m + j] >> b) & 1;
        const int64_t pos = i * bits + b;
        words[(pos / 32) * m + j] |= bit << (pos % 32);
      }
    }
  }
  at::Tensor out = at::empty({n * bits / 32, m}, at::kInt);
  std::memcpy(out.data_ptr<int32_t>(), words.data(), words.size() * sizeof(uint32_t));
  return out;
}

at::Tensor random_codes(int64_t n, int64_t m, int bits, uint64_t seed) {
  auto gen = generator(seed);
  return at::randint(0, int64_t{1} << bits, {n, m}, gen, at::kLong);
}

float fp16(float x) { return static_cast<float>(c10::Half(x)); }

// W[r, c] = (codes - zeros[g_idx]) * scales[g_idx], in plain loops (float32 like rqat).
at::Tensor plain_dequantize(const QuantizedWeight& q) {
  const int64_t out = q.codes.size(0), in = q.codes.size(1), groups = q.scales.size(1);
  const at::Tensor codes = q.codes.to(at::kLong).contiguous();
  const at::Tensor scales = q.scales.to(at::kFloat).contiguous();
  const at::Tensor zeros = q.zeros.to(at::kFloat).contiguous();
  const at::Tensor g_idx = q.g_idx.to(at::kLong).contiguous();
  at::Tensor w = at::empty({out, in}, at::kFloat);
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t c = 0; c < in; ++c) {
      const int64_t g = g_idx.data_ptr<int64_t>()[c];
      const float code = static_cast<float>(codes.data_ptr<int64_t>()[r * in + c]);
      w.data_ptr<float>()[r * in + c] = (code - zeros.data_ptr<float>()[r * groups + g]) *
                                        scales.data_ptr<float>()[r * groups + g];
    }
  }
  return w;
}

// Round-to-nearest quantization of w (out, in) the way GPTQ's quantizer does it (range including
// 0, scales rounded to float16 so that the export stores them exactly), with groups along the
// input; act_order assigns the groups over a random column permutation (as act-order does).
QuantizedWeight rtn(const at::Tensor& weight, int bits, int64_t group_size, bool sym,
                    bool act_order, uint64_t seed) {
  const at::Tensor w = weight.to(at::kFloat).contiguous();
  const int64_t out = w.size(0), in = w.size(1);
  const int64_t gs = group_size > 0 ? group_size : in;
  const int64_t groups = in / gs;
  const int64_t maxq = (int64_t{1} << bits) - 1;
  std::vector<int32_t> g_idx(in);
  if (act_order) {
    auto gen = generator(seed);
    const at::Tensor perm = at::randperm(in, gen, at::kLong);
    for (int64_t k = 0; k < in; ++k) g_idx[perm.data_ptr<int64_t>()[k]] = int32_t(k / gs);
  } else {
    for (int64_t c = 0; c < in; ++c) g_idx[c] = int32_t(c / gs);
  }
  QuantizedWeight q;
  q.bits = bits;
  q.group_size = group_size;
  q.codes = at::empty({out, in}, at::kByte);
  q.scales = at::empty({out, groups}, at::kFloat);
  q.zeros = at::empty({out, groups}, at::kFloat);
  q.g_idx = at::from_blob(g_idx.data(), {in}, at::kInt).clone();
  const float* wp = w.data_ptr<float>();
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      float lo = 0.0f, hi = 0.0f;
      for (int64_t c = 0; c < in; ++c) {
        if (g_idx[c] != g) continue;
        lo = std::min(lo, wp[r * in + c]);
        hi = std::max(hi, wp[r * in + c]);
      }
      float scale, zero;
      if (sym) {
        const float amax = std::max(-lo, hi);
        scale = fp16(2.0f * amax / float(maxq));
        zero = float(int64_t{1} << (bits - 1));
      } else {
        scale = fp16((hi - lo) / float(maxq));
        zero = std::clamp(std::nearbyint(-lo / scale), 0.0f, float(maxq));
      }
      q.scales.data_ptr<float>()[r * groups + g] = scale;
      q.zeros.data_ptr<float>()[r * groups + g] = zero;
      for (int64_t c = 0; c < in; ++c) {
        if (g_idx[c] != g) continue;
        const float code =
            std::clamp(std::nearbyint(wp[r * in + c] / scale) + zero, 0.0f, float(maxq));
        q.codes.data_ptr<uint8_t>()[r * in + c] = static_cast<uint8_t>(code);
      }
    }
  }
  return q;
}

// A model whose every linear dimension is a multiple of 32, so 3-bit packing applies everywhere;
// qwen2 has q/k/v biases, which the export must keep.
std::shared_ptr<model::CausalLM> packable_model(uint64_t seed) {
  const io::Json j = {{"model_type", "qwen2"},
                      {"hidden_size", 64},
                      {"intermediate_size", 128},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},
                      {"vocab_size", 101},
                      {"rms_norm_eps", 1e-6},
                      {"tie_word_embeddings", false},
                      {"max_position_embeddings", 128},
                      {"rope_theta", 10000.0}};
  auto m = std::make_shared<model::CausalLM>(model::ModelConfig::from_json(j, "packable"),
                                             at::TensorOptions(at::kFloat));
  model::init_random(*m, seed, /*std=*/0.2);
  auto gen = generator(seed + 7);
  torch::NoGradGuard no_grad;
  for (auto& p : m->named_parameters())
    if (p.key().ends_with(".bias")) p.value().copy_(at::randn(p.value().sizes(), gen) * 0.1);
  return m;
}

struct ExportCase {
  std::string tag;
  int bits;
  int64_t group_size;
  bool sym;
  bool act_order;
  GptqFormat format;
  std::vector<std::string> left_dense;  // linear layers kept in full precision
};

const std::vector<ExportCase>& export_cases() {
  static const std::vector<ExportCase> cases = {
      {"w2_g32_asym_v1", 2, 32, false, false, GptqFormat::kV1, {}},
      {"w3_g32_asym_actorder_v2", 3, 32, false, true, GptqFormat::kV2, {}},
      {"w3_perchannel_sym_v1", 3, -1, true, false, GptqFormat::kV1, {}},
      {"w4_g32_asym_v1_partial",
       4,
       32,
       false,
       false,
       GptqFormat::kV1,
       {"model.layers.1.mlp.down_proj"}},
      {"w8_g64_asym_actorder_v1", 8, 64, false, true, GptqFormat::kV1, {}},
  };
  return cases;
}

struct Exported {
  std::shared_ptr<model::CausalLM> reference;  // dense model with the dequantized weights
  std::map<std::string, QuantizedWeight> layers;
  quant::GptqExportSummary summary;
};

// Quantizes the packable model as the case says, exports it to `dir`, and puts the plainly
// dequantized weights into the (dense) model, which becomes the reference.
Exported export_case(const ExportCase& c, const std::filesystem::path& dir, uint64_t seed,
                     uint64_t max_shard_bytes = 5'000'000'000) {
  Exported e;
  e.reference = packable_model(seed);
  uint64_t layer_seed = seed * 1000;
  for (const auto& slot : e.reference->linear_layers()) {
    if (std::find(c.left_dense.begin(), c.left_dense.end(), slot.name) != c.left_dense.end())
      continue;
    QuantizedWeight q = rtn((*slot.layer)->effective_weight(), c.bits, c.group_size, c.sym,
                            c.act_order, ++layer_seed);
    // v1 cannot store a zero point of 0 (see the refusal test); min-max groups of these random
    // weights always straddle 0 with room, so this holds without adjusting anything.
    if (c.format == GptqFormat::kV1 && !c.sym) REQUIRE(q.zeros.min().item<float>() >= 1.0f);
    e.layers.emplace(slot.name, std::move(q));
  }
  quant::QuantSpec spec;
  spec.bits = c.bits;
  spec.group_size = c.group_size;
  spec.symmetric = c.sym;
  quant::GptqExportOptions options;
  options.format = c.format;
  options.method = "rtn";
  options.max_shard_bytes = max_shard_bytes;
  e.summary = quant::export_gptq_checkpoint(*e.reference, e.layers, spec, dir, options);
  torch::NoGradGuard no_grad;
  for (const auto& slot : e.reference->linear_layers()) {
    auto it = e.layers.find(slot.name);
    if (it != e.layers.end()) (*slot.layer)->effective_weight().copy_(plain_dequantize(it->second));
  }
  return e;
}

at::Tensor random_ids(int64_t vocab, uint64_t seed) {
  auto gen = generator(seed);
  return at::randint(0, vocab, {2, 9}, gen, at::kLong);
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("GPTQ packing round-trips every bit width and matches the plain bit stream") {
  for (int bits : {2, 3, 4, 8}) {
    const int64_t multiple = quant::gptq_pack_multiple(bits);
    CHECK(multiple == (bits == 3 ? 32 : 32 / bits));
    const int64_t n = multiple * 3, m = 7;  // several words per column, odd column count
    const at::Tensor values = random_codes(n, m, bits, 100 + bits);
    INFO("bits " << bits);

    const at::Tensor rows = quant::pack_gptq_rows(values.to(at::kByte), bits, "rows");
    CHECK(rows.scalar_type() == at::kInt);
    CHECK(rows.sizes() == at::IntArrayRef{n * bits / 32, m});
    CHECK(at::equal(rows, reference_pack_rows(values, bits)));
    CHECK(at::equal(quant::unpack_gptq_rows(rows, bits, "rows").to(at::kLong), values));

    const at::Tensor columns_in = values.t().contiguous();  // (m, n): pack along dim 1
    const at::Tensor columns = quant::pack_gptq_columns(columns_in, bits, "columns");
    CHECK(columns.sizes() == at::IntArrayRef{m, n * bits / 32});
    CHECK(at::equal(columns, reference_pack_rows(values, bits).t()));
    CHECK(
        at::equal(quant::unpack_gptq_columns(columns, bits, "columns").to(at::kLong), columns_in));
  }
}

TEST_CASE("GPTQ 3-bit packing follows the reference packers' 10-1-10-1-10 word interleave") {
  // The reference packers' formulation, per 32-value block: values 0-9 in word 0, value 10 split
  // over the top 2 bits of word 0 and bit 0 of word 1, values 11-20 from bit 1 of word 1, value 21
  // over bit 31 of word 1 and bits 0-1 of word 2, values 22-31 from bit 2 of word 2.
  const at::Tensor values = random_codes(64, 3, 3, 7);
  const at::Tensor packed = quant::pack_gptq_rows(values, 3, "interleave");
  for (int64_t col = 0; col < 3; ++col) {
    for (int64_t block = 0; block < 2; ++block) {
      auto v = [&](int64_t j) { return uint32_t(values[block * 32 + j][col].item<int64_t>()); };
      uint32_t w0 = 0, w1 = 0, w2 = 0;
      for (int j = 0; j < 10; ++j) w0 |= v(j) << (3 * j);
      w0 |= v(10) << 30;
      w1 |= (v(10) >> 2) & 1;
      for (int j = 11; j < 21; ++j) w1 |= v(j) << (3 * (j - 11) + 1);
      w1 |= v(21) << 31;
      w2 |= (v(21) >> 1) & 3;
      for (int j = 22; j < 32; ++j) w2 |= v(j) << (3 * (j - 22) + 2);
      CHECK(uint32_t(packed[block * 3 + 0][col].item<int32_t>()) == w0);
      CHECK(uint32_t(packed[block * 3 + 1][col].item<int32_t>()) == w1);
      CHECK(uint32_t(packed[block * 3 + 2][col].item<int32_t>()) == w2);
    }
  }
}

TEST_CASE("GPTQ packing refuses what the loaders cannot read, naming the layer") {
  test::require_error([] { quant::pack_gptq_rows(random_codes(48, 2, 3, 1), 3, "x.qweight"); },
                      {"x.qweight", "48", "multiple of 32"});
  test::require_error([] { quant::pack_gptq_rows(random_codes(12, 2, 4, 1), 4, "x.qweight"); },
                      {"x.qweight", "multiple of 8"});
  test::require_error(
      [] {
        quant::pack_gptq_rows(at::full({8, 2}, 16, at::kLong), 4, "x");
      },
      {"x", "outside [0, 15]"});
  test::require_error([] { quant::pack_gptq_rows(random_codes(32, 2, 4, 1), 5, "x"); },
                      {"x", "5 bits"});
  test::require_error(
      [] {
        quant::unpack_gptq_rows(at::zeros({4, 2}, at::kInt), 3, "x");
      },
      {"x", "3-word blocks"});

  const auto layer = [](int64_t out, int64_t in, int bits, int64_t group) {
    return rtn(at::randn({out, in}, generator(3)), bits, group, false, false, 3);
  };
  test::require_error([&] { quant::pack_gptq_layer(layer(32, 48, 3, -1), "model.layers.0.q"); },
                      {"model.layers.0.q", "in_features 48", "multiple of 32"});
  test::require_error([&] { quant::pack_gptq_layer(layer(48, 64, 3, 32), "model.layers.0.k"); },
                      {"model.layers.0.k", "out_features 48"});
  // Uneven groups (stories260K's down projection has 172 inputs) are refused at export.
  QuantizedWeight uneven = layer(16, 96, 4, 96);
  uneven.group_size = 64;
  uneven.scales = at::ones({16, 2});
  uneven.zeros = at::full({16, 2}, 8.0);
  uneven.g_idx = at::arange(96, at::kInt).div(64, "floor").to(at::kInt);
  test::require_error([&] { quant::pack_gptq_layer(uneven, "model.layers.0.mlp.down_proj"); },
                      {"model.layers.0.mlp.down_proj", "group size 64", "96", "uneven"});

  QuantizedWeight not_half = layer(8, 32, 4, 32);
  not_half.scales[0][0] = 0.1f;  // 0.1 is not a float16 value
  test::require_error([&] { quant::pack_gptq_layer(not_half, "model.layers.1.o"); },
                      {"model.layers.1.o.scales", "float16"});
  quant::GptqPackOptions round;
  round.round_scales_to_fp16 = true;
  CHECK(quant::pack_gptq_layer(not_half, "o", round).scales[0][0].item<float>() == fp16(0.1f));
  QuantizedWeight huge = layer(8, 32, 4, 32);
  huge.scales[0][0] = 1e6f;  // overflows float16 even when rounding is allowed
  test::require_error([&] { quant::pack_gptq_layer(huge, "model.layers.1.o", round); },
                      {"model.layers.1.o.scales", "float16 range"});

  QuantizedWeight fractional_zero = layer(8, 32, 4, 32);
  fractional_zero.zeros[1][0] = 2.5f;
  test::require_error([&] { quant::pack_gptq_layer(fractional_zero, "model.layers.1.up"); },
                      {"model.layers.1.up", "integers"});

  // Reading back: a qweight that does not fit the layer names the tensor.
  const auto packed = quant::pack_gptq_layer(layer(8, 32, 4, 32), "gate");
  test::require_error(
      [&] { quant::unpack_gptq_layer(packed, 4, 32, GptqFormat::kV1, 64, 8, "model.layers.0.g"); },
      {"model.layers.0.g.qweight", "expected"});
  auto bad_g_idx = packed;
  bad_g_idx.g_idx = at::full({32}, 5, at::kInt);
  test::require_error(
      [&] { quant::unpack_gptq_layer(bad_g_idx, 4, 32, GptqFormat::kV1, 32, 8, "model.l.g"); },
      {"model.l.g.g_idx", "[0, 1)"});
}

TEST_CASE("GPTQ v1 stores zero points minus one, v2 as they are; both read back the same state") {
  for (int bits : {2, 3, 4, 8}) {
    INFO("bits " << bits);
    const int64_t out = 64, in = 64, group = 32;
    QuantizedWeight q = rtn(at::randn({out, in}, generator(20 + bits)), bits, group, false,
                            /*act_order=*/true, 20 + bits);
    // Zero points across the whole range a v1 file can hold (1 .. 2^bits - 1).
    const int64_t maxq = (int64_t{1} << bits) - 1;
    q.zeros = at::randint(1, maxq + 1, {out, in / group}, generator(40 + bits)).to(at::kFloat);
    const auto v1 = quant::pack_gptq_layer(q, "l", {GptqFormat::kV1});
    const auto v2 = quant::pack_gptq_layer(q, "l", {GptqFormat::kV2});
    CHECK(at::equal(v1.qweight, v2.qweight));
    CHECK(v1.scales.scalar_type() == at::kHalf);
    CHECK(v1.qzeros.sizes() == at::IntArrayRef{in / group, out * bits / 32});
    const at::Tensor stored_zeros = q.zeros.t().to(at::kLong);  // (groups, out)
    CHECK(at::equal(quant::unpack_gptq_columns(v1.qzeros, bits, "v1").to(at::kLong),
                    stored_zeros - 1));
    CHECK(at::equal(quant::unpack_gptq_columns(v2.qzeros, bits, "v2").to(at::kLong), stored_zeros));
    for (const auto& [packed, format] : {std::pair{v1, GptqFormat::kV1}, {v2, GptqFormat::kV2}}) {
      const QuantizedWeight back =
          quant::unpack_gptq_layer(packed, bits, group, format, in, out, "l");
      CHECK(at::equal(back.codes, q.codes));
      CHECK(at::equal(back.zeros, q.zeros));
      CHECK(at::equal(back.scales, q.scales));
      CHECK(at::equal(back.g_idx, q.g_idx));
      CHECK(at::equal(back.dequantize(), plain_dequantize(q)));
    }
  }

  // Zero point 0: v2 stores it; v1 refuses it, or wraps the field (2^bits - 1) when allowed, and
  // then reads it back per field as 2^bits, as vLLM's and transformers' kernels do.
  QuantizedWeight q = rtn(at::randn({8, 32}, generator(5)), 4, 32, false, false, 5);
  q.zeros[3][0] = 0.0f;
  test::require_error([&] { quant::pack_gptq_layer(q, "model.layers.0.v_proj"); },
                      {"model.layers.0.v_proj", "1 groups have zero point 0", "gptq_v2"});
  const auto v2 = quant::pack_gptq_layer(q, "v", {GptqFormat::kV2});
  CHECK(
      quant::unpack_gptq_layer(v2, 4, 32, GptqFormat::kV2, 32, 8, "v").zeros[3][0].item<float>() ==
      0.0f);
  const auto wrapped =
      quant::pack_gptq_layer(q, "v", {GptqFormat::kV1, /*allow_v1_zero_wrap=*/true});
  const at::Tensor fields = quant::unpack_gptq_columns(wrapped.qzeros, 4, "v");
  CHECK(fields[0][3].item<int>() == 15);
  CHECK(fields[0][2].item<int>() == q.zeros[2][0].item<float>() - 1);  // neighbour untouched
  CHECK(quant::unpack_gptq_layer(wrapped, 4, 32, GptqFormat::kV1, 32, 8, "v")
            .zeros[3][0]
            .item<float>() == 16.0f);
}

TEST_CASE("GPTQ export loads back into rqat with the dequantized weights and the same logits") {
  for (const auto& c : export_cases()) {
    INFO("case " << c.tag);
    test::TempDir tmp("gptq_" + c.tag);
    const Exported e = export_case(c, tmp.path(), 11);
    CHECK(e.summary.quantized_layers == int64_t(e.layers.size()));
    CHECK(e.summary.desc_act == c.act_order);
    CHECK(e.summary.max_scale_rounding == 0.0);

    // config.json: what transformers, GPTQModel and vLLM read.
    REQUIRE(quant::is_gptq_checkpoint(tmp.path()));
    const io::Json config = io::read_json_file(tmp / "config.json");
    const io::Json& qc = config["quantization_config"];
    CHECK(qc["quant_method"] == "gptq");
    CHECK(qc["bits"] == c.bits);
    CHECK(qc["group_size"] == c.group_size);
    CHECK(qc["sym"] == c.sym);
    CHECK(qc["desc_act"] == c.act_order);
    CHECK(qc["lm_head"] == false);
    CHECK(qc["checkpoint_format"] == rqat::enum_name(c.format));
    CHECK(qc.contains("dynamic") == !c.left_dense.empty());
    if (!c.left_dense.empty()) {
      CHECK(qc["dynamic"].contains("-:^model\\.layers\\.1\\.mlp\\.down_proj$"));
      CHECK_FALSE(qc.contains("modules_in_block_to_quantize"));  // blocks differ
    }
    const auto read = quant::read_gptq_config(config, "config.json");
    REQUIRE(read.has_value());
    CHECK(read->bits == c.bits);
    CHECK(read->format == c.format);

    // Stored tensors: packed dtypes and shapes; everything else dense.
    io::CheckpointReader checkpoint(tmp.path());
    const std::string q_proj = "model.layers.0.self_attn.q_proj";
    CHECK(checkpoint.tensor(q_proj + ".qweight").scalar_type() == at::kInt);
    CHECK(checkpoint.tensor(q_proj + ".qweight").sizes() == at::IntArrayRef{64 * c.bits / 32, 64});
    CHECK(checkpoint.tensor(q_proj + ".scales").scalar_type() == at::kHalf);
    CHECK(checkpoint.tensor(q_proj + ".g_idx").scalar_type() == at::kInt);
    CHECK(checkpoint.contains(q_proj + ".bias"));
    CHECK_FALSE(checkpoint.contains(q_proj + ".weight"));
    CHECK(checkpoint.contains("lm_head.weight"));
    for (const auto& name : c.left_dense) {
      CHECK(checkpoint.contains(name + ".weight"));
      CHECK_FALSE(checkpoint.contains(name + ".qweight"));
    }

    // Loading: quantized layers are packed and compute with exactly the dequantized weights.
    auto loaded = quant::load_model(tmp.path());
    for (const auto& slot : loaded->linear_layers()) {
      auto packed = std::dynamic_pointer_cast<quant::PackedGptqLinear>(*slot.layer);
      auto it = e.layers.find(slot.name);
      INFO(slot.name);
      REQUIRE((packed != nullptr) == (it != e.layers.end()));
      if (!packed) continue;
      CHECK(max_abs_diff(packed->effective_weight(), plain_dequantize(it->second)) == 0.0);
      const QuantizedWeight back = packed->quantized_weight();
      CHECK(at::equal(back.codes, it->second.codes));
      CHECK(at::equal(back.zeros, it->second.zeros));
      CHECK(at::equal(back.scales, it->second.scales));
      CHECK(at::equal(back.g_idx, it->second.g_idx));
    }
    const at::Tensor ids = random_ids(101, 3);
    torch::NoGradGuard no_grad;
    const at::Tensor expected = e.reference->forward(ids);
    const at::Tensor got = loaded->forward(ids);
    // The packed kernels sum in another order than the dense reference: float32 rounding, relative
    // to the logits' size (dequantized loads, test below, compute the same weights exactly).
    const double tolerance = 1e-5 * std::max(1.0, expected.abs().max().item<double>());
    CHECK(max_abs_diff(got, expected) <= tolerance);
    CHECK(max_abs_diff(loaded->model->embed_tokens->weight,
                       e.reference->model->embed_tokens->weight) == 0.0);

    // A loaded GPTQ model saves back to a GPTQ checkpoint with the packed tensors unchanged.
    test::TempDir resaved("gptq_resave_" + c.tag);
    model::save_causal_lm(*loaded, resaved.path());
    REQUIRE(quant::is_gptq_checkpoint(resaved.path()));
    io::CheckpointReader again(resaved.path());
    CHECK(at::equal(again.tensor(q_proj + ".qweight"), checkpoint.tensor(q_proj + ".qweight")));
    CHECK(at::equal(again.tensor(q_proj + ".qzeros"), checkpoint.tensor(q_proj + ".qzeros")));
    CHECK(at::equal(again.tensor(q_proj + ".scales"), checkpoint.tensor(q_proj + ".scales")));
    CHECK(max_abs_diff(quant::load_model(resaved.path())->forward(ids), expected) <= tolerance);
    const model::LoadOptions dequantized{at::kFloat, c10::kCPU, /*dequantize=*/true};
    CHECK(max_abs_diff(quant::load_model(tmp.path(), dequantized)->forward(ids), expected) <= 1e-6);
  }
}

TEST_CASE("GPTQ export: the same layers left dense in every block, sharded weights") {
  test::TempDir tmp("gptq_sharded");
  const ExportCase c{"w4_g32_no_down_proj",
                     4,
                     32,
                     false,
                     false,
                     GptqFormat::kV2,
                     {"model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"}};
  const Exported e = export_case(c, tmp.path(), 5, /*max_shard_bytes=*/16'000);
  CHECK(std::filesystem::exists(tmp / "model.safetensors.index.json"));
  CHECK_FALSE(std::filesystem::exists(tmp / "model.safetensors"));
  const io::Json qc = io::read_json_file(tmp / "config.json")["quantization_config"];
  // Every block quantizes the same six layers: the key optimum, transformers and vLLM read.
  const io::Json expected = {{"mlp.gate_proj", "mlp.up_proj", "self_attn.k_proj",
                              "self_attn.o_proj", "self_attn.q_proj", "self_attn.v_proj"}};
  CHECK(qc["modules_in_block_to_quantize"] == expected);
  CHECK(qc["dynamic"].size() == 2);
  const at::Tensor ids = random_ids(101, 4);
  torch::NoGradGuard no_grad;
  const at::Tensor want = e.reference->forward(ids);
  // Packed kernels: float32 summation order (see above); dequantized: the same weights exactly.
  CHECK(max_abs_diff(quant::load_model(tmp.path())->forward(ids), want) <=
        1e-5 * std::max(1.0, want.abs().max().item<double>()));
  const model::LoadOptions dequantized{at::kFloat, c10::kCPU, /*dequantize=*/true};
  CHECK(max_abs_diff(quant::load_model(tmp.path(), dequantized)->forward(ids), want) <= 1e-6);
}

TEST_CASE("GPTQ export and loading refuse inconsistent input with errors naming the culprit") {
  test::TempDir tmp("gptq_errors");
  auto model = packable_model(2);
  const std::string v_proj = "model.layers.0.self_attn.v_proj";
  std::map<std::string, QuantizedWeight> layers;
  layers[v_proj] =
      rtn(model->model->layers->ptr<model::DecoderLayer>(0)->self_attn->v_proj->effective_weight(),
          4, 32, false, false, 1);
  quant::QuantSpec spec;
  spec.bits = 4;
  spec.group_size = 32;
  spec.symmetric = false;

  quant::QuantSpec other_bits = spec;
  other_bits.bits = 3;
  test::require_error(
      [&] { quant::export_gptq_checkpoint(*model, layers, other_bits, tmp.path()); },
      {v_proj, "4 bits", "spec says 3"});
  quant::QuantSpec symmetric = spec;
  symmetric.symmetric = true;
  test::require_error([&] { quant::export_gptq_checkpoint(*model, layers, symmetric, tmp.path()); },
                      {v_proj, "symmetric", "8"});
  auto misnamed = layers;
  misnamed["model.layers.0.self_attn.w_proj"] = layers[v_proj];
  test::require_error([&] { quant::export_gptq_checkpoint(*model, misnamed, spec, tmp.path()); },
                      {"model.layers.0.self_attn.w_proj", "not a linear layer"});
  auto wrong_shape = layers;
  wrong_shape["model.layers.0.self_attn.q_proj"] = layers[v_proj];  // (32, 64) vs (64, 64)
  test::require_error([&] { quant::export_gptq_checkpoint(*model, wrong_shape, spec, tmp.path()); },
                      {"model.layers.0.self_attn.q_proj", "[32, 64]", "(64, 64)"});
  CHECK_FALSE(std::filesystem::exists(tmp / "config.json"));  // nothing written on refusal

  // Config fields rqat cannot serve are named.
  io::Json config = {{"quantization_config",
                      {{"quant_method", "gptq"},
                       {"bits", 4},
                       {"group_size", 32},
                       {"checkpoint_format", "marlin"}}}};
  test::require_error([&] { quant::read_gptq_config(config, "x/config.json"); },
                      {"x/config.json", "checkpoint_format", "marlin"});
  config["quantization_config"]["checkpoint_format"] = "gptq";
  config["quantization_config"]["bits"] = 5;
  test::require_error([&] { quant::read_gptq_config(config, "x/config.json"); },
                      {"quantization_config.bits", "5"});
  config["quantization_config"]["bits"] = 4;
  config["quantization_config"]["dynamic"] = {{"+:.*down.*", {{"bits", 8}}}};
  test::require_error([&] { quant::read_gptq_config(config, "x/config.json"); },
                      {"quantization_config.dynamic", "+:.*down.*"});
  config["quantization_config"]["quant_method"] = "awq";
  test::require_error([&] { quant::read_gptq_config(config, "x/config.json"); },
                      {"quant_method", "awq"});
  CHECK_FALSE(quant::read_gptq_config(io::Json{{"model_type", "qwen2"}}, "c").has_value());

  // A packed checkpoint whose tensor does not fit the config names the tensor.
  quant::export_gptq_checkpoint(*model, layers, spec, tmp.path());
  io::Json written = io::read_json_file(tmp / "config.json");
  written["quantization_config"]["bits"] = 8;
  io::write_json_file(tmp / "config.json", written);
  test::require_error([&] { quant::load_model(tmp.path()); }, {v_proj + ".qweight", "8 bits"});
}

// Not run by default: writes exports for tests/python/test_gptq_layout.py into
// $RQAT_GPTQ_EXPORT_DIR/<case>/ together with rqat_dequantized.safetensors (the weights rqat
// computes after loading the export) and reference_dequantized.safetensors (plain loops here).
TEST_CASE("GPTQ export fixture for the Python layout test", "[.][gptq_export_fixture]") {
  const char* root = std::getenv("RQAT_GPTQ_EXPORT_DIR");
  if (root == nullptr || *root == '\0') {
    WARN("SKIPPED: RQAT_GPTQ_EXPORT_DIR is not set");
    return;
  }
  for (const auto& c : export_cases()) {
    const std::filesystem::path dir = std::filesystem::path(root) / c.tag;
    const Exported e = export_case(c, dir, 11);
    auto loaded = quant::load_model(dir);
    io::NamedTensors rqat_weights, reference_weights;
    io::Json quantized = io::Json::array();
    for (const auto& slot : loaded->linear_layers()) {
      auto it = e.layers.find(slot.name);
      if (it == e.layers.end()) continue;
      quantized.push_back(slot.name);
      rqat_weights.emplace_back(slot.name, (*slot.layer)->effective_weight().contiguous());
      reference_weights.emplace_back(slot.name, plain_dequantize(it->second));
    }
    io::save_safetensors(dir / "rqat_dequantized.safetensors", rqat_weights);
    io::save_safetensors(dir / "reference_dequantized.safetensors", reference_weights);
    const at::Tensor ids = random_ids(101, 3);
    torch::NoGradGuard no_grad;
    io::save_safetensors(dir / "rqat_logits.safetensors",
                         {{"input_ids", ids}, {"logits", loaded->forward(ids).contiguous()}});
    io::write_json_file(dir / "case.json", {{"bits", c.bits},
                                            {"group_size", c.group_size},
                                            {"sym", c.sym},
                                            {"act_order", c.act_order},
                                            {"checkpoint_format", rqat::enum_name(c.format)},
                                            {"quantized", quantized},
                                            {"left_dense", c.left_dense}});
  }
}

TEST_CASE("packed GPTQ layers generate the tokens of their dequantized twin", "[gptq][low_bit]") {
  // The same checkpoint loaded twice: computing from the packed codes (the default) and with
  // --dequantize (the float weights). Greedy decoding over the paged engine (decode steps of one
  // row per sequence: the packed GEMV) and a prefill must pick the same tokens.
  for (const auto& c : export_cases()) {
    INFO("case " << c.tag);
    test::TempDir tmp("gptq_twin_" + c.tag);
    const Exported e = export_case(c, tmp.path(), 13);
    auto packed = quant::load_model(tmp.path());
    auto dense = quant::load_model(tmp.path(), model::LoadOptions{at::kFloat, c10::kCPU, true});
    int64_t packed_layers = 0, packed_bytes = 0, dense_bytes = 0;
    for (const auto& slot : packed->linear_layers()) {
      auto layer = std::dynamic_pointer_cast<quant::PackedGptqLinear>(*slot.layer);
      if (!layer) continue;
      CHECK(layer->packed());
      ++packed_layers;
      packed_bytes += layer->compute_bytes();
      CHECK(max_abs_diff(layer->effective_weight(), plain_dequantize(e.layers.at(slot.name))) == 0.0);
    }
    for (const auto& slot : dense->linear_layers())
      if (auto layer = std::dynamic_pointer_cast<quant::PackedGptqLinear>(*slot.layer)) {
        CHECK_FALSE(layer->packed());
        dense_bytes += layer->compute_bytes();
      }
    CHECK(packed_layers == int64_t(e.layers.size()));
    // What the layers compute from: about bits/32 of float32 weights, plus scales and zeros.
    CHECK(packed_bytes < dense_bytes * (c.bits + 8) / 32);

    torch::NoGradGuard no_grad;
    const at::Tensor ids = random_ids(101, 5);
    const at::Tensor dense_logits = dense->forward(ids);
    CHECK(max_abs_diff(packed->forward(ids), dense_logits) <=
          1e-5 * std::max(1.0, dense_logits.abs().max().item<double>()));
    std::vector<generation::GenerationRequest> requests(3);
    for (int r = 0; r < 3; ++r) {
      requests[r].prompt_ids = {static_cast<int32_t>(1 + r), 7, static_cast<int32_t>(20 + 3 * r)};
      requests[r].params.temperature = 0;
      requests[r].params.max_new_tokens = 12;
    }
    generation::GenerationEngine packed_engine(*packed, nullptr, generation::EngineOptions{4});
    generation::GenerationEngine dense_engine(*dense, nullptr, generation::EngineOptions{4});
    const auto got = packed_engine.generate(requests);
    const auto want = dense_engine.generate(requests);
    REQUIRE(got.size() == want.size());
    for (size_t r = 0; r < got.size(); ++r) {
      INFO("request " << r);
      CHECK(got[r].token_ids == want[r].token_ids);
      CHECK(got[r].token_ids.size() == 12);
    }
  }
}

TEST_CASE("packed GPTQ layers decode in bf16, again after a reload, with the same tokens",
          "[gptq][low_bit]") {
  // The path of bench_low_bit's part 2, which crashed on a GPU (issue 43): a packed checkpoint
  // loaded in bf16 (repacked at load, the heap trimmed after), decoded by several engines one
  // after the other (each making and freeing its buffers), then loaded again and decoded again.
  // Greedy decoding is deterministic: every run picks the same tokens.
  const auto cases = export_cases();
  const auto& c = cases.front();
  test::TempDir tmp("gptq_bf16_" + c.tag);
  export_case(c, tmp.path(), 17);
  std::vector<generation::GenerationRequest> requests(3);
  for (int r = 0; r < 3; ++r) {
    requests[r].prompt_ids = {static_cast<int32_t>(2 + r), 9, static_cast<int32_t>(30 + 2 * r)};
    requests[r].params.temperature = 0;
    requests[r].params.max_new_tokens = 10;
  }
  torch::NoGradGuard no_grad;
  std::vector<std::vector<int32_t>> first;
  for (int load = 0; load < 2; ++load) {
    auto packed = quant::load_model(tmp.path(), model::LoadOptions{at::kBFloat16, c10::kCPU, false});
    for (const auto& slot : packed->linear_layers())
      if (auto layer = std::dynamic_pointer_cast<quant::PackedGptqLinear>(*slot.layer))
        CHECK(layer->packed());
    for (int engine_run = 0; engine_run < 2; ++engine_run) {
      INFO("load " << load << ", engine " << engine_run);
      generation::GenerationEngine engine(*packed, nullptr, generation::EngineOptions{4});
      const auto got = engine.generate(requests);
      REQUIRE(got.size() == requests.size());
      if (first.empty()) {
        for (const auto& g : got) {
          CHECK(g.token_ids.size() == 10);
          first.push_back(g.token_ids);
        }
      } else {
        for (size_t r = 0; r < got.size(); ++r) CHECK(got[r].token_ids == first[r]);
      }
    }
  }
}
