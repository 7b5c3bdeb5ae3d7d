// See tensors.h. Packing runs on the CPU in plain loops (export and import are one pass over the
// weights).
#include "quant/compressed_tensors/tensors.h"

#include <ATen/ATen.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "io/error.h"
#include "quant/fp_grid_weight.h"

namespace rqat::quant {

namespace {

int64_t packed_words(int64_t values, int bits) { return (values * bits + 31) / 32; }

// Rows of values (each < 2^bits) packed densely into int32 words, as compressed-tensors'
// pack_to_int32 (on the values already offset to unsigned).
at::Tensor pack_rows(const at::Tensor& values, int bits) {
  const at::Tensor v = values.to(at::kCPU, at::kInt).contiguous();
  const int64_t rows = v.size(0), cols = v.size(1), words = packed_words(cols, bits);
  std::vector<uint32_t> out(static_cast<size_t>(rows * words), 0);
  const int32_t* in = v.data_ptr<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    uint32_t* row = out.data() + r * words;
    for (int64_t c = 0; c < cols; ++c) {
      const auto value = static_cast<uint32_t>(in[r * cols + c]);
      const int64_t bit = c * bits, word = bit / 32, offset = bit % 32;
      row[word] |= value << offset;
      if (offset + bits > 32) row[word + 1] |= value >> (32 - offset);
    }
  }
  at::Tensor packed = at::empty({rows, words}, at::kInt);
  std::memcpy(packed.data_ptr<int32_t>(), out.data(), out.size() * sizeof(uint32_t));
  return packed;
}

// The inverse: (rows, cols) values as uint8 (bits <= 8).
at::Tensor unpack_rows(const at::Tensor& packed, int bits, int64_t cols) {
  const at::Tensor p = packed.to(at::kCPU).contiguous();
  const int64_t rows = p.size(0), words = p.size(1);
  at::Tensor out = at::empty({rows, cols}, at::kByte);
  const auto* in = reinterpret_cast<const uint32_t*>(p.data_ptr<int32_t>());
  uint8_t* o = out.data_ptr<uint8_t>();
  const uint32_t mask = (uint32_t{1} << bits) - 1;
  for (int64_t r = 0; r < rows; ++r) {
    const uint32_t* row = in + r * words;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t bit = c * bits, word = bit / 32, offset = bit % 32;
      uint32_t value = row[word] >> offset;
      if (offset + bits > 32) value |= row[word + 1] << (32 - offset);
      o[r * cols + c] = static_cast<uint8_t>(value & mask);
    }
  }
  return out;
}

// Two E2M1 codes per byte, the even column in the low nibble.
at::Tensor pack_nibbles(const at::Tensor& codes) {
  const at::Tensor c = codes.to(at::kCPU, at::kByte).contiguous();
  using at::indexing::Slice;
  return c.index({Slice(), Slice(0, at::indexing::None, 2)})
      .bitwise_or(c.index({Slice(), Slice(1, at::indexing::None, 2)}).bitwise_left_shift(4));
}

at::Tensor unpack_nibbles(const at::Tensor& packed) {
  const at::Tensor p = packed.to(at::kCPU).contiguous();
  return at::stack({p.bitwise_and(0x0F), p.bitwise_right_shift(4)}, 2).reshape({p.size(0), -1});
}

const at::Tensor& part(const CtLayerTensors& parts, const std::string& suffix,
                       std::string_view where, const std::string& name) {
  const auto it = parts.find(suffix);
  if (it == parts.end()) fail("{}: tensor {}.{} is missing", where, name, suffix);
  return it->second;
}

void expect_tensor(const at::Tensor& t, at::ScalarType dtype, at::IntArrayRef shape,
                   std::string_view where, const std::string& tensor) {
  if (t.scalar_type() != dtype || t.sizes() != shape)
    fail("{}: tensor {} is {} ({}), expected {} ({})", where, tensor,
         c10::toString(t.scalar_type()), fmt::join(t.sizes(), ", "), c10::toString(dtype),
         fmt::join(shape, ", "));
}

// The per-column scale of contiguous groups.
at::Tensor per_column(const at::Tensor& per_group, int64_t in) {
  const int64_t groups = per_group.size(1);
  return per_group.repeat_interleave(in / groups, 1);
}

}  // namespace

void ct_check_layer(const QuantizedWeight& w, const CtScheme& scheme, const std::string& name) {
  const CtScheme own = ct_scheme_of(w, scheme.symmetric, scheme.activations, name);
  if (own != scheme)
    fail("{}: its scheme is {}, the checkpoint's {} (one scheme for every layer)", name,
         own.describe(), scheme.describe());
  w.validate(name);
  const int64_t in = w.in_features();
  const int64_t group = scheme.group_size == -1 ? in : scheme.group_size;
  if (in % group != 0)
    fail("{}: {} inputs are not whole groups of {} (compressed-tensors has no partial groups)",
         name, in, group);
  if (scheme.activations) {
    const int64_t block = fp_block_size(*scheme.activations);
    if (block > 0 && in % block != 0)
      fail("{}: {} inputs are not whole blocks of {} ({} activations)", name, in, block,
           enum_name(*scheme.activations));
    if (scheme.activations == FpGrid::kNvfp4 && !w.input_global_scale.defined())
      fail(
          "{}: nvfp4 activations without an input global scale (calibrate: ptq --act-grid nvfp4 "
          "--calib FILE, or a trainer with --act-grid nvfp4)",
          name);
  }
  const at::Tensor g_idx = w.g_idx.to(at::kCPU, at::kLong);
  if (!at::equal(g_idx, at::arange(in, at::kLong).div(group, "floor")))
    fail("{}: act-order g_idx (columns not in group order); compressed-tensors {} has no g_idx",
         name, kCompressedTensorsVersion);
  if (scheme.format == CtFormat::kPackQuantized && scheme.symmetric) {
    const int64_t offset = int64_t{1} << (w.bits - 1);
    if (!(w.zeros == static_cast<float>(offset)).all().item<bool>())
      fail(
          "{}: symmetric, but a zero point is not {} (compressed-tensors' symmetric values are "
          "code - {} with no zero point)",
          name, offset, offset);
  }
}

CtLayerTensors ct_layer_tensors(const QuantizedWeight& w, const CtScheme& scheme,
                                at::ScalarType scale_dtype, const std::string& name) {
  ct_check_layer(w, scheme, name);
  const int64_t out = w.out_features(), in = w.in_features();
  const at::Tensor scales = w.scales.to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor codes = w.codes.to(at::kCPU, at::kByte).contiguous();
  CtLayerTensors t;
  switch (scheme.format) {
    case CtFormat::kPackQuantized: {
      const at::Tensor zeros = w.zeros.to(at::kCPU, at::kFloat);
      const at::Tensor stored = scales.to(scale_dtype);
      if (!at::equal(stored.to(at::kFloat), scales))
        fail(
            "{}: scales are not all {} values (pack-quantized stores them in the checkpoint's "
            "dtype): export in float32, or quantize with scales in {}",
            name, c10::toString(scale_dtype), c10::toString(scale_dtype));
      t["weight_packed"] = pack_rows(codes, w.bits);
      t["weight_scale"] = stored;
      t["weight_shape"] = at::tensor(std::vector<int64_t>{out, in}, at::kLong);
      if (!scheme.symmetric)
        t["weight_zero_point"] = pack_rows(zeros.to(at::kByte).t(), w.bits).t().contiguous();
      break;
    }
    case CtFormat::kNvfp4PackQuantized:
      if (!at::equal(round_to_e4m3(scales), scales))
        fail("{}: nvfp4 block scales are not all FP8 E4M3 values", name);
      t["weight_packed"] = pack_nibbles(codes);
      t["weight_scale"] = scales.to(at::kFloat8_e4m3fn);
      t["weight_global_scale"] = w.super_scales.to(at::kCPU, at::kFloat).reshape({1}).clone();
      break;
    case CtFormat::kMxfp4PackQuantized: {
      const auto [mantissa, exponent] = at::frexp(scales);
      // scale = 0.5 * 2^exponent = 2^(exponent - 1); E8M0 holds 2^-127 .. 2^127.
      const at::Tensor e = exponent.to(at::kLong) - 1 + 127;
      if (!(mantissa == 0.5f).all().item<bool>() || (e < 0).any().item<bool>() ||
          (e > 254).any().item<bool>())
        fail("{}: mxfp4 scales must be powers of two in [2^-127, 2^127] (E8M0)", name);
      t["weight_packed"] = pack_nibbles(codes);
      t["weight_scale"] = e.to(at::kByte);
      break;
    }
    case CtFormat::kFloatQuantized:
      t["weight"] = codes.view(at::kFloat8_e4m3fn);
      t["weight_scale"] = scales.reshape({out, 1}).clone();
      break;
    case CtFormat::kCount:
      break;
  }
  if (scheme.activations == FpGrid::kNvfp4)
    t["input_global_scale"] = w.input_global_scale.to(at::kCPU, at::kFloat).reshape({1}).clone();
  return t;
}

QuantizedWeight ct_layer_from_tensors(const CtLayerTensors& parts, const CtScheme& scheme,
                                      std::string_view where, const std::string& name) {
  QuantizedWeight w;
  w.bits = scheme.bits;
  w.group_size = scheme.group_size;
  w.fp_grid = scheme.fp_grid();
  const at::Tensor& scale = part(parts, "weight_scale", where, name);
  const std::string scale_name = name + ".weight_scale";
  int64_t out = 0, in = 0;
  if (scheme.format == CtFormat::kFloatQuantized) {
    const at::Tensor& weight = part(parts, "weight", where, name);
    if (weight.dim() != 2) fail("{}: tensor {}.weight is not 2-D", where, name);
    out = weight.size(0), in = weight.size(1);
    expect_tensor(weight, at::kFloat8_e4m3fn, {out, in}, where, name + ".weight");
    w.codes = weight.to(at::kCPU).contiguous().view(at::kByte);
    // -0 codes as +0 (the same value).
    w.codes = at::where(w.codes == 0x80, at::zeros_like(w.codes), w.codes);
    if (!at::isFloatingType(scale.scalar_type()) || scale.numel() < 1 ||
        (scale.numel() != 1 && scale.numel() != out) ||
        (scale.numel() == out && scale.dim() == 2 && scale.size(1) != 1))
      fail("{}: tensor {} is {} ({}), expected a float ({}, 1) or one per-tensor value", where,
           scale_name, c10::toString(scale.scalar_type()), fmt::join(scale.sizes(), ", "), out);
    w.scales = scale.to(at::kCPU, at::kFloat).reshape({-1, 1}).expand({out, 1}).contiguous();
  } else {
    const at::Tensor& packed = part(parts, "weight_packed", where, name);
    if (packed.dim() != 2) fail("{}: tensor {}.weight_packed is not 2-D", where, name);
    out = packed.size(0);
    if (scheme.format == CtFormat::kPackQuantized) {
      const at::Tensor& shape = part(parts, "weight_shape", where, name);
      if (shape.numel() != 2 || !at::isIntegralType(shape.scalar_type(), false))
        fail("{}: tensor {}.weight_shape must hold 2 integers (out, in)", where, name);
      const at::Tensor s = shape.to(at::kCPU, at::kLong).reshape({2});
      if (s[0].item<int64_t>() != out || s[1].item<int64_t>() < 1)
        fail("{}: tensor {}.weight_shape ({}, {}) disagrees with weight_packed's {} rows", where,
             name, s[0].item<int64_t>(), s[1].item<int64_t>(), out);
      in = s[1].item<int64_t>();
      expect_tensor(packed, at::kInt, {out, packed_words(in, scheme.bits)}, where,
                    name + ".weight_packed");
      w.codes = unpack_rows(packed, scheme.bits, in);
    } else {
      in = packed.size(1) * 2;
      expect_tensor(packed, at::kByte, {out, in / 2}, where, name + ".weight_packed");
      w.codes = unpack_nibbles(packed);
      w.codes = at::where(w.codes == 8, at::zeros_like(w.codes), w.codes);  // -0 as +0
    }
    const int64_t group = scheme.group_size == -1 ? in : scheme.group_size;
    if (in % group != 0)
      fail("{}: {}.weight_packed has {} columns, not whole groups of {}", where, name, in, group);
    const int64_t groups = in / group;
    if (scale.dim() != 2 || scale.size(0) != out || scale.size(1) != groups)
      fail("{}: tensor {} is ({}), expected ({}, {})", where, scale_name,
           fmt::join(scale.sizes(), ", "), out, groups);
    switch (scheme.format) {
      case CtFormat::kNvfp4PackQuantized: {
        expect_tensor(scale, at::kFloat8_e4m3fn, {out, groups}, where, scale_name);
        w.scales = scale.to(at::kCPU, at::kFloat);
        const at::Tensor& global = part(parts, "weight_global_scale", where, name);
        if (global.numel() != 1 || !at::isFloatingType(global.scalar_type()))
          fail("{}: tensor {}.weight_global_scale must be one float value", where, name);
        w.super_scales = global.to(at::kCPU, at::kFloat).reshape({1}).clone();
        break;
      }
      case CtFormat::kMxfp4PackQuantized: {
        expect_tensor(scale, at::kByte, {out, groups}, where, scale_name);
        const at::Tensor e = scale.to(at::kCPU, at::kInt);
        if ((e == 255).any().item<bool>())
          fail("{}: tensor {} holds the E8M0 NaN (255)", where, scale_name);
        w.scales = at::ldexp(at::ones({out, groups}, at::kFloat), e - 127);
        break;
      }
      default: {
        if (!at::isFloatingType(scale.scalar_type()))
          fail("{}: tensor {} is {}, expected a float dtype", where, scale_name,
               c10::toString(scale.scalar_type()));
        w.scales = scale.to(at::kCPU, at::kFloat);
        const int64_t offset = int64_t{1} << (scheme.bits - 1);
        if (scheme.symmetric) {
          w.zeros = at::full({out, groups}, static_cast<float>(offset), at::kFloat);
        } else {
          const at::Tensor& zp = part(parts, "weight_zero_point", where, name);
          expect_tensor(zp, at::kInt, {packed_words(out, scheme.bits), groups}, where,
                        name + ".weight_zero_point");
          w.zeros = unpack_rows(zp.t(), scheme.bits, out).t().to(at::kFloat).contiguous();
        }
      }
    }
  }
  if (!w.zeros.defined()) w.zeros = at::zeros_like(w.scales);
  if (scheme.activations == FpGrid::kNvfp4) {
    const at::Tensor& global = part(parts, "input_global_scale", where, name);
    if (global.numel() != 1 || !at::isFloatingType(global.scalar_type()))
      fail("{}: tensor {}.input_global_scale must be one float value", where, name);
    w.input_global_scale = global.to(at::kCPU, at::kFloat).reshape({1}).clone();
  }
  const int64_t group = scheme.group_size == -1 ? in : scheme.group_size;
  w.g_idx = at::arange(in, at::kInt).div(group, "floor").to(at::kInt);
  w.validate(fmt::format("{}: layer {}", where, name));
  return w;
}

at::Tensor ct_dequantize(const CtLayerTensors& parts, const CtScheme& scheme,
                         std::string_view where, const std::string& name) {
  const QuantizedWeight w = ct_layer_from_tensors(parts, scheme, where, name);
  const int64_t in = w.in_features();
  if (const auto grid = scheme.fp_grid()) {
    // value * (scale / global): the division first, in float32, as compressed-tensors' _dequantize.
    at::Tensor scale = w.scales;
    if (*grid == FpGrid::kNvfp4) scale = scale / w.super_scales;
    return fp_code_values(w.codes, *grid) * per_column(scale, in);
  }
  // (q - zp) * scale with the signed values and zero points compressed-tensors unpacks.
  const float offset = static_cast<float>(int64_t{1} << (scheme.bits - 1));
  const at::Tensor q = w.codes.to(at::kFloat) - offset;
  const at::Tensor x = scheme.symmetric ? q : q - per_column(w.zeros - offset, in);
  return x * per_column(w.scales, in);
}

}  // namespace rqat::quant
