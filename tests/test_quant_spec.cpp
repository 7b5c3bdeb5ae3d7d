// QuantSpec: validation errors name the field, JSON round trip and its errors, which module names
// are quantized by default and with overrides, group counts for uneven groups, describe().
#include <ATen/ATen.h>

#include <set>
#include <string>
#include <string_view>

#include "ops/low_bit_weight.h"
#include "ops/weight_formats.h"
#include "quant/gguf/grid.h"
#include "quant/gptq_packing.h"
#include "quant/nf4_linear.h"
#include "quant/quant_spec.h"
#include "quant/quantized_weight.h"
#include "test_util.h"

using rqat::quant::QuantizedWeight;
using rqat::quant::QuantSpec;
using rqat::test::require_error;

TEST_CASE("quant spec: defaults are valid and quantize only decoder-block linears") {
  QuantSpec spec;
  spec.validate();
  CHECK(spec.bits == 4);
  CHECK(spec.group_size == 128);
  CHECK_FALSE(spec.symmetric);
  CHECK(spec.max_code() == 15);
  for (const char* name : {"model.layers.0.self_attn.q_proj", "model.layers.17.mlp.down_proj",
                           "model.layers.3.self_attn.o_proj"}) {
    INFO(name);
    CHECK(spec.quantizes(name));
  }
  for (const char* name : {"lm_head", "model.embed_tokens", "model.norm", "layers.0.mlp.up_proj",
                           "xmodel.layers.0.mlp.up_proj"}) {
    INFO(name);
    CHECK_FALSE(spec.quantizes(name));
  }
}

TEST_CASE("quant spec: include and exclude patterns override the default") {
  QuantSpec spec;
  spec.exclude = {R"(.*\.mlp\.down_proj)", R"(model\.layers\.0\..*)"};
  CHECK(spec.quantizes("model.layers.1.mlp.up_proj"));
  CHECK_FALSE(spec.quantizes("model.layers.1.mlp.down_proj"));
  CHECK_FALSE(spec.quantizes("model.layers.0.self_attn.k_proj"));
  spec.include = {"lm_head"};
  spec.exclude = {};
  CHECK(spec.quantizes("lm_head"));
  CHECK_FALSE(spec.quantizes("model.layers.1.mlp.up_proj"));
  // A pattern matches the whole name, not a part of it.
  spec.include = {"up_proj"};
  CHECK_FALSE(spec.quantizes("model.layers.1.mlp.up_proj"));
}

TEST_CASE("quant spec: groups, including an uneven last group") {
  QuantSpec spec;
  spec.group_size = 32;
  CHECK(spec.num_groups(172) == 6);  // stories260K down_proj: 5 groups of 32 and one of 12
  CHECK(spec.num_groups(128) == 4);
  CHECK(spec.num_groups(1) == 1);
  CHECK(spec.effective_group_size(172) == 32);
  spec.group_size = -1;
  CHECK(spec.num_groups(172) == 1);
  CHECK(spec.effective_group_size(172) == 172);
  spec.group_size = 256;
  CHECK(spec.num_groups(172) == 1);
}

TEST_CASE("quant spec: validation errors name the field") {
  for (int bits : {0, 1, 5, 6, 7, 9, 16}) {
    QuantSpec spec;
    spec.bits = bits;
    require_error([&] { spec.validate("quant"); }, {"quant.bits", std::to_string(bits)});
    require_error([&] { spec.validate("--"); }, {"--bits"});
  }
  for (int64_t group : {0, -2, -128}) {
    QuantSpec spec;
    spec.group_size = group;
    require_error([&] { spec.validate("run.yaml: quant"); },
                  {"run.yaml: quant.group_size", std::to_string(group)});
  }
  QuantSpec spec;
  spec.exclude = {"ok", "model.layers.(["};
  require_error([&] { spec.validate("quant"); }, {"quant.exclude[1]", "model.layers.(["});
  spec.exclude = {};
  spec.include = {"*bad"};
  require_error([&] { spec.validate(""); }, {"include[0]", "*bad"});
  QuantSpec per_tensor;
  per_tensor.per_tensor = true;  // with the default group of 128
  require_error([&] { per_tensor.validate("--"); }, {"--per-tensor", "--group-size = -1", "128"});
  per_tensor.group_size = -1;
  per_tensor.validate("--");
  for (int bits : {2, 3, 4, 8}) {
    for (int64_t group : {-1, 1, 32, 64, 128, 172}) {
      QuantSpec good;
      good.bits = bits;
      good.group_size = group;
      good.validate();
    }
  }
}

TEST_CASE("quant spec: JSON round trip and errors naming the key") {
  QuantSpec spec;
  spec.bits = 3;
  spec.group_size = -1;
  spec.symmetric = true;
  spec.clip_search = true;
  spec.include = {R"(model\.layers\.\d+\.mlp\..*)"};
  spec.exclude = {"lm_head", R"(.*down_proj)"};
  const auto json = spec.to_json();
  const std::string text = json.dump();
  const auto back = QuantSpec::from_json(rqat::io::Json::parse(text), "manifest.json: quant");
  CHECK(back.bits == 3);
  CHECK(back.group_size == -1);
  CHECK(back.symmetric);
  CHECK(back.clip_search);
  CHECK(back.include == spec.include);
  CHECK(back.exclude == spec.exclude);
  CHECK(back.to_json().dump() == text);
  // per_tensor and v1_zeros are written when set and read back; absent, they are false, so the
  // specs of earlier artifacts keep their JSON.
  CHECK_FALSE(json.contains("per_tensor"));
  CHECK_FALSE(json.contains("v1_zeros"));
  spec.per_tensor = true;
  spec.v1_zeros = true;
  const auto flagged = QuantSpec::from_json(spec.to_json(), "q");
  CHECK(flagged.per_tensor);
  CHECK(flagged.v1_zeros);
  require_error([] { QuantSpec::from_json(rqat::io::Json::parse(R"({"v1_zeros": 1})"), "q"); },
                {"q.v1_zeros", "true or false"});
  // Absent keys keep their defaults.
  const auto partial = QuantSpec::from_json(rqat::io::Json::parse(R"({"bits": 2})"), "q");
  CHECK(partial.bits == 2);
  CHECK(partial.group_size == 128);
  CHECK(partial.include == QuantSpec{}.include);

  using rqat::io::Json;
  require_error([] { QuantSpec::from_json(Json::parse(R"({"bits": 4, "groupsize": 64})"), "q"); },
                {"q.groupsize", "unknown key"});
  require_error([] { QuantSpec::from_json(Json::parse(R"({"bits": "4"})"), "q"); },
                {"q.bits", "integer"});
  require_error([] { QuantSpec::from_json(Json::parse(R"({"bits": 5})"), "cfg: quant"); },
                {"cfg: quant.bits", "5"});
  require_error([] { QuantSpec::from_json(Json::parse(R"({"symmetric": 1})"), "q"); },
                {"q.symmetric"});
  require_error([] { QuantSpec::from_json(Json::parse(R"({"exclude": ["a", 3]})"), "q"); },
                {"q.exclude"});
  require_error([] { QuantSpec::from_json(Json::parse(R"({"include": ["(("]})"), "q"); },
                {"q.include[0]"});
  require_error([] { QuantSpec::from_json(Json::parse("[4]"), "q"); }, {"q", "object"});
}

TEST_CASE("quant spec: describe") {
  QuantSpec spec;
  CHECK(spec.describe() == "W4G128 asym");
  spec.bits = 3;
  spec.group_size = -1;
  spec.symmetric = true;
  spec.clip_search = true;
  CHECK(spec.describe() == "W3 per-channel sym clip");
  spec.bits = 2;
  spec.group_size = 32;
  spec.symmetric = false;
  spec.clip_search = false;
  CHECK(spec.describe() == "W2G32 asym");
  spec.v1_zeros = true;
  CHECK(spec.describe() == "W2G32 asym v1-zeros");
  spec.bits = 8;
  spec.group_size = -1;
  spec.per_tensor = true;
  spec.symmetric = true;
  CHECK(spec.describe() == "W8 per-tensor sym");  // symmetric zero points are never 0
}

TEST_CASE("quantized weight: dequantize follows g_idx, validate names the problem") {
  // 2 rows, 5 columns, two groups assigned out of order (as act-order does).
  QuantizedWeight q;
  q.bits = 2;
  q.group_size = 3;
  q.codes = at::tensor({0, 1, 2, 3, 1, 3, 2, 1, 0, 2}, at::kByte).view({2, 5});
  q.scales = at::tensor({0.5f, 2.0f, 0.25f, 1.0f}).view({2, 2});
  q.zeros = at::tensor({1.0f, 2.0f, 0.0f, 3.0f}).view({2, 2});
  q.g_idx = at::tensor({1, 0, 0, 1, 0}, at::kInt);
  q.validate("layer");
  // W[r, c] = (codes[r, c] - zeros[r, g]) * scales[r, g], g = g_idx[c], written out by hand.
  auto expected = at::tensor({(0 - 2) * 2.0f, (1 - 1) * 0.5f, (2 - 1) * 0.5f, (3 - 2) * 2.0f,
                              (1 - 1) * 0.5f, (3 - 3) * 1.0f, (2 - 0) * 0.25f, (1 - 0) * 0.25f,
                              (0 - 3) * 1.0f, (2 - 0) * 0.25f})
                      .view({2, 5});
  CHECK(at::equal(q.dequantize(), expected));
  CHECK(q.out_features() == 2);
  CHECK(q.in_features() == 5);

  auto broken = q;
  broken.codes = q.codes.clone();
  broken.codes[0][0] = 4;
  require_error([&] { broken.validate("model.layers.0.mlp.up_proj"); },
                {"model.layers.0.mlp.up_proj", "codes"});
  broken = q;
  broken.g_idx = at::tensor({1, 0, 2, 1, 0}, at::kInt);
  require_error([&] { broken.validate("L"); }, {"L", "g_idx"});
  broken = q;
  broken.zeros = q.zeros + 0.5;
  require_error([&] { broken.validate("L"); }, {"L", "zeros"});
  broken = q;
  broken.scales = -q.scales;
  require_error([&] { broken.validate("L"); }, {"L", "scales"});
  broken = q;
  broken.group_size = 2;  // 5 inputs in groups of 2 would need 3 groups
  require_error([&] { broken.validate("L"); }, {"L", "groups"});
  broken = q;
  broken.scales = q.scales.to(at::kDouble);
  require_error([&] { broken.validate("L"); }, {"L", "scales"});
}

TEST_CASE("quant spec: hostile patterns from a checkpoint are refused, not run (issue 18)") {
  QuantSpec spec;
  // 10^5 nested groups overflowed std::regex's recursive compiler; PCRE2 refuses the nesting.
  spec.exclude = {std::string(2000, '(') + "a" + std::string(2000, ')')};
  require_error([&] { spec.validate("quant"); }, {"quant.exclude[0]", "not a valid regular"});
  spec.exclude = {std::string(100000, '(')};
  require_error([&] { spec.validate("quant"); }, {"quant.exclude[0]", "rqat's limit of 4096"});
  // Catastrophic backtracking on a long name is stopped by the match limit, not left to hang.
  spec.include = {".*"};
  spec.exclude = {R"(model\.layers\.y(x+x+)+y)"};
  spec.validate("quant");
  std::string long_name = "model.layers.y";  // by append: GCC 12 warns falsely on operator+ here
  long_name.append(40, 'x').append("z");
  require_error([&] { (void)spec.quantizes(long_name); }, {"was stopped", "match limit"});
  spec.include = QuantSpec().include;
  // Ordinary patterns keep std::regex_match's whole-name semantics.
  spec.exclude = {R"(model\.layers\.[0-9]+\.mlp\..*)", "lm_head"};
  CHECK_FALSE(spec.quantizes("model.layers.3.mlp.up_proj"));
  CHECK(spec.quantizes("model.layers.3.self_attn.q_proj"));
  spec.exclude = {"self_attn"};  // a part of the name is no match
  CHECK(spec.quantizes("model.layers.3.self_attn.q_proj"));
}

// Every check of a bit width reads ops/weight_formats.h: the table's widths pass each of them and
// every other width fails each of them, with the table's list in the message.
TEST_CASE("every bit-width check follows the one table of integer formats") {
  CHECK(rqat::ops::integer_bits_choices() == "2, 3, 4 or 8");
  for (int bits = -1; bits <= 17; ++bits) {
    INFO("bits " << bits);
    const bool listed = rqat::ops::integer_weight_format(bits) != nullptr;
    if (listed) CHECK(rqat::ops::integer_weight_format(bits)->max_code() == (1 << bits) - 1);
    QuantSpec spec;
    spec.bits = bits;
    const auto codes = at::zeros({2, 32}, at::kInt);
    const auto scales = at::ones({2, 1}), zeros = at::zeros({2, 1});
    if (listed) {
      spec.validate();
      rqat::ops::pack_low_bit(codes, scales, zeros, bits, 32, at::Tensor(), "test");
      const auto rows = rqat::quant::pack_gptq_rows(at::zeros({32, 2}, at::kInt), bits, "test");
      CHECK(at::equal(rqat::quant::unpack_gptq_rows(rows, bits, "test"),
                      at::zeros({32, 2}, at::kInt)));
    } else {
      require_error([&] { spec.validate(); }, {"2, 3, 4 or 8"});
      require_error(
          [&] { rqat::ops::pack_low_bit(codes, scales, zeros, bits, 32, at::Tensor(), "test"); },
          {"no packed kernel", "2, 3, 4 or 8"});
      require_error(
          [&] {
            rqat::quant::pack_gptq_rows(at::zeros({32, 2}, at::kInt), bits, "test");
          },
          {"cannot be GPTQ-packed", "2, 3, 4 or 8"});
    }
  }
}

// The one table of weight formats (ops/weight_formats.h) against what each format is elsewhere:
// GGUF's block sizes from the file format's own table (io/gguf_file.h), QLoRA's NF4 (4 bits,
// blocks of 64), and the names `--grid` parses and manifests write.
TEST_CASE("the weight format table: one row per grid, consistent with each format") {
  using rqat::io::GgufType;
  using rqat::ops::WeightGrid;
  std::set<std::string_view> names;
  for (const auto& format : rqat::ops::kWeightFormats) {
    INFO(format.name);
    CHECK(names.insert(format.name).second);
    CHECK(rqat::ops::weight_format(format.name) == &format);
    CHECK(format.max_code() == (int64_t{1} << format.bits) - 1);
    if (format.grid != WeightGrid::kGguf) CHECK_FALSE(format.gguf_type);
  }
  // Every GGUF block type has exactly one grid row, and f32/f16/bf16 none.
  for (int i = 0; i < static_cast<int>(GgufType::kCount); ++i) {
    const auto type = static_cast<GgufType>(i);
    INFO(rqat::enum_name(type));
    const bool plain = type == GgufType::kF32 || type == GgufType::kF16 || type == GgufType::kBF16;
    CHECK(rqat::quant::has_gguf_grid(type) == !plain);
    if (plain) {
      require_error([&] { rqat::quant::gguf_grid_info(type); }, {"no block type with a grid"});
      continue;
    }
    const auto* format = rqat::ops::gguf_weight_format(type);
    REQUIRE(format != nullptr);
    CHECK(format->name == "gguf-" + std::string(rqat::enum_name(type)));
    CHECK(rqat::quant::parse_gguf_grid(format->name, "--grid") == type);
    CHECK(rqat::quant::gguf_grid_name(type) == format->name);
    // The grid's block is the file format's block, which its sub-blocks divide.
    CHECK(format->block == rqat::io::gguf_type_info(type).block_elements);
    CHECK(format->block % format->sub_block == 0);
    CHECK(format->super_scales == (format->block == 256));
    const auto info = rqat::quant::gguf_grid_info(type);
    CHECK((info.bits == format->bits && info.sub_block == format->sub_block &&
           info.block == format->block && info.min_form == format->min_form &&
           info.zero == format->zero));
    // Zero form keeps its zero point inside the codes; min form has none.
    CHECK((format->min_form ? format->zero == 0 : format->zero <= format->max_code()));
  }
  CHECK(rqat::ops::weight_format_names(WeightGrid::kGguf) ==
        "gguf-q8_0, gguf-q4_0, gguf-q4_1, gguf-q2_k, gguf-q3_k, gguf-q4_k, gguf-q5_k, gguf-q6_k");
  require_error([] { rqat::quant::parse_gguf_grid("int4", "--grid"); },
                {"--grid = 'int4'", "gguf-q6_k"});
  // NF4 as QLoRA publishes it, and the defaults that follow from its row.
  const auto* nf4 = rqat::ops::weight_format("nf4");
  REQUIRE(nf4 != nullptr);
  CHECK((nf4->grid == WeightGrid::kNf4 && nf4->bits == 4 && nf4->sub_block == 64));
  CHECK(rqat::quant::Nf4Options{}.block_size == 64);
  CHECK(rqat::quant::Nf4Options{}.to_json(QuantSpec{})["bits"] == 4);
}
