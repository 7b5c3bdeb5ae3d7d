// See low_bit_weight.h. Packing runs once per layer at load, on the CPU, one output row per task.
#include "ops/low_bit_weight.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "io/error.h"
#include "ops/weight_formats.h"

namespace rqat::ops {
namespace {

int64_t tensor_bytes(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

// The words of one block of 32 codes (see the header), from codes[0..count) (the rest 0).
template <class Code>
void pack_block(const Code* codes, int64_t count, int bits, uint32_t* words) {
  for (int w = 0; w < bits; ++w) words[w] = 0;
  for (int64_t k = 0; k < count; ++k) {
    const auto code = static_cast<uint32_t>(codes[k]);
    if (bits == 3) {
      words[k / 16] |= (code & 3u) << (2 * (k % 16));
      words[2] |= (code >> 2) << k;
    } else if (bits == 4) {
      const int64_t j = k % 16;
      words[2 * (k / 16) + j % 2] |= code << (4 * (j / 2));
    } else {
      const int64_t bit = k * bits;
      words[bit / 32] |= code << (bit % 32);
    }
  }
}

}  // namespace

int64_t LowBitWeight::bytes() const {
  const int64_t half_copies =  // once the int8 kernel made them
      half_scales ? tensor_bytes(half_scales->scales) + tensor_bytes(half_scales->zeros) : 0;
  return tensor_bytes(codes) + tensor_bytes(scales) + tensor_bytes(zeros) +
         tensor_bytes(input_order) + half_copies;
}

LowBitWeight LowBitWeight::to(c10::Device device) const {
  LowBitWeight out = *this;
  out.half_scales = std::make_shared<LowBitHalfScales>();
  out.codes = codes.to(device);
  out.scales = scales.to(device);
  out.zeros = zeros.to(device);
  if (input_order.defined()) out.input_order = input_order.to(device);
  return out;
}

LowBitWeight pack_low_bit(const at::Tensor& codes, const at::Tensor& scales,
                          const at::Tensor& zeros, int bits, int64_t group_size,
                          const at::Tensor& input_order, const char* what) {
  if (!integer_bits_supported(bits))
    fail("{}: {}-bit weights have no packed kernel ({} bits)", what, bits, integer_bits_choices());
  if (codes.dim() != 2) fail("{}: codes must be (out, in), got {} dims", what, codes.dim());
  LowBitWeight w;
  w.bits = bits;
  w.out_features = codes.size(0);
  w.in_features = codes.size(1);
  w.group_size = group_size > 0 ? group_size : w.in_features;
  if (w.out_features < 1 || w.in_features < 1) fail("{}: empty weight", what);
  const int64_t groups = w.groups();
  if (scales.sizes() != at::IntArrayRef{w.out_features, groups} || zeros.sizes() != scales.sizes())
    fail("{}: scales and zeros must be ({}, {}), got {} and {}", what, w.out_features, groups,
         c10::str(scales.sizes()), c10::str(zeros.sizes()));
  if (input_order.defined() && (input_order.dim() != 1 || input_order.numel() != w.in_features))
    fail("{}: the input order must have {} entries", what, w.in_features);
  // uint8 codes (what quantizers and GPTQ unpacking make) are read as they are; other integer
  // types as int32 (a copy 4x the codes is a load-time peak worth avoiding).
  const at::Tensor c = codes.scalar_type() == at::kByte ? codes.to(at::kCPU).contiguous()
                                                        : codes.to(at::kCPU, at::kInt).contiguous();
  const int64_t max_code = (int64_t{1} << bits) - 1;
  if (c.numel() > 0 && (c.min().item<int64_t>() < 0 || c.max().item<int64_t>() > max_code))
    fail("{}: codes outside [0, {}]", what, max_code);

  const int64_t blocks = w.blocks_per_group(), words = w.words_per_row();
  at::Tensor packed = at::empty({w.out_features, words}, at::kInt);
  auto* dst = reinterpret_cast<uint32_t*>(packed.data_ptr<int32_t>());
  const auto pack_rows = [&](const auto* src) {
    at::parallel_for(0, w.out_features, 16, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o)
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t first = g * w.group_size;
          const int64_t length = std::min(w.group_size, w.in_features - first);
          for (int64_t b = 0; b < blocks; ++b) {
            const int64_t start = b * 32;
            const int64_t count = std::clamp<int64_t>(length - start, 0, 32);
            pack_block(src + o * w.in_features + first + start, count, bits,
                       dst + o * words + (g * blocks + b) * bits);
          }
        }
    });
  };
  if (c.scalar_type() == at::kByte)
    pack_rows(c.data_ptr<uint8_t>());
  else
    pack_rows(c.data_ptr<int32_t>());
  w.codes = packed;
  w.scales = scales.to(at::kCPU, at::kFloat).contiguous();
  w.zeros = zeros.to(at::kCPU, at::kFloat).contiguous();
  if (input_order.defined()) w.input_order = input_order.to(at::kCPU, at::kLong).contiguous();
  return w;
}

at::Tensor unpack_low_bit_codes(const LowBitWeight& w) {
  // Tensor ops on the weight's own device (no loop): every code is one word shifted and masked.
  // Right shifts of int32 are arithmetic; the masks drop the copies of the sign bit.
  const int64_t blocks = w.groups() * w.blocks_per_group();
  const at::Tensor words = w.codes.view({w.out_features, blocks, w.bits});
  const auto longs = at::TensorOptions(at::kLong).device(w.codes.device());
  const auto ints = at::TensorOptions(at::kInt).device(w.codes.device());
  const at::Tensor k = at::arange(32, longs);
  at::Tensor codes;
  if (w.bits == 3) {
    const at::Tensor low = words.index_select(2, k.div(16, "floor"))
                               .bitwise_right_shift(k.remainder(16).mul(2).to(at::kInt))
                               .bitwise_and(3);
    const at::Tensor high =
        words.select(2, 2).unsqueeze(2).bitwise_right_shift(k.to(at::kInt)).bitwise_and(1);
    codes = low.bitwise_or(high.bitwise_left_shift(at::full({}, 2, ints)));
  } else if (w.bits == 4) {
    const at::Tensor j = k.remainder(16);
    codes = words.index_select(2, k.div(16, "floor").mul(2).add(j.remainder(2)))
                .bitwise_right_shift(j.div(2, "floor").mul(4).to(at::kInt))
                .bitwise_and(15);
  } else {
    const at::Tensor bit = k.mul(w.bits);
    codes = words.index_select(2, bit.div(32, "floor"))
                .bitwise_right_shift(bit.remainder(32).to(at::kInt))
                .bitwise_and((1 << w.bits) - 1);
  }
  // (out, groups, blocks_per_group * 32) -> drop each group's padding -> (out, in).
  codes = codes.reshape({w.out_features, w.groups(), w.blocks_per_group() * 32});
  if (w.blocks_per_group() * 32 != w.group_size) codes = codes.narrow(2, 0, w.group_size);
  return codes.reshape({w.out_features, -1}).narrow(1, 0, w.in_features).to(at::kInt).contiguous();
}

at::Tensor dequantize_low_bit(const LowBitWeight& w) {
  const at::Tensor codes = unpack_low_bit_codes(w).to(at::kFloat);
  const at::Tensor group =  // each kernel column's group
      at::arange(w.in_features, at::TensorOptions(at::kLong).device(w.codes.device()))
          .div(w.group_size, "floor");
  const at::Tensor kernel_order =
      (codes - w.zeros.index_select(1, group)) * w.scales.index_select(1, group);
  if (!w.input_order.defined()) return kernel_order;
  // Column j of the kernel is input input_order[j]: put the columns back.
  at::Tensor out = at::empty_like(kernel_order);
  out.index_copy_(1, w.input_order, kernel_order);
  return out;
}

at::Tensor in_kernel_order(const at::Tensor& x, const LowBitWeight& weight) {
  const at::Tensor rows = x.reshape({-1, weight.in_features});
  return weight.input_order.defined() ? rows.index_select(1, weight.input_order) : rows;
}

const LowBitHalfScales* exact_half_scales(const LowBitWeight& w) {
  if (!w.half_scales) return nullptr;
  LowBitHalfScales& half = *w.half_scales;
  std::call_once(half.made, [&] {
    const at::Tensor scales = w.scales.to(at::kHalf), zeros = w.zeros.to(at::kHalf);
    if (at::equal(scales.to(at::kFloat), w.scales) && at::equal(zeros.to(at::kFloat), w.zeros)) {
      half.scales = scales.contiguous();
      half.zeros = zeros.contiguous();
    }
  });
  return half.scales.defined() ? &half : nullptr;
}

bool low_bit_zeros_shared(const LowBitWeight& w) {
  if (!w.half_scales || w.zeros.numel() == 0) return false;
  LowBitHalfScales& half = *w.half_scales;
  std::call_once(half.zeros_checked, [&] {
    half.zeros_shared = w.zeros.eq(w.zeros.flatten()[0]).all().item<bool>();
  });
  return half.zeros_shared;
}

}  // namespace rqat::ops
