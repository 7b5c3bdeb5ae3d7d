// See gptq_packing.h.
#include "quant/gptq_packing.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "io/error.h"
#include "ops/weight_formats.h"

namespace rqat::quant {

namespace {

void check_bits(int bits, std::string_view what) {
  if (!ops::integer_bits_supported(bits))
    fail("{}: {} bits cannot be GPTQ-packed ({})", what, bits, ops::integer_bits_choices());
}

void check_2d(const at::Tensor& t, std::string_view what) {
  if (!t.defined() || t.dim() != 2) fail("{}: expected a 2-D tensor", what);
}

// Packs dim 0 of a contiguous (n, m) uint32 matrix as one bit stream per column.
at::Tensor pack_dim0(const at::Tensor& values, int bits) {
  const int64_t n = values.size(0), m = values.size(1);
  at::Tensor out = at::zeros({n * bits / 32, m}, at::kInt);
  const auto* v = reinterpret_cast<const uint32_t*>(values.data_ptr<int32_t>());
  auto* o = reinterpret_cast<uint32_t*>(out.data_ptr<int32_t>());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits;
    const int shift = static_cast<int>(bit & 31);
    uint32_t* word = o + (bit >> 5) * m;
    const uint32_t* row = v + i * m;
    // A value that does not fit in the rest of the word continues in the next one (3 bits only).
    const bool spills = shift + bits > 32;
    for (int64_t j = 0; j < m; ++j) {
      word[j] |= row[j] << shift;
      if (spills) word[m + j] |= row[j] >> (32 - shift);
    }
  }
  return out;
}

at::Tensor unpack_dim0(const at::Tensor& packed, int bits) {
  const int64_t words = packed.size(0), m = packed.size(1);
  const int64_t n = words * 32 / bits;
  const uint32_t mask = (uint32_t{1} << bits) - 1;
  at::Tensor out = at::empty({n, m}, at::kInt);
  const auto* p = reinterpret_cast<const uint32_t*>(packed.data_ptr<int32_t>());
  auto* o = out.data_ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits;
    const int shift = static_cast<int>(bit & 31);
    const uint32_t* word = p + (bit >> 5) * m;
    const bool spills = shift + bits > 32;
    int32_t* row = o + i * m;
    for (int64_t j = 0; j < m; ++j) {
      uint32_t x = word[j] >> shift;
      if (spills) x |= word[m + j] << (32 - shift);
      row[j] = static_cast<int32_t>(x & mask);
    }
  }
  return out;
}

// Values as a contiguous int32 CPU matrix, after checking they are integers in [0, 2^bits).
at::Tensor checked_values(const at::Tensor& values, int bits, std::string_view what) {
  check_2d(values, what);
  if (values.is_floating_point() || values.is_complex() || values.scalar_type() == at::kBool)
    fail("{}: expected an integer tensor, got {}", what, c10::toString(values.scalar_type()));
  at::Tensor v = values.to(at::kCPU, at::kLong);
  if (v.numel() > 0) {
    const int64_t lo = v.min().item<int64_t>(), hi = v.max().item<int64_t>();
    if (lo < 0 || hi > (int64_t{1} << bits) - 1)
      fail("{}: values span [{}, {}], outside [0, {}] for {} bits", what, lo, hi,
           (int64_t{1} << bits) - 1, bits);
  }
  return v.to(at::kInt).contiguous();
}

at::Tensor checked_packed(const at::Tensor& packed, std::string_view what) {
  check_2d(packed, what);
  if (packed.scalar_type() != at::kInt)
    fail("{}: packed words must be int32, got {}", what, c10::toString(packed.scalar_type()));
  return packed.to(at::kCPU).contiguous();
}

void check_multiple(int64_t count, int bits, std::string_view what, std::string_view dim_name) {
  const int64_t multiple = gptq_pack_multiple(bits);
  if (count % multiple != 0) {
    fail("{}: {} {} is not a multiple of {}, which {}-bit GPTQ packing needs{}", what, dim_name,
         count, multiple, bits,
         bits == 3 ? " (32 three-bit values fill 3 int32 words)" : " (32/bits values per int32)");
  }
}

// Float32 (groups, out) scales -> float16, checking each is positive, finite and (unless rounding
// is allowed) exactly representable, so the exported model computes what rqat computed.
at::Tensor to_fp16_scales(const at::Tensor& scales, bool allow_rounding, const std::string& name) {
  const at::Tensor s = scales.to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor half = s.to(at::kHalf);
  const at::Tensor back = half.to(at::kFloat);
  const float* sp = s.data_ptr<float>();
  const float* bp = back.data_ptr<float>();
  for (int64_t k = 0; k < s.numel(); ++k) {
    if (!(sp[k] > 0.0f) || !std::isfinite(sp[k]))
      fail("{}: scale {} at flat index {} is not a positive finite number", name, sp[k], k);
    if (!std::isfinite(bp[k]) || bp[k] == 0.0f) {
      fail("{}: scale {} at flat index {} is outside the float16 range GPTQ checkpoints store",
           name, sp[k], k);
    }
    if (bp[k] != sp[k] && !allow_rounding) {
      fail(
          "{}: scale {} at flat index {} is not a float16 value; GPTQ stores float16 scales, so "
          "round scales to float16 before computing the dequantized weights (or allow rounding)",
          name, sp[k], k);
    }
  }
  return half;
}

}  // namespace

int64_t gptq_pack_multiple(int bits) {
  check_bits(bits, "GPTQ packing");
  return bits == 3 ? 32 : 32 / bits;
}

at::Tensor pack_gptq_rows(const at::Tensor& values, int bits, std::string_view what) {
  check_bits(bits, what);
  const at::Tensor v = checked_values(values, bits, what);
  check_multiple(v.size(0), bits, what, "row count");
  return pack_dim0(v, bits);
}

at::Tensor unpack_gptq_rows(const at::Tensor& packed, int bits, std::string_view what) {
  check_bits(bits, what);
  const at::Tensor p = checked_packed(packed, what);
  if (bits == 3 && p.size(0) % 3 != 0)
    fail("{}: {} rows of 3-bit words do not form whole 3-word blocks", what, p.size(0));
  return unpack_dim0(p, bits);
}

at::Tensor pack_gptq_columns(const at::Tensor& values, int bits, std::string_view what) {
  check_bits(bits, what);
  check_2d(values, what);
  const at::Tensor v = checked_values(values.t(), bits, what);
  check_multiple(v.size(0), bits, what, "column count");
  return pack_dim0(v, bits).t().contiguous();
}

at::Tensor unpack_gptq_columns(const at::Tensor& packed, int bits, std::string_view what) {
  check_bits(bits, what);
  const at::Tensor p = checked_packed(packed, what).t().contiguous();
  if (bits == 3 && p.size(0) % 3 != 0)
    fail("{}: {} columns of 3-bit words do not form whole 3-word blocks", what, p.size(0));
  return unpack_dim0(p, bits).t().contiguous();
}

GptqPackedLayer pack_gptq_layer(const QuantizedWeight& weight, const std::string& name,
                                const GptqPackOptions& options) {
  const int bits = weight.bits;
  check_bits(bits, name);
  check_2d(weight.codes, name + " codes");
  check_2d(weight.scales, name + " scales");
  check_2d(weight.zeros, name + " zeros");
  const int64_t out = weight.codes.size(0), in = weight.codes.size(1);
  check_multiple(in, bits, name, "in_features");
  check_multiple(out, bits, name, "out_features");
  const int64_t group_size = weight.group_size > 0 ? weight.group_size : in;
  if (weight.group_size != -1 && weight.group_size <= 0)
    fail("{}: group size {} is neither positive nor -1", name, weight.group_size);
  if (in % group_size != 0) {
    fail(
        "{}: group size {} does not divide in_features {}; GPTQ checkpoints need equal groups "
        "(uneven groups are allowed inside rqat but refused at export)",
        name, group_size, in);
  }
  const int64_t groups = in / group_size;
  if (weight.scales.sizes() != at::IntArrayRef{out, groups} ||
      weight.zeros.sizes() != at::IntArrayRef{out, groups}) {
    fail("{}: scales {} and zeros {} must both be ({}, {}) for group size {}", name,
         c10::str(weight.scales.sizes()), c10::str(weight.zeros.sizes()), out, groups,
         weight.group_size);
  }

  // g_idx: any assignment of columns to groups (act-order permutes it), each group in range.
  at::Tensor g_idx;
  if (weight.g_idx.defined()) {
    if (weight.g_idx.dim() != 1 || weight.g_idx.size(0) != in)
      fail("{}: g_idx has shape {}, expected ({})", name, c10::str(weight.g_idx.sizes()), in);
    g_idx = weight.g_idx.to(at::kCPU, at::kInt).contiguous();
  } else {
    g_idx = at::arange(in, at::kInt).div(group_size, "floor").to(at::kInt);
  }
  if (in > 0 && (g_idx.min().item<int>() < 0 || g_idx.max().item<int64_t>() >= groups))
    fail("{}: g_idx values must lie in [0, {})", name, groups);

  // Zero points: integral, in range, and for v1 representable as zero - 1.
  const at::Tensor zeros = weight.zeros.to(at::kCPU, at::kFloat);
  if (!at::equal(zeros, zeros.round()))
    fail("{}: zero points must be integers (GPTQ stores integer zero points)", name);
  const int64_t max_code = (int64_t{1} << bits) - 1;
  at::Tensor stored_zeros = zeros.to(at::kLong);
  if (stored_zeros.numel() > 0 &&
      (stored_zeros.min().item<int64_t>() < 0 || stored_zeros.max().item<int64_t>() > max_code))
    fail("{}: zero points must lie in [0, {}] for {} bits", name, max_code, bits);
  if (options.format == GptqFormat::kV1) {
    const int64_t zero_points_at_zero = stored_zeros.eq(0).sum().item<int64_t>();
    if (zero_points_at_zero > 0 && !options.allow_v1_zero_wrap) {
      fail(
          "{}: {} groups have zero point 0, which checkpoint_format 'gptq' (v1, zero points "
          "stored minus one) cannot represent; export as 'gptq_v2' or keep zero points >= 1",
          name, zero_points_at_zero);
    }
    // Per-field wrap: the field holds 2^bits - 1 and no neighbouring field is touched.
    stored_zeros = (stored_zeros - 1).bitwise_and(max_code);
  }

  GptqPackedLayer packed;
  packed.qweight = pack_gptq_rows(weight.codes.t(), bits, name + ".qweight");
  packed.qzeros = pack_gptq_columns(stored_zeros.t(), bits, name + ".qzeros");
  packed.scales = to_fp16_scales(weight.scales.t(), options.round_scales_to_fp16, name + ".scales");
  packed.g_idx = g_idx;
  return packed;
}

QuantizedWeight unpack_gptq_layer(const GptqPackedLayer& packed, int bits, int64_t group_size,
                                  GptqFormat format, int64_t in_features, int64_t out_features,
                                  const std::string& name) {
  check_bits(bits, name);
  check_multiple(in_features, bits, name, "in_features");
  check_multiple(out_features, bits, name, "out_features");
  const int64_t words_in = in_features * bits / 32, words_out = out_features * bits / 32;
  const auto expect = [&](const at::Tensor& t, const char* suffix, at::IntArrayRef shape) {
    if (!t.defined()) fail("{}.{}: missing", name, suffix);
    if (t.sizes() != shape) {
      fail("{}.{}: shape {} does not match the layer ({} in, {} out, {} bits): expected {}", name,
           suffix, c10::str(t.sizes()), in_features, out_features, bits, c10::str(shape));
    }
  };
  expect(packed.qweight, "qweight", {words_in, out_features});
  if (!packed.scales.defined() || packed.scales.dim() != 2)
    fail("{}.scales: expected a 2-D (groups, out) tensor", name);
  const int64_t groups = packed.scales.size(0);
  if (groups < 1) fail("{}.scales: no groups", name);
  expect(packed.scales, "scales", {groups, out_features});
  expect(packed.qzeros, "qzeros", {groups, words_out});
  if (!packed.scales.is_floating_point())
    fail("{}.scales: expected floating-point scales, got {}", name,
         c10::toString(packed.scales.scalar_type()));

  QuantizedWeight w;
  w.bits = bits;
  w.group_size = group_size;
  if (packed.g_idx.defined()) {
    expect(packed.g_idx, "g_idx", {in_features});
    if (packed.g_idx.is_floating_point()) fail("{}.g_idx: expected integer group indices", name);
    w.g_idx = packed.g_idx.to(at::kCPU, at::kInt).contiguous();
  } else {
    if (group_size <= 0 && group_size != -1) fail("{}: group size {} is invalid", name, group_size);
    const int64_t g = group_size > 0 ? group_size : in_features;
    w.g_idx = at::arange(in_features, at::kInt).div(g, "floor").to(at::kInt);
  }
  if (in_features > 0 && (w.g_idx.min().item<int>() < 0 || w.g_idx.max().item<int64_t>() >= groups))
    fail("{}.g_idx: values must lie in [0, {}) (the scales have {} groups)", name, groups, groups);

  w.codes =
      unpack_gptq_rows(packed.qweight, bits, name + ".qweight").t().to(at::kByte).contiguous();
  at::Tensor zeros = unpack_gptq_columns(packed.qzeros, bits, name + ".qzeros");
  if (format == GptqFormat::kV1) zeros = zeros + 1;
  w.zeros = zeros.t().to(at::kFloat).contiguous();
  w.scales = packed.scales.to(at::kCPU, at::kFloat).t().contiguous();
  if (!(w.scales.min().item<float>() > 0.0f) || !at::isfinite(w.scales).all().item<bool>())
    fail("{}.scales: scales must be positive and finite", name);
  return w;
}

}  // namespace rqat::quant
